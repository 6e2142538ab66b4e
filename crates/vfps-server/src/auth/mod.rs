//! Who is calling, and whether they may: authentication by bearer token (a JWT
//! from the OIDC provider, or an access token of the database), authorization
//! by upstream's role rules or the token's grants, and the audit trail of
//! re-identification.
//!
//! # Layout
//! - [`rules`]: roles → permissions (`Authorization__AdminRoles`, `…__NamespaceRules`).
//! - [`jwt`]: OIDC discovery, the JWKS, and JWT verification.
//! - [`tokens`]: `vfps_sat_…` / `vfps_pat_…` tokens looked up by hash.
//! - [`audit`]: one JSON event per re-identifying, destroying or granting call.
//! - [`session`]: the admin UI's sealed sessions; [`ends`]: their sign-out,
//!   on every replica at once.
//!
//! Every transport asks [`Auth::check`] before it calls the service, and
//! [`Auth::audited`] wraps the audited operations. Verified credentials are
//! cached for `VFPS_TOKEN_CACHE_DURATION`, which is thereby the bound on how
//! long a revoked database token keeps working on a replica.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use vfps_core::{access::Permission, Error};
use vfps_store::Store;

use crate::{cache::TtlCache, config::Authorization, metrics::Metrics};
use session::Session;

pub mod audit;
pub mod ends;
pub mod jwt;
pub mod rules;
pub mod session;
pub mod tokens;

/// What a call wants to do, and to which namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    CreateNamespace,
    DeleteNamespace,
    /// Read one namespace's settings.
    GetNamespace,
    /// List namespaces: everyone authenticated, filtered to what they may see.
    ListNamespaces,
    CreatePseudonym,
    /// Reverse lookup: re-identification.
    GetPseudonym,
    /// An original's pseudonym, never made (FHIR `$get-pseudonym`).
    FindPseudonym,
    /// Erase an original's entry (FHIR `$delete-pseudonym`, `$anonymize-original`).
    ErasePseudonym,
    ListPseudonyms,
    /// List access tokens.
    ManageTokens,
    /// Mint an access token: an admin, granting only what it holds itself.
    CreateToken,
    /// Revoke an access token.
    RevokeToken,
    /// End every admin UI session of a user.
    EndSessions,
    /// Create a CSV job pseudonymizing into a namespace (per namespace).
    PseudonymizeFile,
    /// Create a CSV job de-pseudonymizing from a namespace (per namespace).
    DepseudonymizeFile,
    /// Read, start, list and delete one's own CSV jobs (an admin: anyone's).
    ManageJobs,
    /// Cancel a CSV job.
    CancelJob,
    /// Fetch a CSV job's output: through vfps, or by a presigned address
    /// (whose issue is the event, vfps not seeing the download itself).
    DownloadJob,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Self::CreateNamespace => "NamespaceService/Create",
            Self::DeleteNamespace => "NamespaceService/Delete",
            Self::GetNamespace => "NamespaceService/Get",
            Self::ListNamespaces => "NamespaceService/GetAll",
            Self::CreatePseudonym => "PseudonymService/Create",
            Self::GetPseudonym => "PseudonymService/Get",
            Self::FindPseudonym => "Pseudonyms/Find",
            Self::ErasePseudonym => "Pseudonyms/Erase",
            Self::ListPseudonyms => "PseudonymService/List",
            Self::ManageTokens => "Tokens",
            Self::CreateToken => "Tokens/Create",
            Self::RevokeToken => "Tokens/Revoke",
            Self::EndSessions => "Sessions/End",
            Self::PseudonymizeFile | Self::DepseudonymizeFile => "CsvJobService/Create",
            Self::ManageJobs => "CsvJobService",
            Self::CancelJob => "CsvJobService/Cancel",
            Self::DownloadJob => "CsvJobService/Download",
        }
    }

    /// What it needs: admin, a permission in its namespace, or any permission
    /// in its namespace (reading a namespace's settings).
    fn needs(self) -> Need {
        match self {
            Self::CreateNamespace
            | Self::DeleteNamespace
            | Self::ManageTokens
            | Self::CreateToken
            | Self::RevokeToken
            | Self::EndSessions => Need::Admin,
            Self::CreatePseudonym | Self::PseudonymizeFile | Self::FindPseudonym => {
                Need::Permission(Permission::Write)
            }
            Self::ErasePseudonym => Need::Permission(Permission::Erase),
            Self::DepseudonymizeFile => Need::Permission(Permission::ReverseLookup),
            Self::ManageJobs | Self::CancelJob | Self::DownloadJob => Need::Authenticated,
            Self::GetPseudonym => Need::Permission(Permission::ReverseLookup),
            Self::ListPseudonyms => Need::Permission(Permission::Read),
            Self::GetNamespace => Need::AnyPermission,
            Self::ListNamespaces => Need::Authenticated,
        }
    }

    /// Audited whatever the outcome: they expose who is behind pseudonyms, or
    /// which pseudonyms exist, or destroy them, or move whole files of them,
    /// or hand out or take back the rights to do so.
    pub fn audited(self) -> bool {
        matches!(
            self,
            Self::GetPseudonym
                | Self::ListPseudonyms
                | Self::DeleteNamespace
                | Self::ErasePseudonym
                | Self::PseudonymizeFile
                | Self::DepseudonymizeFile
                | Self::CancelJob
                | Self::DownloadJob
                | Self::CreateToken
                | Self::RevokeToken
                | Self::EndSessions
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Admin,
    Permission(Permission),
    AnyPermission,
    Authenticated,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Typed, so that no two kinds of caller can share one: `jwt:<iss>#<sub>`
    /// for a JWT (the UI's sessions included), `token:<id>` for a database
    /// token, `anonymous` with authorization off. What a CSV job's owner is
    /// compared with. Never a credential.
    pub subject: String,
    /// The database token's id, if that is how the caller authenticated.
    pub token_id: Option<String>,
    pub access: Access,
    /// After this the credential is no longer valid (JWT `exp` plus leeway).
    pub valid_until: Option<std::time::SystemTime>,
}

/// What a principal may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Authorization is off: everything.
    Everything,
    /// A JWT's roles, judged by the configured rules.
    Roles(Vec<String>),
    /// A database token's own grants.
    Grants {
        admin: bool,
        grants: Vec<vfps_core::access::Grant>,
    },
}

