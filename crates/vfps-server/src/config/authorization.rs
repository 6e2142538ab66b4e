//! `Authorization__*`, by upstream's names, and the `VFPS_*` settings of what
//! goes past upstream (database tokens, reflection).

use std::{collections::BTreeMap, time::Duration};

use super::env::{duration, parse_bool, setting, Env};

/// Who may call what. Off by default, as upstream (with a warning at start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// `Authorization__IsEnabled`.
    pub enabled: bool,
    /// `Authorization__Authority`: the OIDC issuer; its discovery document names
    /// the JWKS. Unset: only the database's access tokens are accepted.
    pub authority: Option<String>,
    /// `Authorization__Audience`: the `aud` every JWT must carry (unchecked when unset).
    pub audience: Option<String>,
    /// `Authorization__RoleClaimType` (`roles`): the claim holding the roles; a
    /// dotted path (`realm_access.roles`) reaches into nested claims.
    pub role_claim_type: String,
    /// `Authorization__AdminRoles__N`: may create and delete namespaces and
    /// manage access tokens.
    pub admin_roles: Vec<String>,
    /// `Authorization__NamespaceRules__N__*`.
    pub namespace_rules: Vec<NamespaceRule>,
    /// `Authorization__RequireHttpsMetadata` (true): refuse an `http://` authority.
    pub require_https_metadata: bool,
    /// `Authorization__ClockSkew` (30s): leeway on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// `Authorization__ClientId` and `ClientSecret`: the admin UI's confidential
    /// client for its sign-in (the secret is never logged).
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// `Authorization__UsePushedAuthorizationRequests` (true): the UI's sign-in
    /// pushes its authorization request when the issuer offers it (RFC 9126).
    pub use_pushed_authorization_requests: bool,
    /// `VFPS_JWKS_REFRESH_INTERVAL` (10s): the least time between two JWKS
    /// fetches caused by tokens with an unknown `kid`.
    pub jwks_refresh_interval: Duration,
    /// `VFPS_TOKEN_CACHE_DURATION` (5s): how long a verified credential is
    /// trusted without looking again, so also the longest a revoked database
    /// token keeps working on a replica.
    pub token_cache_duration: Duration,
}

/// Which roles give which permissions in a namespace (`Namespace` = name or `*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceRule {
    pub namespace: String,
    pub read_roles: Vec<String>,
    pub write_roles: Vec<String>,
    pub reverse_lookup_roles: Vec<String>,
    /// May erase an original's entry (delete or anonymize it).
    pub erase_roles: Vec<String>,
}

impl Default for Authorization {
    fn default() -> Self {
        Self {
            enabled: false,
            authority: None,
            audience: None,
            role_claim_type: "roles".into(),
            admin_roles: Vec::new(),
            namespace_rules: Vec::new(),
            require_https_metadata: true,
            clock_skew: Duration::from_secs(30),
            client_id: None,
            client_secret: None,
            use_pushed_authorization_requests: true,
            jwks_refresh_interval: Duration::from_secs(10),
            token_cache_duration: Duration::from_secs(5),
        }
    }
}

/// `VFPS_GRPC_REFLECTION` (true): serve gRPC server reflection.
pub(super) fn reflection(env: &Env, errors: &mut Vec<String>) -> bool {
    setting(
        env,
        errors,
        "VFPS_GRPC_REFLECTION",
        true,
        parse_bool,
        "true or false",
    )
}

/// The `Authorization__*` keys there are (lower case, without the prefix); a
/// list or rule key is checked where its entries are read.
const KEYS: [&str; 9] = [
    "isenabled",
    "authority",
    "audience",
    "roleclaimtype",
    "requirehttpsmetadata",
    "clockskew",
    // The admin UI's sign-in, as upstream configures it.
    "clientsecret",
    "clientid",
    "usepushedauthorizationrequests",
];

