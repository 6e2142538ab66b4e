//! The UI's OpenID Connect client: the provider's discovery document, the
//! authorization request (PKCE, pushed when offered), the code exchanged for
//! a session, a session's renewal, and sign-out's address. The pages that
//! use it are in [`super::oidc`].

use std::{sync::Arc, time::Duration};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;
use vfps_core::Error;

use crate::{
    auth::{
        jwt::Verifier,
        session::{random_text, unix_now, Session},
    },
    config::Authorization,
    wire::url_encode,
};

/// How long a sign-in may take at the provider.
pub(super) const SIGN_IN_WINDOW: Duration = Duration::from_secs(600);

/// The tokens a session keeps (the refresh token first, then the ID token
/// for the sign-out hint) fit in this together: cookies over 4 KiB are
/// dropped by browsers.
const MAX_KEPT_TOKEN_BYTES: usize = 2400;

/// Why a session's renewal did not renew it.
#[derive(Debug)]
pub enum NotRenewed {
    /// The provider says the sign-in is over, or the user has no role left:
    /// the session ends.
    Ended(Error),
    /// The provider could not be asked now: the page says try again, and the
    /// session stays as it is (refused by the API until renewed).
    Unavailable(Error),
}

/// The UI's OIDC client.
pub struct SignIn {
    pub(super) client_id: String,
    pub(super) client_secret: Option<String>,
    pub(super) use_par: bool,
    pub(super) authority: String,
    /// Verifies ID tokens: the API's verifier (same keys, issuer and clock
    /// rules) with the client as the audience.
    pub(super) verifier: Verifier,
    /// The discovery document, read once.
    pub(super) endpoints: tokio::sync::OnceCell<Arc<Endpoints>>,
}

/// What the sign-in needs of the discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoints {
    pub(super) authorization: String,
    pub(super) token: String,
    pub(super) pushed: Option<String>,
    pub(super) end_session: Option<String>,
}

/// A sign-in under way, sealed into its cookie.
#[derive(Serialize, Deserialize)]
pub(super) struct Pending {
    pub(super) state: String,
    pub(super) nonce: String,
    pub(super) verifier: String,
    pub(super) redirect_uri: String,
    pub(super) return_to: String,
    pub(super) expires_at: u64,
}

impl SignIn {
    pub fn new(
        authority: &str,
        client_id: &str,
        client_secret: Option<&str>,
        use_par: bool,
        authorization: &Authorization,
    ) -> Self {
        let id_tokens = Authorization {
            audience: Some(client_id.to_owned()),
            ..authorization.clone()
        };
        Self {
            client_id: client_id.to_owned(),
            client_secret: client_secret.map(str::to_owned),
            use_par,
            authority: authority.trim_end_matches('/').to_owned(),
            verifier: Verifier::new(authority, &id_tokens),
            endpoints: tokio::sync::OnceCell::new(),
        }
    }

    pub(super) async fn endpoints(&self) -> Result<Arc<Endpoints>, Error> {
        self.endpoints
            .get_or_try_init(|| async {
                let doc = self
                    .verifier
                    .get_json(&format!(
                        "{}/.well-known/openid-configuration",
                        self.authority
                    ))
                    .await?;
                Endpoints::from_discovery(&doc).map(Arc::new)
            })
            .await
            .cloned()
    }

