//! The admin web UI at `/ui`, at upstream vfps's paths: pages rendered on
//! the server (maud: every value interpolated into a page is escaped unless
//! marked raw, and nothing here marks a value raw), no inline script (the
//! Content-Security-Policy forbids it), and sessions sealed into cookies that
//! every replica accepts ([`crate::auth::session`]).
//!
//! # Layout
//! - this module: the state ([`Ui`]), the routes, a page visit ([`Visit`]:
//!   its session, who it is, its CSRF token), the layout and the headers
//!   every page carries.
//! - [`oidc`]: sign-in (authorization code flow with PKCE, pushed when the
//!   issuer offers it) and sign-out.
//! - [`home`], [`namespaces`], [`pseudonyms`], [`jobs`], [`admin`]: the pages.
//! - [`assets`]: the stylesheet and scripts, served from the binary.
//!
//! Rights are checked as the API checks them: a page presents the session to
//! [`crate::auth::Auth`] as an `Authorization: Session <sealed>` credential,
//! so the same rules, and the same audit events, apply.

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{FromRequestParts, State},
    http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
    Router,
};
use maud::{html, Markup, DOCTYPE};
use vfps_core::Error;

use crate::{
    auth::{session::Session, AuthHeader, Principal},
    state::AppState,
};

mod admin;
mod assets;
mod home;
mod jobs;
mod namespaces;
pub mod oidc;
mod pseudonyms;
pub mod settings;
pub mod sign_in;
mod swagger;

pub use settings::{content_security_policy, Ui};

/// The session cookie: sent with every request to this host (the REST API's
/// scripts included), never readable by a script.
pub const SESSION_COOKIE: &str = "vfps_session";
/// The header the UI's scripts send their CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// How long a page waits for the database (its calls retried within it):
/// a page during a failover answers "try again" after this long rather than
/// hanging until the service's longest call deadline, as an API caller's
/// own deadline would end its call (the browser probe found pages hanging
/// twice as long as the API's outage).
pub const PAGE_DEADLINE: Duration = Duration::from_secs(5);

/// The instant a page's calls must be answered by.
fn page_deadline(state: &AppState) -> std::time::Instant {
    state.deadline(Some(PAGE_DEADLINE))
}

/// The UI's routes and Swagger's, with the headers every page carries.
pub fn routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(home::page))
        .route(
            "/ui/namespaces",
            get(namespaces::page).post(namespaces::create),
        )
        .route("/ui/namespaces/{name}/delete", post(namespaces::delete))
        .route(
            "/ui/namespaces/{name}/pseudonyms",
            get(pseudonyms::page).post(pseudonyms::create),
        )
        .route("/ui/namespaces/{name}/lookup", post(pseudonyms::lookup))
        .route("/ui/namespaces/{name}/reveal", post(pseudonyms::lookup))
        .route("/ui/namespaces/{name}/erase", post(pseudonyms::erase))
        .route("/ui/csv-jobs", get(jobs::page))
        .route("/ui/csv-jobs/grid", get(jobs::grid))
        .route("/ui/csv-jobs/clear", post(jobs::clear))
        .route("/ui/csv-jobs/{id}/download", get(jobs::download))
        .route("/ui/csv-jobs/{id}/cancel", post(jobs::cancel))
        .route("/ui/access-control", get(admin::access_control))
        .route("/ui/tokens", get(admin::tokens).post(admin::create_token))
        .route("/ui/tokens/{id}/revoke", post(admin::revoke_token))
        .route("/ui/authentication/login", get(oidc::login))
        .route("/ui/authentication/callback", get(oidc::callback))
        .route(
            "/ui/authentication/logout",
            get(oidc::logout_page).post(oidc::logout),
        )
        .route("/ui/theme", post(theme))
        .route("/ui/assets/{file}", get(assets::serve))
        .layer(axum::middleware::from_fn_with_state(
            state.ui.csp.clone(),
            page_headers,
        ))
        // After the layer: Swagger's pages carry their own headers.
        .merge(swagger::routes())
}