impl Authorization {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let d = Self::default();
        // A misspelt key (Audiance, IsEnable) would silently weaken the
        // checks: refused like every bad setting.
        for key in env.keys_with_prefix("Authorization__") {
            let rest = key["Authorization__".len()..].to_ascii_lowercase();
            let known = KEYS.contains(&rest.as_str())
                || rest.starts_with("adminroles__")
                || rest.starts_with("namespacerules__");
            if !known {
                errors.push(format!(
                    "{key}: unknown setting (known: Authorization__IsEnabled, Authority, Audience, \
                     RoleClaimType, RequireHttpsMetadata, ClockSkew, ClientId, ClientSecret, \
                     UsePushedAuthorizationRequests, AdminRoles__N, NamespaceRules__N__…)"
                ));
            }
        }
        let text = |key: &str| env.text(key);
        let authority = text("Authorization__Authority");
        if let Some(a) = &authority {
            if !(a.starts_with("https://") || a.starts_with("http://")) {
                errors.push(format!(
                    "Authorization__Authority={a:?} is not valid: expected an http(s) URL"
                ));
            }
        }
        let require_https_metadata = setting(
            env,
            errors,
            "Authorization__RequireHttpsMetadata",
            d.require_https_metadata,
            parse_bool,
            "true or false",
        );
        if let Some(a) = authority.as_deref().filter(|a| a.starts_with("http://")) {
            if require_https_metadata {
                errors.push(format!(
                    "Authorization__Authority={a:?} is plain http; set Authorization__RequireHttpsMetadata=false to allow it"
                ));
            }
        }
        let token_cache_duration = duration(
            env,
            errors,
            "VFPS_TOKEN_CACHE_DURATION",
            d.token_cache_duration,
        );
        if token_cache_duration > Duration::from_secs(300) {
            errors.push("VFPS_TOKEN_CACHE_DURATION must be at most 5m: it bounds how long a revoked token keeps working".into());
        }
        Self {
            enabled: setting(
                env,
                errors,
                "Authorization__IsEnabled",
                d.enabled,
                parse_bool,
                "true or false",
            ),
            authority,
            audience: text("Authorization__Audience"),
            role_claim_type: text("Authorization__RoleClaimType").unwrap_or(d.role_claim_type),
            admin_roles: list(env, errors, "Authorization__AdminRoles__"),
            namespace_rules: namespace_rules(env, errors),
            require_https_metadata,
            clock_skew: setting(
                env,
                errors,
                "Authorization__ClockSkew",
                d.clock_skew,
                super::parse_duration,
                "a duration such as 00:00:30 or 30s",
            ),
            client_id: text("Authorization__ClientId"),
            client_secret: text("Authorization__ClientSecret"),
            use_pushed_authorization_requests: setting(
                env,
                errors,
                "Authorization__UsePushedAuthorizationRequests",
                d.use_pushed_authorization_requests,
                parse_bool,
                "true or false",
            ),
            jwks_refresh_interval: duration(
                env,
                errors,
                "VFPS_JWKS_REFRESH_INTERVAL",
                d.jwks_refresh_interval,
            ),
            token_cache_duration,
        }
    }
}

/// `<prefix><N>` entries in index order, blank ones left out.
pub(super) fn list(env: &Env, errors: &mut Vec<String>, prefix: &str) -> Vec<String> {
    let mut by_index = BTreeMap::new();
    for (rest, value) in env.with_prefix(prefix) {
        match rest.parse::<u32>() {
            Ok(i) => {
                by_index.insert(i, value.trim().to_owned());
            }
            Err(_) => errors.push(format!("{prefix}{rest}: the index must be a number")),
        }
    }
    by_index.into_values().filter(|v| !v.is_empty()).collect()
}

/// `Authorization__NamespaceRules__<N>__{Namespace,ReadRoles__M,WriteRoles__M,ReverseLookupRoles__M,EraseRoles__M}`.
fn namespace_rules(env: &Env, errors: &mut Vec<String>) -> Vec<NamespaceRule> {
    const PREFIX: &str = "Authorization__NamespaceRules__";
    let mut by_index: BTreeMap<u32, NamespaceRule> = BTreeMap::new();
    for (rest, value) in env.with_prefix(PREFIX) {
        let Some((index, field)) = rest.split_once("__") else {
            errors.push(format!("{PREFIX}{rest}: expected {PREFIX}<N>__<Field>"));
            continue;
        };
        let Ok(index) = index.parse::<u32>() else {
            errors.push(format!("{PREFIX}{index}: the index must be a number"));
            continue;
        };
        let rule = by_index.entry(index).or_default();
        let value = value.trim().to_owned();
        let (kind, role_index) = field.split_once("__").unwrap_or((field, ""));
        let roles = match kind {
            "namespace" if role_index.is_empty() => {
                rule.namespace = value;
                continue;
            }
            "readroles" => &mut rule.read_roles,
            "writeroles" => &mut rule.write_roles,
            "reverselookuproles" => &mut rule.reverse_lookup_roles,
            "eraseroles" => &mut rule.erase_roles,
            _ => {
                errors.push(format!("{PREFIX}{index}__{field}: unknown field"));
                continue;
            }
        };
        if role_index.parse::<u32>().is_err() {
            errors.push(format!(
                "{PREFIX}{index}__{field}: expected {PREFIX}{index}__{kind}__<M>"
            ));
        } else if !value.is_empty() {
            roles.push(value);
        }
    }
    let mut out = Vec::new();
    for (i, rule) in by_index {
        if rule.namespace.is_empty() {
            errors.push(format!(
                "{PREFIX}{i}__Namespace: a namespace name or * is required"
            ));
        } else {
            out.push(rule);
        }
    }
    out
}
