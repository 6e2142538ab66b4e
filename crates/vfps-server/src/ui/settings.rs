//! What the UI needs beyond the API's state, made once at start-up: the
//! sign-in client, the session lifetime and role recheck, the public
//! address, and every page's Content-Security-Policy.

use std::time::Duration;

use axum::http::HeaderValue;

use super::sign_in::SignIn;
use crate::config::{Authorization, UiConfig};

/// Every page's policy: scripts only from here (no inline script, no eval),
/// no plugins, no framing, forms posting only here — and to the identity
/// provider, where the sign-out form's redirect goes (browsers hold a form's
/// redirects to `form-action` too).
pub fn content_security_policy(provider_origin: Option<&str>) -> String {
    let forms = match provider_origin {
        Some(o) => format!("'self' {o}"),
        None => "'self'".to_owned(),
    };
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action {forms}"
    )
}

/// `scheme://host[:port]` of an address.
pub(super) fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest
        .split(['/', '?', '#'])
        .next()
        .filter(|h| !h.is_empty())?;
    Some(format!("{scheme}://{host}"))
}

/// What the UI needs beyond the API's state.
pub struct Ui {
    /// The sign-in client; `None` with authorization off, or on without an
    /// identity provider or client id (then only the API is served).
    pub(crate) oidc: Option<SignIn>,
    pub(crate) session_lifetime: Duration,
    /// How often a session's roles are confirmed with the provider.
    pub(crate) role_recheck: Duration,
    pub(crate) public_url: Option<String>,
    /// Shown on the access-control page.
    pub(crate) authorization: Authorization,
    /// TLS on the HTTP port: cookies are `Secure`.
    pub(crate) tls: bool,
    /// Every page's Content-Security-Policy.
    pub(crate) csp: HeaderValue,
}

impl Ui {
    /// The longest an admin UI session lives.
    pub fn session_lifetime(&self) -> Duration {
        self.session_lifetime
    }

    pub fn new(config: &UiConfig, authorization: &Authorization, tls: bool) -> Self {
        let oidc = match (
            authorization.enabled,
            &authorization.authority,
            &authorization.client_id,
        ) {
            (true, Some(authority), Some(client_id)) => Some(SignIn::new(
                authority,
                client_id,
                authorization.client_secret.as_deref(),
                authorization.use_pushed_authorization_requests,
                authorization,
            )),
            _ => None,
        };
        let provider_origin = authorization
            .authority
            .as_deref()
            .filter(|_| oidc.is_some())
            .and_then(origin_of);
        let csp = HeaderValue::from_str(&content_security_policy(provider_origin.as_deref()))
            .unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"));
        Self {
            oidc,
            csp,
            session_lifetime: config.session_lifetime,
            role_recheck: config.role_recheck,
            public_url: config.public_url.clone(),
            authorization: authorization.clone(),
            tls,
        }
    }
}