/// The headers of every UI answer: the policy, no sniffing, no referrer to
/// other sites (a page's address names namespaces; `same-origin`, not
/// `no-referrer`, under which browsers send `Origin: null` with our own
/// forms and the CSRF check could not tell them from a forged one), and no
/// caching of a page anywhere
/// (pages show originals and pseudonyms: no shared proxy may keep one).
async fn page_headers(
    State(csp): State<HeaderValue>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let asset = req.uri().path().starts_with("/ui/assets/");
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Lets the UI's scripts call the REST API with the browser's session: a
/// request without an `Authorization` header, carrying the session cookie and
/// its CSRF token in `X-CSRF-Token`, is sent on as `Authorization: Session
/// <sealed>`. The header (which no other site's page can set on a request
/// here) is what keeps a forged request out; the cookie alone opens nothing.
pub async fn session_bridge(
    State(state): State<AppState>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = req.headers();
    if !headers.contains_key(header::AUTHORIZATION) {
        let sealed = cookie(headers, SESSION_COOKIE);
        let token = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if let (Some(sealed), Some(token)) = (sealed, token) {
            let key = state.auth.sessions();
            let valid = key
                .open_session(sealed)
                .is_some_and(|s| key.csrf_valid(&s.nonce, token));
            if valid {
                if let Ok(value) = HeaderValue::from_str(&format!("Session {sealed}")) {
                    req.headers_mut().insert(header::AUTHORIZATION, value);
                }
            }
        }
    }
    next.run(req).await
}

/// The value of cookie `name`, if the request carries exactly one.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.trim());
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// One request to a page: the browser's session (made now on a first visit),
/// and what the page needs to know of it.
pub struct Visit {
    pub session: Session,
    /// The session's cookie value.
    sealed: String,
    /// `Session <sealed>`: the credential the session is to the API's checks.
    credential: String,
    /// The session is new: the answer sets its cookie (and no form can
    /// carry its CSRF token yet).
    fresh: bool,
    /// The session was renewed at its role re-check (or ended there): the
    /// answer sets its cookie.
    renewed: bool,
    /// Authorization is on.
    auth_enabled: bool,
    /// The form field (and script header) that proves a request came from
    /// one of our pages.
    pub csrf: String,
    /// The theme the user picked (`dark`/`light`), else the system's.
    theme: Option<&'static str>,
    /// Cookies are `Secure`.
    secure: bool,
    /// `Origin`, if sent, and this request's own origin, to compare.
    origin: Option<String>,
    own_origin: String,
    /// The request's path and query, to come back to after signing in.
    pub here: String,
    /// When every call the request makes must be answered by: one page
    /// deadline from its arrival for all of them (the session's check, the
    /// form's call, the page's own reads), so a page whose database does not
    /// answer says "try again" after [`PAGE_DEADLINE`], not a multiple of it.
    pub deadline: std::time::Instant,
    /// The session's roles were due to be confirmed and the identity provider
    /// could not be asked: the page says try again.
    unconfirmed: Option<Error>,
}

impl FromRequestParts<AppState> for Visit {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let key = state.auth.sessions();
        let opened = cookie(&parts.headers, SESSION_COOKIE)
            .and_then(|sealed| key.open_session(sealed).map(|s| (s, sealed.to_owned())));
        let (mut session, mut sealed, fresh) = match opened {
            Some((s, sealed)) => (s, sealed, false),
            None => {
                let s = Session::anonymous(state.ui.session_lifetime);
                let sealed = key.seal_session(&s);
                (s, sealed, true)
            }
        };
        // A signed-in user's roles are confirmed with the provider at least
        // every `role_recheck`: renewed, or the session ends.
        let mut unconfirmed = None;
        let mut renewed = false;
        let deadline = page_deadline(state);
        if session.recheck_due() {
            let outcome = match &state.ui.oidc {
                Some(oidc) => {
                    let renewal = oidc.renew(&session, state.ui.role_recheck);
                    match tokio::time::timeout_at(deadline.into(), renewal).await {
                        Ok(r) => r,
                        Err(_) => Err(sign_in::NotRenewed::Unavailable(Error::unavailable(
                            "the identity provider did not answer in time to confirm your roles",
                        ))),
                    }
                }
                None => Err(sign_in::NotRenewed::Ended(Error::unauthenticated(
                    "no identity provider to confirm the session's roles with",
                ))),
            };
            match outcome {
                Ok(s) => session = s,
                Err(sign_in::NotRenewed::Ended(why)) => {
                    tracing::info!(reason = %why.message, "a UI session ended at its role re-check");
                    session = Session::anonymous(state.ui.session_lifetime);
                }
                Err(sign_in::NotRenewed::Unavailable(e)) => unconfirmed = Some(e),
            }
            if unconfirmed.is_none() {
                sealed = key.seal_session(&session);
                renewed = true;
            }
        }
        let theme = match cookie(&parts.headers, "vfps_theme") {
            Some("dark") => Some("dark"),
            Some("light") => Some("light"),
            _ => None,
        };
        let forwarded_https = parts
            .headers
            .get("x-forwarded-proto")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
        let own_origin = own_origin(state, &parts.headers, forwarded_https);
        let secure = own_origin.starts_with("https://");
        Ok(Self {
            deadline,
            csrf: key.csrf_token(&session.nonce),
            credential: format!("Session {sealed}"),
            session,
            sealed,
            fresh,
            renewed,
            auth_enabled: state.auth.enabled(),
            theme,
            secure,
            origin: parts
                .headers
                .get(header::ORIGIN)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            own_origin,
            here: parts
                .uri
                .path_and_query()
                .map_or("/ui/".to_owned(), |p| p.as_str().to_owned()),
            unconfirmed,
        })
    }
}