/// Authentication and authorization for every transport. Cheap to clone.
#[derive(Clone)]
pub struct Auth {
    inner: Option<Arc<Enabled>>,
    metrics: Metrics,
    /// Who every caller is with authorization off.
    anonymous: Arc<Principal>,
    /// Seals the admin UI's sessions, which are credentials too (the
    /// `Session` scheme, see [`session`]).
    sessions: Arc<session::SessionKey>,
}

struct Enabled {
    rules: rules::Rules,
    oidc: Option<jwt::Verifier>,
    tokens: tokens::Verifier,
    /// SHA-256 of a bearer credential → who it is, for `VFPS_TOKEN_CACHE_DURATION`.
    verified: TtlCache<[u8; 32], Arc<Principal>>,
    /// Which UI sessions were ended before they expired.
    ends: ends::EndedSessions,
}

/// Most verified credentials remembered per replica.
const VERIFIED_CACHE_ENTRIES: usize = 10_000;
/// Longest bearer credential looked at; a longer one is refused unread.
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

impl Auth {
    /// Authorization off: every call is allowed, as upstream's default.
    pub fn disabled(metrics: Metrics) -> Self {
        Self {
            inner: None,
            metrics,
            sessions: Arc::new(session::SessionKey::random()),
            anonymous: Arc::new(Principal {
                subject: "anonymous".into(),
                token_id: None,
                access: Access::Everything,
                valid_until: None,
            }),
        }
    }