    /// The address to send the browser to, and the sign-in to remember.
    pub(super) async fn begin(
        &self,
        redirect_uri: &str,
        return_to: &str,
    ) -> Result<(String, Pending), Error> {
        let endpoints = self.endpoints().await?;
        let pending = Pending {
            state: random_text(24),
            nonce: random_text(24),
            verifier: random_text(48),
            redirect_uri: redirect_uri.to_owned(),
            return_to: return_to.to_owned(),
            expires_at: unix_now() + SIGN_IN_WINDOW.as_secs(),
        };
        let challenge = pkce_challenge(&pending.verifier);
        let params: [(&str, &str); 8] = [
            ("response_type", "code"),
            ("client_id", &self.client_id),
            ("redirect_uri", redirect_uri),
            ("scope", "openid profile"),
            ("state", &pending.state),
            ("nonce", &pending.nonce),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ];
        let address = match (&endpoints.pushed, self.use_par) {
            (Some(par), true) => {
                let answer = self
                    .verifier
                    .post_form(
                        par,
                        &params,
                        (&self.client_id, self.client_secret.as_deref()),
                    )
                    .await?;
                let request_uri = answer
                    .get("request_uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| refused("pushed authorization request", &answer))?;
                with_query(
                    &endpoints.authorization,
                    &[("client_id", &self.client_id), ("request_uri", request_uri)],
                )
            }
            _ => with_query(&endpoints.authorization, &params),
        };
        Ok((address, pending))
    }

    /// Redeems the code; answers the session it signs in.
    pub(super) async fn finish(
        &self,
        pending: &Pending,
        code: &str,
        lifetime: Duration,
        recheck: Duration,
    ) -> Result<Session, Error> {
        let endpoints = self.endpoints().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", pending.redirect_uri.as_str()),
            ("code_verifier", pending.verifier.as_str()),
        ];
        if self.client_secret.is_none() {
            form.push(("client_id", &self.client_id));
        }
        let answer = self
            .verifier
            .post_form(
                &endpoints.token,
                &form,
                (&self.client_id, self.client_secret.as_deref()),
            )
            .await?;
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| refused("token request", &answer))?;
        let claims = self.verifier.verified_claims(id_token).await?;
        if claims.get("nonce").and_then(Value::as_str) != Some(pending.nonce.as_str()) {
            return Err(Error::unauthenticated(
                "the ID token's nonce is not this sign-in's: sign in again",
            ));
        }
        let principal = self.verifier.principal(&claims)?;
        let name = ["name", "preferred_username", "email", "sub"]
            .iter()
            .find_map(|c| claims.get(*c).and_then(Value::as_str))
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        let roles = match principal.access {
            crate::auth::Access::Roles(r) => r,
            _ => Vec::new(),
        };
        let (refresh_token, id_token) = kept(answer_token(&answer, "refresh_token"), id_token);
        Ok(Session {
            subject: Some(principal.subject),
            name,
            roles,
            id_token,
            refresh_token,
            recheck_by: unix_now() + recheck.as_secs(),
            ..Session::anonymous(lifetime)
        })
    }

    /// Confirms `session`'s roles with the provider now (a refresh-token
    /// grant, whose new ID token carries them): the session renewed with
    /// them, due again in `recheck`; or why not.
    pub async fn renew(&self, session: &Session, recheck: Duration) -> Result<Session, NotRenewed> {
        let ended = |why: &str| {
            NotRenewed::Ended(Error::unauthenticated(format!(
                "the sign-in ended: {why}; sign in again"
            )))
        };
        let Some(refresh) = session.refresh_token.as_deref() else {
            return Err(ended(
                "the identity provider gave no refresh token to confirm its roles with",
            ));
        };
        let endpoints = self.endpoints().await.map_err(NotRenewed::Unavailable)?;
        let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", refresh)];
        if self.client_secret.is_none() {
            form.push(("client_id", &self.client_id));
        }
        let answer = self
            .verifier
            .post_form(
                &endpoints.token,
                &form,
                (&self.client_id, self.client_secret.as_deref()),
            )
            .await
            .map_err(NotRenewed::Unavailable)?;
        if answer.get("error").is_some() {
            return Err(NotRenewed::Ended(refused("renewal", &answer)));
        }
        let id_token = answer_token(&answer, "id_token")
            .ok_or_else(|| ended("the identity provider's renewal carried no ID token"))?;
        let claims = match self.verifier.verified_claims(&id_token).await {
            Ok(c) => c,
            Err(e) if e.kind == vfps_core::ErrorKind::Unauthenticated => {
                return Err(NotRenewed::Ended(e))
            }
            Err(e) => return Err(NotRenewed::Unavailable(e)),
        };
        let principal = self
            .verifier
            .principal(&claims)
            .map_err(NotRenewed::Ended)?;
        if Some(&principal.subject) != session.subject.as_ref() {
            return Err(ended("the renewal names another user"));
        }
        let roles = match principal.access {
            crate::auth::Access::Roles(r) => r,
            _ => Vec::new(),
        };
        if roles.is_empty() {
            return Err(ended("the user has no role left"));
        }
        let next = answer_token(&answer, "refresh_token").unwrap_or_else(|| refresh.to_owned());
        let (refresh_token, id_token) = kept(Some(next), &id_token);
        Ok(Session {
            roles,
            refresh_token,
            id_token,
            recheck_by: unix_now() + recheck.as_secs(),
            ..session.clone()
        })
    }
}