/// `scheme://host[:port]` users reach this service at.
fn own_origin(state: &AppState, headers: &HeaderMap, forwarded_https: bool) -> String {
    if let Some(url) = &state.ui.public_url {
        // The origin part of the configured address (its path is not).
        let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
        let host = rest.split('/').next().unwrap_or(rest);
        return format!("{scheme}://{host}");
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if state.ui.tls || forwarded_https {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{host}")
}

impl Visit {
    /// The session as the API's checks take a credential.
    pub fn credential(&self) -> AuthHeader<'_> {
        AuthHeader::One(self.credential.as_bytes())
    }

    /// Who is visiting, to the rules; `None` when authorization is on and
    /// no one has signed in.
    pub async fn principal(&self, state: &AppState) -> Option<Arc<Principal>> {
        self.who(state).await.ok().flatten()
    }

    /// Who is visiting: `None` when no one has signed in (or the session was
    /// signed out); an error when that cannot be told now (the database is
    /// away), which is no reason to send anyone to sign in again.
    async fn who(&self, state: &AppState) -> Result<Option<Arc<Principal>>, Error> {
        if let Some(e) = &self.unconfirmed {
            return Err(e.clone());
        }
        if self.auth_enabled && !self.session.signed_in() {
            return Ok(None);
        }
        match state
            .auth
            .authenticate(self.credential(), self.deadline)
            .await
        {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.kind == vfps_core::ErrorKind::Unauthenticated => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Who is visiting, or the answer that sends them to sign in (or, when
    /// that cannot be told now, says to try again).
    pub async fn require(&self, state: &AppState) -> Result<Arc<Principal>, Response> {
        match self.who(state).await {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(self.sign_in_first(state)),
            Err(e) => Err(self.error_page("Try again", &e)),
        }
    }

    /// To the sign-in, coming back here after it (for a page); a refusal
    /// with a link to it (for a form, whose input is not carried over).
    fn sign_in_first(&self, state: &AppState) -> Response {
        let login = format!(
            "/ui/authentication/login?returnUrl={}",
            url_encode(&self.here)
        );
        if state.ui.oidc.is_some() {
            return self.with_cookie(Redirect::to(&login).into_response());
        }
        self.page_status(
            StatusCode::UNAUTHORIZED,
            "Sign-in needed",
            html! {
                p role="alert" {
                    "Authorization is on, but no sign-in is configured for the UI "
                    "(Authorization__Authority and Authorization__ClientId). "
                    "The API takes access tokens."
                }
            },
        )
    }

    /// Whether a state-changing request came from one of our pages: its
    /// CSRF token is this session's, and its `Origin` (when the browser
    /// sends one) is ours.
    pub fn check_csrf(&self, state: &AppState, token: &str) -> Result<(), Error> {
        let key_ok = !self.fresh && state.auth.sessions().csrf_valid(&self.session.nonce, token);
        let origin_ok = self
            .origin
            .as_deref()
            .is_none_or(|o| o.eq_ignore_ascii_case(&self.own_origin));
        if key_ok && origin_ok {
            Ok(())
        } else {
            Err(Error::new(
                vfps_core::ErrorKind::PermissionDenied,
                "the form did not come from this site's page (or the page is from an earlier \
                 session): reload the page and submit again",
            ))
        }
    }

    /// The page `title` with `body`, in the layout.
    pub fn page(&self, title: &str, body: Markup) -> Response {
        self.page_status(StatusCode::OK, title, body)
    }

    pub fn page_status(&self, status: StatusCode, title: &str, body: Markup) -> Response {
        let markup = layout(self, title, body);
        let mut response = (status, markup.into_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        self.with_cookie(response)
    }

    /// An error as a page: its status and message (messages never hold a
    /// value of a caller's).
    pub fn error_page(&self, title: &str, error: &Error) -> Response {
        self.page_status(
            crate::http::http_status(error.kind),
            title,
            html! { p role="alert" { (error.message) } },
        )
    }

    /// Sets the session cookie on `response` if the session is new.
    pub fn with_cookie(&self, mut response: Response) -> Response {
        if self.fresh || self.renewed {
            let value = session_cookie(&self.sealed, self.secure, None);
            if let Ok(v) = HeaderValue::from_str(&value) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        response
    }
}

/// A `Set-Cookie` value for the session: `HttpOnly`, `SameSite=Lax` (a
/// sign-in's return from the identity provider is a top-level navigation, so
/// it carries the cookie; a cross-site form post does not), `Secure` under
/// TLS; `max_age` `Some(0)` ends it.
pub fn session_cookie(sealed: &str, secure: bool, max_age: Option<u64>) -> String {
    let mut c = format!("{SESSION_COOKIE}={sealed}; Path=/; HttpOnly; SameSite=Lax");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    c
}

pub use crate::wire::url_encode;

/// A form's outcome as the page shows it above itself: `result` of what it
/// did, or the refusal (its status, and its message, which never holds a
/// value of the caller's).
pub fn shown<T>(
    outcome: Result<T, Error>,
    result: impl FnOnce(T) -> Markup,
) -> (StatusCode, Markup) {
    match outcome {
        Ok(v) => (StatusCode::OK, result(v)),
        Err(e) => (
            crate::http::http_status(e.kind),
            html! { p role="alert" { (e.message) } },
        ),
    }
}

/// A form that carries nothing but its CSRF token.
#[derive(serde::Deserialize)]
pub struct CsrfOnly {
    #[serde(default)]
    pub csrf: String,
}

/// The hidden CSRF field of a form.
pub fn csrf_field(visit: &Visit) -> Markup {
    html! { input type="hidden" name="csrf" value=(visit.csrf); }
}

/// `POST /ui/theme`: remembers dark or light (or the system's) in a cookie,
/// for the pages to be rendered in it from the first byte.
async fn theme(
    State(state): State<AppState>,
    visit: Visit,
    axum::Form(form): axum::Form<ThemeForm>,
) -> Response {
    if let Err(e) = visit.check_csrf(&state, &form.csrf) {
        return visit.error_page("Theme", &e);
    }
    let value = match form.theme.as_str() {
        "dark" | "light" => format!(
            "vfps_theme={}; Path=/ui; SameSite=Lax; Max-Age=31536000",
            form.theme
        ),
        _ => "vfps_theme=; Path=/ui; SameSite=Lax; Max-Age=0".to_owned(),
    };
    let back = if form.back.starts_with("/ui/") && !form.back.starts_with("//") {
        form.back.clone()
    } else {
        "/ui/".to_owned()
    };
    let mut response = Redirect::to(&back).into_response();
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::{settings::origin_of, *};

    #[test]
    fn forms_may_go_to_the_identity_provider_and_nowhere_else() {
        let csp =
            content_security_policy(origin_of("https://idp.example:8443/realms/x").as_deref());
        assert!(
            csp.ends_with("form-action 'self' https://idp.example:8443"),
            "{csp}"
        );
        assert!(content_security_policy(None).ends_with("form-action 'self'"));
        assert!(csp.contains("script-src 'self';"), "{csp}");
        assert_eq!(origin_of("nonsense"), None);
    }
}

#[derive(serde::Deserialize)]
struct ThemeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    theme: String,
    #[serde(default)]
    back: String,
}

/// The frame of every page: skip link, navigation, user menu, theme switch,
/// the page, the version.
fn layout(visit: &Visit, title: &str, body: Markup) -> Markup {
    let signed_in = visit.session.signed_in();
    let next_theme = match visit.theme {
        Some("dark") => "light",
        _ => "dark",
    };
    html! {
        (DOCTYPE)
        html lang="en" data-theme=[visit.theme] {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(visit.csrf);
                title { (title) " · vfps" }
                link rel="stylesheet" href="/ui/assets/app.css";
                // No favicon: the browser's request for one would be a 404.
                link rel="icon" href="data:,";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header class="top" {
                    nav aria-label="Main" {
                        a class="brand" href="/ui/" { "vfps" }
                        ul {
                            li { a href="/ui/namespaces" { "Namespaces" } }
                            li { a href="/ui/csv-jobs" { "CSV jobs" } }
                            li { a href="/ui/access-control" { "Access control" } }
                            li { a href="/ui/tokens" { "Access tokens" } }
                            li { a href="/swagger" { "API docs" } }
                        }
                    }
                    div class="user" {
                        form method="post" action="/ui/theme" class="inline" {
                            (csrf_field(visit))
                            input type="hidden" name="theme" value=(next_theme);
                            input type="hidden" name="back" value=(visit.here);
                            button type="submit" class="quiet" {
                                @if next_theme == "dark" { "Dark mode" } @else { "Light mode" }
                            }
                        }
                        @if signed_in {
                            details class="menu" {
                                summary { span class="who" { (visit.session.name) } }
                                div class="menu-body" {
                                    p { "Roles: "
                                        @if visit.session.roles.is_empty() { "none" }
                                        @else { (visit.session.roles.join(", ")) }
                                    }
                                    form method="post" action="/ui/authentication/logout" {
                                        (csrf_field(visit))
                                        button type="submit" { "Sign out" }
                                    }
                                }
                            }
                        } @else if visit.auth_enabled {
                            a class="button" href={ "/ui/authentication/login?returnUrl=" (url_encode(&visit.here)) } { "Sign in" }
                        } @else {
                            span class="who" title="Authorization__IsEnabled is false: everyone may do everything" { "Authorization off" }
                        }
                    }
                }
                main id="main" tabindex="-1" {
                    h1 { (title) }
                    (body)
                }
                footer {
                    "vfps " (env!("CARGO_PKG_VERSION"))
                }
            }
        }
    }
}
