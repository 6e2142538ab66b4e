//! JWT bearer tokens from an OIDC provider: the discovery document at
//! `<Authority>/.well-known/openid-configuration` names the issuer and the
//! JWKS; the JWKS is fetched once, then again when a token names a key it does
//! not have (at most once per `VFPS_JWKS_REFRESH_INTERVAL`, so a flood of
//! made-up `kid`s cannot make the service hammer the provider).
//!
//! A key is trusted only for the asymmetric algorithms it declares (or its
//! type implies): the token's header cannot pick `none` (not an algorithm
//! here at all) or HS256 with a public key as the secret.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant, SystemTime},
};

use jsonwebtoken::{
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse},
    Algorithm, DecodingKey, Validation,
};
use serde_json::Value;
use vfps_core::Error;

use super::{Access, Principal};
use crate::config::Authorization;

/// Largest discovery document or JWKS read.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Longest a fetch from the provider may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Verifier {
    authority: String,
    audience: Option<String>,
    /// The admin UI's client: a token issued to it with an ID token's own
    /// claims, or (unless the API's audience is that client too) whose only
    /// audience it is, is the UI's ID token, not a credential for the API.
    ui_client: Option<String>,
    /// `Authorization__Audience` names the UI's client: tokens for it are
    /// the API's too, and only an ID token's claims tell them apart.
    audience_is_ui: bool,
    role_claim: Vec<String>,
    leeway: Duration,
    refresh_interval: Duration,
    http: reqwest::Client,
    keys: RwLock<Option<Arc<KeySet>>>,
    /// Held by the one task fetching.
    fetching: tokio::sync::Mutex<LastFetch>,
}

/// When the last fetch began, and its error if it failed: until the refresh
/// interval has passed, callers get that error instead of another fetch, so
/// tokens sent while the provider fails cannot make vfps hammer it.
#[derive(Default)]
struct LastFetch {
    began: Option<Instant>,
    failed: Option<Error>,
}

/// What the provider published, as fetched at one time.
struct KeySet {
    issuer: String,
    keys: HashMap<String, Key>,
}

struct Key {
    decoding: DecodingKey,
    algorithms: Vec<Algorithm>,
}

fn unauthenticated(why: &str) -> Error {
    Error::unauthenticated(format!("the bearer token was refused: {why}"))
}

impl Verifier {
    pub fn new(authority: &str, config: &Authorization) -> Self {
        Self {
            authority: authority.trim_end_matches('/').to_owned(),
            audience: config.audience.clone(),
            ui_client: config.client_id.clone(),
            audience_is_ui: config.audience.is_some() && config.audience == config.client_id,
            role_claim: config
                .role_claim_type
                .split('.')
                .map(str::to_owned)
                .collect(),
            leeway: config.clock_skew,
            refresh_interval: config.jwks_refresh_interval,
            http: reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            keys: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(LastFetch::default()),
        }
    }

    /// An access token for the API: verified, and not an ID token.
    pub async fn verify(&self, token: &str) -> Result<Principal, Error> {
        let claims = self.verified_claims(token).await?;
        if let Some(why) = self.id_token(&claims) {
            return Err(unauthenticated(why));
        }
        self.principal(&claims)
    }