/// A token of a token endpoint's answer.
fn answer_token(answer: &Value, name: &str) -> Option<String> {
    answer.get(name).and_then(Value::as_str).map(str::to_owned)
}

/// What a session keeps of a refresh token and an ID token within
/// [`MAX_KEPT_TOKEN_BYTES`]: the refresh token first (without it the roles
/// cannot be re-checked), the ID token (a sign-out hint) if it still fits.
fn kept(refresh: Option<String>, id_token: &str) -> (Option<String>, Option<String>) {
    let refresh = refresh.filter(|r| r.len() <= MAX_KEPT_TOKEN_BYTES);
    let room = MAX_KEPT_TOKEN_BYTES - refresh.as_ref().map_or(0, String::len);
    let id_token = (id_token.len() <= room).then(|| id_token.to_owned());
    (refresh, id_token)
}

impl Endpoints {
    fn from_discovery(doc: &Value) -> Result<Self, Error> {
        let text = |name: &str| doc.get(name).and_then(Value::as_str).map(str::to_owned);
        let needed = |name: &str| {
            text(name).ok_or_else(|| {
                Error::unavailable(format!(
                    "the identity provider's discovery document has no {name}"
                ))
            })
        };
        Ok(Self {
            authorization: needed("authorization_endpoint")?,
            token: needed("token_endpoint")?,
            pushed: text("pushed_authorization_request_endpoint"),
            end_session: text("end_session_endpoint"),
        })
    }
}

/// RFC 7636's S256 challenge of a verifier.
fn pkce_challenge(verifier: &str) -> String {
    B64.encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// `address` with `params` added to its query.
pub(super) fn with_query(address: &str, params: &[(&str, &str)]) -> String {
    let mut out = address.to_owned();
    let mut sep = if address.contains('?') { '&' } else { '?' };
    for (k, v) in params {
        out.push(sep);
        out.push_str(&url_encode(k));
        out.push('=');
        out.push_str(&url_encode(v));
        sep = '&';
    }
    out
}

/// The provider's OAuth error answer, as an error naming the step.
fn refused(step: &str, answer: &Value) -> Error {
    let field = |k: &str| answer.get(k).and_then(Value::as_str).unwrap_or("");
    Error::unauthenticated(format!(
        "the identity provider refused the {step}: {} {}",
        field("error"),
        field("error_description")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_the_unpadded_base64url_sha256_of_the_verifier() {
        // Computed independently (Python: urlsafe_b64encode(sha256(v)).rstrip("=")).
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mJ92K9Z1Yc4ixVqVUQyu0DEIQJNbkA"),
            "IeVAbgwNwWr2vwjVF3RM-oG5wTSyss5oxxWGkvmXnZk"
        );
        assert!(!pkce_challenge("x").contains(['=', '+', '/']));
    }

    #[test]
    fn pushed_requests_and_sign_out_are_used_when_the_issuer_offers_them() {
        let doc = serde_json::json!({
            "authorization_endpoint": "https://idp/auth",
            "token_endpoint": "https://idp/token",
            "pushed_authorization_request_endpoint": "https://idp/par",
        });
        let e = Endpoints::from_discovery(&doc).unwrap();
        assert_eq!(e.pushed.as_deref(), Some("https://idp/par"));
        assert_eq!(e.end_session, None);
        let incomplete = serde_json::json!({"authorization_endpoint": "https://idp/auth"});
        assert!(Endpoints::from_discovery(&incomplete).is_err());
        assert_eq!(
            with_query("https://idp/auth?x=1", &[("a", "b c"), ("d", "/ui/")]),
            "https://idp/auth?x=1&a=b%20c&d=%2Fui%2F"
        );
    }
}