    pub fn new(
        config: &Authorization,
        store: Arc<dyn Store>,
        metrics: Metrics,
        sessions: Arc<session::SessionKey>,
    ) -> Self {
        if !config.enabled {
            return Self {
                sessions,
                ..Self::disabled(metrics)
            };
        }
        Self {
            anonymous: Self::disabled(metrics.clone()).anonymous,
            sessions,
            inner: Some(Arc::new(Enabled {
                rules: rules::Rules::new(config),
                oidc: config
                    .authority
                    .as_ref()
                    .map(|a| jwt::Verifier::new(a, config)),
                tokens: tokens::Verifier::new(store.clone()),
                ends: ends::EndedSessions::new(store),
                verified: TtlCache::new(config.token_cache_duration, VERIFIED_CACHE_ENTRIES),
            })),
            metrics,
        }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The key of the admin UI's sessions.
    pub fn sessions(&self) -> &session::SessionKey {
        &self.sessions
    }

    /// Authenticates the `Authorization` header's value and authorizes
    /// `operation` in `namespace`, waiting no later than `deadline` for the
    /// identity provider or the database.
    pub async fn check(
        &self,
        authorization: AuthHeader<'_>,
        operation: Operation,
        namespace: Option<&str>,
        deadline: Instant,
    ) -> Result<Arc<Principal>, Error> {
        let principal = self.authenticate(authorization, deadline).await?;
        self.authorize(&principal, operation, namespace)?;
        Ok(principal)
    }

    /// Who the `Authorization` header's value says the caller is; for calls
    /// whose namespace is known only once the body is read (authenticated
    /// first, so an unauthenticated caller learns nothing from the body's errors).
    pub async fn authenticate(
        &self,
        authorization: AuthHeader<'_>,
        deadline: Instant,
    ) -> Result<Arc<Principal>, Error> {
        let Some(enabled) = &self.inner else {
            return Ok(self.anonymous.clone());
        };
        if let Some(sealed) = session_credential(authorization) {
            let ended = || {
                Error::unauthenticated("the UI session has ended or is not valid; sign in again")
            };
            // Opened here, not cached: it costs microseconds.
            let session = self.sessions.open_session(sealed).ok_or_else(ended)?;
            if session.recheck_due() {
                // A page renews it (the API cannot set its cookie).
                return Err(Error::unauthenticated(
                    "the UI session's roles are due to be confirmed with the identity provider: \
                     reload the page",
                ));
            }
            let principal = session.principal().ok_or_else(ended)?;
            let signed_out = tokio::time::timeout_at(deadline.into(), enabled.ends.ended(&session, deadline))
                .await
                .unwrap_or_else(|_| {
                    Err(Error::unavailable(
                        "whether the UI session was signed out could not be read within the call's deadline",
                    ))
                })?;
            if signed_out {
                return Err(ended());
            }
            return Ok(Arc::new(principal));
        }
        tokio::time::timeout_at(
            deadline.into(),
            enabled.authenticate(authorization, deadline),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Error::unavailable(
                "the credentials could not be verified within the call's deadline",
            ))
        })
    }

    /// `PERMISSION_DENIED` unless `principal` may do `operation` in `namespace`.
    pub fn authorize(
        &self,
        principal: &Principal,
        operation: Operation,
        namespace: Option<&str>,
    ) -> Result<(), Error> {
        match &self.inner {
            None => Ok(()),
            Some(e) => e.rules.authorize(principal, operation, namespace),
        }
    }

    /// Whether `principal` has an admin role (everyone, with authorization off).
    pub fn is_admin(&self, principal: &Principal) -> bool {
        self.authorize(principal, Operation::ManageTokens, None)
            .is_ok()
    }

    /// `PERMISSION_DENIED` naming the first grant `principal` does not hold
    /// itself: a right is granted only by someone who has it (`admin` too).
    pub fn may_grant(
        &self,
        principal: &Principal,
        admin: bool,
        grants: &[vfps_core::access::Grant],
    ) -> Result<(), Error> {
        match &self.inner {
            None => Ok(()),
            Some(e) => e.rules.may_grant(principal, admin, grants),
        }
    }

    /// Writes one audit event (see [`audit`]).
    pub fn record(&self, event: &audit::Event<'_>) {
        audit::record(&self.metrics, event);
    }

    /// Ends `session` on every replica (its sign-out); acknowledged once no
    /// replica takes it any more. Nothing to do with authorization off.
    pub async fn end_session(&self, session: &Session) -> Result<(), Error> {
        match &self.inner {
            Some(e) if session.signed_in() => {
                let expires =
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(session.expires_at);
                e.ends.end(&ends::session_key(session), expires).await
            }
            _ => Ok(()),
        }
    }

    /// Ends every session of `subject` (a typed subject) begun until now, on
    /// every replica, for `revoker` (an admin); `lifetime`: the longest a
    /// session lives. An audit event whatever the outcome.
    pub async fn end_sessions_of(
        &self,
        revoker: &Principal,
        subject: &str,
        lifetime: std::time::Duration,
    ) -> Result<(), Error> {
        let result = async {
            self.authorize(revoker, Operation::EndSessions, None)?;
            if subject.is_empty() || subject.len() > 1024 || subject.chars().any(char::is_control) {
                return Err(Error::invalid_argument(
                    "subject must be a caller's typed subject, e.g. jwt:<issuer>#<sub>",
                ));
            }
            match &self.inner {
                Some(e) => {
                    e.ends
                        .end(
                            &ends::subject_key(subject),
                            std::time::SystemTime::now() + lifetime,
                        )
                        .await
                }
                None => Err(Error::failed_precondition(
                    "sessions are ended only while authorization is on",
                )),
            }
        }
        .await;
        self.record(&audit::Event {
            principal: Some(revoker),
            operation: Operation::EndSessions,
            namespace: "",
            job: None,
            token: None,
            outcome: result.as_ref().map(|_| 1).map_err(|e| e.kind),
        });
        result
    }

    /// Whether `principal` may see namespace `name` in a listing.
    pub fn may_see(&self, principal: &Principal, name: &str) -> bool {
        self.authorize(principal, Operation::GetNamespace, Some(name))
            .is_ok()
    }

    /// Checks, runs and audits one audited operation: the event names the
    /// caller (when known), the outcome and `items(result)` — never a value.
    pub async fn audited<T>(
        &self,
        authorization: AuthHeader<'_>,
        operation: Operation,
        namespace: &str,
        deadline: Instant,
        call: impl std::future::Future<Output = Result<T, Error>>,
        items: impl Fn(&T) -> u64,
    ) -> Result<T, Error> {
        let who = self.authenticate(authorization, deadline).await;
        let allowed = who
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| self.authorize(p, operation, Some(namespace)));
        let result = match allowed {
            Ok(()) => call.await,
            Err(e) => Err(e),
        };
        audit::record(
            &self.metrics,
            &audit::Event {
                principal: who.as_ref().ok().map(|p| &**p),
                operation,
                namespace,
                job: None,
                token: None,
                outcome: result.as_ref().map(&items).map_err(|e| e.kind),
            },
        );
        result
    }
}