    /// Why `claims` are an ID token's, which proves a sign-in to a client
    /// and is no credential for the API: Keycloak's `typ: ID`; issued to the
    /// admin UI's client with an ID token's own claims; or the UI's client as
    /// the token's only audience (unless that is the API's audience).
    fn id_token(&self, claims: &serde_json::Map<String, Value>) -> Option<&'static str> {
        if claims
            .get("typ")
            .and_then(Value::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("id"))
        {
            return Some("it is an ID token (typ ID), not an access token");
        }
        let client = self.ui_client.as_deref()?;
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences.contains(&client) {
            return None;
        }
        // What only an ID token carries: the sign-in's nonce, the hashes
        // that bind a code or an access token to it. The UI's sign-ins
        // always send a nonce, whatever the API's audience is.
        if ["nonce", "at_hash", "c_hash", "s_hash"]
            .iter()
            .any(|c| claims.contains_key(*c))
        {
            return Some(
                "it was issued to the admin UI's client with an ID token's claims (nonce): it is \
                 an ID token, not an access token",
            );
        }
        (audiences == [client] && !self.audience_is_ui).then_some(
            "its only audience is the admin UI's client: it is an ID token, not an access token",
        )
    }

    /// Who a verified token's claims say the caller is: `jwt:<iss>#<sub>`,
    /// so that no JWT can pass for a database token (`token:<id>`) or for a
    /// user of another issuer. A token without `sub` names nobody and is
    /// refused.
    pub fn principal(&self, claims: &serde_json::Map<String, Value>) -> Result<Principal, Error> {
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| unauthenticated("it has no sub claim: it names no caller"))?;
        let iss = claims
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let valid_until = SystemTime::UNIX_EPOCH + Duration::from_secs(exp) + self.leeway;
        Ok(Principal {
            subject: typed_subject(iss, sub),
            token_id: None,
            access: Access::Roles(roles(claims, &self.role_claim)),
            valid_until: Some(valid_until),
        })
    }

    /// A token's claims once its signature, issuer, audience and times
    /// verify.
    pub async fn verified_claims(
        &self,
        token: &str,
    ) -> Result<serde_json::Map<String, Value>, Error> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| unauthenticated("not a JWT signed with an accepted algorithm"))?;
        let keys = self.key_set(header.kid.as_deref()).await?;
        let key = match header.kid.as_deref() {
            Some(kid) => keys.keys.get(kid),
            // Without a kid only a provider with a single key is unambiguous.
            None if keys.keys.len() == 1 => keys.keys.values().next(),
            None => None,
        }
        .ok_or_else(|| unauthenticated("signed by a key the identity provider does not publish"))?;
        if !key.algorithms.contains(&header.alg) {
            return Err(unauthenticated("its algorithm is not one its key is for"));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&keys.issuer]);
        let mut required = vec!["exp", "iss"];
        match &self.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let claims = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token,
            &key.decoding,
            &validation,
        )
        .map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            unauthenticated(match e.kind() {
                K::ExpiredSignature => "it has expired",
                K::ImmatureSignature => "it is not valid yet",
                K::InvalidIssuer => "its issuer is not the configured authority",
                K::InvalidAudience => "its audience is not this service",
                K::InvalidSignature => "its signature does not verify",
                K::MissingRequiredClaim(_) => "it lacks a required claim (exp, iss or aud)",
                _ => "it is malformed",
            })
        })?
        .claims;
        Ok(claims)
    }

    /// The keys, fetched if there are none yet or if `kid` is unknown and the
    /// last fetch is older than the refresh interval.
    async fn key_set(&self, kid: Option<&str>) -> Result<Arc<KeySet>, Error> {
        let current = self.keys.read().ok().and_then(|k| k.clone());
        if let Some(k) = &current {
            if kid.is_none_or(|kid| k.keys.contains_key(kid)) {
                return Ok(k.clone());
            }
        }
        // One fetch at a time; the others wait for it and use its result.
        let mut last = self.fetching.lock().await;
        let too_soon = last
            .began
            .is_some_and(|at| at.elapsed() < self.refresh_interval);
        let now_current = self.keys.read().ok().and_then(|k| k.clone());
        if let Some(k) = &now_current {
            let fetched_meanwhile = !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, k));
            if fetched_meanwhile || too_soon {
                return Ok(k.clone());
            }
        } else if let (true, Some(e)) = (too_soon, &last.failed) {
            return Err(e.clone());
        }
        last.began = Some(Instant::now());
        // Cleared first: a fetch cut off by its caller's deadline must not
        // leave an older failure to be served for a whole interval.
        last.failed = None;
        let fetched = match self.fetch().await {
            Ok(f) => {
                last.failed = None;
                Arc::new(f)
            }
            Err(e) => {
                tracing::warn!(
                    authority = %self.authority,
                    error = %e.message,
                    retry_after_seconds = self.refresh_interval.as_secs_f64(),
                    "cannot read the identity provider's signing keys"
                );
                last.failed = Some(e.clone());
                return Err(e);
            }
        };
        if let Ok(mut k) = self.keys.write() {
            *k = Some(fetched.clone());
        }
        tracing::info!(
            keys = fetched.keys.len(),
            "fetched the identity provider's signing keys"
        );
        Ok(fetched)
    }

    async fn fetch(&self) -> Result<KeySet, Error> {
        let discovery = self
            .get_json(&format!(
                "{}/.well-known/openid-configuration",
                self.authority
            ))
            .await?;
        let field = |name: &str| {
            discovery
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::unavailable(format!(
                        "the identity provider's discovery document has no {name}"
                    ))
                })
        };
        let issuer = field("issuer")?;
        let jwks_uri = field("jwks_uri")?;
        let jwks = self.get_json(&jwks_uri).await?;
        let mut keys = HashMap::new();
        for raw in jwks
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // A key of a kind this service does not use is skipped, not fatal.
            let Ok(jwk) = serde_json::from_value::<Jwk>(raw.clone()) else {
                continue;
            };
            let algorithms = algorithms(&jwk);
            let (Some(kid), false) = (jwk.common.key_id.clone(), algorithms.is_empty()) else {
                continue;
            };
            if let Ok(decoding) = DecodingKey::from_jwk(&jwk) {
                keys.insert(
                    kid,
                    Key {
                        decoding,
                        algorithms,
                    },
                );
            }
        }
        Ok(KeySet { issuer, keys })
    }

    /// A JSON document of the provider's.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, Error> {
        let response = self.http.get(url).send().await;
        json_answer(response, false).await
    }

    /// A form posted to the provider (token and pushed-authorization
    /// endpoints), with the client's credentials in `Authorization: Basic`
    /// when it has a secret; its JSON answer, an error answer included.
    pub(crate) async fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        client: (&str, Option<&str>),
    ) -> Result<Value, Error> {
        let mut request = self.http.post(url).form(form);
        if let (id, Some(secret)) = client {
            // RFC 6749 2.3.1: each form-urlencoded before the Basic encoding.
            let pair = format!(
                "{}:{}",
                crate::wire::url_encode(id),
                crate::wire::url_encode(secret)
            );
            use base64::Engine;
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header(reqwest::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        json_answer(request.send().await, true).await
    }
}

/// A provider's JSON answer; with `errors_too`, an OAuth error answer (4xx
/// with a JSON body) is answered as the JSON, for the caller to read.
async fn json_answer(
    response: Result<reqwest::Response, reqwest::Error>,
    errors_too: bool,
) -> Result<Value, Error> {
    let unavailable =
        |why: String| Error::unavailable(format!("the identity provider cannot be read: {why}"));
    let mut response = response.map_err(|e| unavailable(e.without_url().to_string()))?;
    let status = response.status();
    if !(status.is_success() || (errors_too && status.is_client_error())) {
        return Err(unavailable(format!("HTTP {status}")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unavailable(e.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(unavailable(format!(
                "a document is larger than {MAX_DOCUMENT_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| unavailable(format!("not JSON (HTTP {status}): {e}")))
}

/// `jwt:<iss>#<sub>`, each part cut to 256 characters.
pub fn typed_subject(iss: &str, sub: &str) -> String {
    let cut = |s: &str| s.chars().take(256).collect::<String>();
    format!("jwt:{}#{}", cut(iss), cut(sub))
}

/// The signature algorithms a key may verify: its `alg`, else what its type
/// and curve imply. Symmetric and encryption keys verify nothing.
fn algorithms(jwk: &Jwk) -> Vec<Algorithm> {
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption) | Some(PublicKeyUse::Other(_))
    ) {
        return Vec::new();
    }
    let implied: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => vec![],
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        _ => vec![],
    };
    let declared = match jwk.common.key_algorithm {
        None => return implied,
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::RS384) => Algorithm::RS384,
        Some(KeyAlgorithm::RS512) => Algorithm::RS512,
        Some(KeyAlgorithm::PS256) => Algorithm::PS256,
        Some(KeyAlgorithm::PS384) => Algorithm::PS384,
        Some(KeyAlgorithm::PS512) => Algorithm::PS512,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::ES384) => Algorithm::ES384,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return Vec::new(),
    };
    // A declared algorithm must also fit the key's type.
    implied.into_iter().filter(|a| *a == declared).collect()
}

/// The roles at `path` in the claims: an array of strings, or one string
/// (space-separated roles, as some providers send).
fn roles(claims: &serde_json::Map<String, Value>, path: &[String]) -> Vec<String> {
    let mut at = path.first().and_then(|first| claims.get(first));
    for step in path.iter().skip(1) {
        at = at.and_then(|v| v.get(step));
    }
    match at {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn roles_are_found_flat_nested_or_as_a_string() {
        let claims = json!({
            "roles": ["a", "b", 3],
            "realm_access": {"roles": ["c"]},
            "scope": "d e",
        });
        let claims = claims.as_object().unwrap();
        let path = |p: &str| p.split('.').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(roles(claims, &path("roles")), ["a", "b"]);
        assert_eq!(roles(claims, &path("realm_access.roles")), ["c"]);
        assert_eq!(roles(claims, &path("scope")), ["d", "e"]);
        assert!(roles(claims, &path("missing.roles")).is_empty());
    }

    #[test]
    fn keys_verify_only_asymmetric_algorithms_that_fit_them() {
        let jwk = |v: Value| serde_json::from_value::<Jwk>(v).unwrap();
        let ec = json!({"kty": "EC", "crv": "P-256", "kid": "k",
            "x": "WKn-ZIGevcwGIyyrzFoZNBdaq9_TsqzGl96oc0CWuis",
            "y": "y77t-RvAHRKTsSGdIYUfweuOvwrvDD-Q3Hv5J0fSKbE"});
        assert_eq!(algorithms(&jwk(ec.clone())), [Algorithm::ES256]);
        let mut declared = ec.clone();
        declared["alg"] = json!("ES256");
        assert_eq!(algorithms(&jwk(declared)), [Algorithm::ES256]);
        let mut mismatched = ec.clone();
        mismatched["alg"] = json!("RS256");
        assert!(algorithms(&jwk(mismatched)).is_empty());
        let mut for_encryption = ec;
        for_encryption["use"] = json!("enc");
        assert!(algorithms(&jwk(for_encryption)).is_empty());
        let secret = json!({"kty": "oct", "kid": "s", "k": "c2VjcmV0", "alg": "HS256"});
        assert!(algorithms(&jwk(secret)).is_empty());
    }
}