/// `op` again while it fails transiently (the database away, a failover),
/// with capped exponential backoff, until `deadline`: the checks a call
/// makes of the database are held through a failover as its own store calls
/// are, rather than failing it at once.
async fn retry_transient<T, F, Fut>(
    deadline: Instant,
    what: &'static str,
    mut op: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut backoff = Duration::from_millis(25);
    loop {
        match op().await {
            Err(e) if e.is_transient() && Instant::now() + backoff < deadline => {
                tracing::debug!(what, error = %e, "transient database error, retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

impl Enabled {
    async fn authenticate(
        &self,
        authorization: AuthHeader<'_>,
        deadline: Instant,
    ) -> Result<Arc<Principal>, Error> {
        let credential = bearer(authorization)?;
        let key: [u8; 32] = vfps_core::access::TokenHash::of(credential).0;
        let now = std::time::SystemTime::now();
        if let Some((p, _)) = self.verified.get(&key) {
            if p.valid_until.is_none_or(|u| now < u) {
                return Ok(p);
            }
        }
        let read_at = Instant::now();
        let principal = if let Some(kind) = vfps_core::access::database_token_kind(credential) {
            self.tokens.verify(credential, kind, deadline).await?
        } else if let Some(oidc) = &self.oidc {
            oidc.verify(credential).await?
        } else {
            return Err(Error::unauthenticated(
                "the bearer token is not an access token of this service, and no identity provider is configured",
            ));
        };
        let principal = Arc::new(principal);
        self.verified.insert(key, principal.clone(), read_at);
        Ok(principal)
    }
}

/// A call's `Authorization`, as sent: none, one value, or several (which
/// one would count is anyone's guess, so none does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthHeader<'a> {
    Missing,
    One(&'a [u8]),
    Several,
}

/// The `Authorization` of a call whose header (or metadata) values are `values`.
pub fn single<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> AuthHeader<'a> {
    match (values.next(), values.next()) {
        (None, _) => AuthHeader::Missing,
        (Some(one), None) => AuthHeader::One(one),
        (Some(_), Some(_)) => AuthHeader::Several,
    }
}

/// The sealed session of an `Authorization: Session <sealed>` header: the
/// admin UI's cookie, which its pages and scripts present (see [`session`]).
pub fn session_credential(header: AuthHeader<'_>) -> Option<&str> {
    let AuthHeader::One(raw) = header else {
        return None;
    };
    let text = std::str::from_utf8(raw).ok()?.trim();
    let (scheme, sealed) = text.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("session")
        .then_some(sealed.trim())
}

/// The credential of an `Authorization: Bearer <credential>` header.
pub fn bearer(header: AuthHeader<'_>) -> Result<&str, Error> {
    let raw = match header {
        AuthHeader::One(raw) => raw,
        AuthHeader::Missing => {
            return Err(Error::unauthenticated(
                "this call needs an Authorization: Bearer <token> header",
            ))
        }
        AuthHeader::Several => {
            return Err(Error::unauthenticated(
                "the call has more than one Authorization header; send one",
            ))
        }
    };
    if raw.len() > MAX_CREDENTIAL_BYTES + 7 {
        return Err(Error::unauthenticated(format!(
            "the Authorization header is longer than {MAX_CREDENTIAL_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(raw)
        .map_err(|_| Error::unauthenticated("the Authorization header is not text"))?;
    let (scheme, credential) = text
        .trim()
        .split_once(' ')
        .ok_or_else(|| Error::unauthenticated("the Authorization header must be Bearer <token>"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Error::unauthenticated(
            "the Authorization header must use the Bearer scheme",
        ));
    }
    let credential = credential.trim();
    if credential.is_empty() || credential.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(Error::unauthenticated(
            "the bearer token is empty or not printable",
        ));
    }
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_with_several_authorization_headers_has_none_that_counts() {
        let one = [&b"Bearer a"[..]];
        assert_eq!(bearer(single(one.into_iter())).unwrap(), "a");
        let two = [&b"Bearer a"[..], b"Bearer b"];
        let e = bearer(single(two.into_iter())).unwrap_err();
        assert!(e.message.contains("more than one"), "{e:?}");
        assert_eq!(single(std::iter::empty()), AuthHeader::Missing);
    }

    #[test]
    fn bearer_headers_are_parsed_strictly() {
        assert_eq!(
            bearer(AuthHeader::One(b"Bearer abc.def")).unwrap(),
            "abc.def"
        );
        assert_eq!(bearer(AuthHeader::One(b"bearer  abc ")).unwrap(), "abc");
        for bad in [
            &b"Basic dXNlcg=="[..],
            b"Bearer",
            b"Bearer ",
            b"abc",
            b"Bearer a\x01b",
            b"Bearer \xff",
        ] {
            let e = bearer(AuthHeader::One(bad)).unwrap_err();
            assert_eq!(e.kind, vfps_core::ErrorKind::Unauthenticated, "{bad:?}");
        }
        let long = format!("Bearer {}", "a".repeat(MAX_CREDENTIAL_BYTES + 1));
        assert!(bearer(AuthHeader::One(long.as_bytes())).is_err());
        assert_eq!(
            bearer(AuthHeader::Missing).unwrap_err().kind,
            vfps_core::ErrorKind::Unauthenticated
        );
    }
}
