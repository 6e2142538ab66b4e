//! Signing in to the UI as upstream does: the OIDC authorization code flow
//! with PKCE (S256) and the confidential client `Authorization__ClientId` /
//! `ClientSecret`; the authorization request pushed (RFC 9126) when the
//! issuer's discovery document offers it and
//! `Authorization__UsePushedAuthorizationRequests` is not false; sign-out
//! RP-initiated at the issuer when it offers an `end_session_endpoint`.
//!
//! Nothing of a sign-in under way is kept on a replica: its state, nonce and
//! PKCE verifier are sealed into a short-lived cookie, so the provider's
//! redirect back may land on any replica.

use axum::{
    extract::{Query, State},
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use maud::html;
use serde::Deserialize;
use vfps_core::Error;

use super::{
    csrf_field, session_cookie,
    sign_in::{with_query, Pending, SIGN_IN_WINDOW},
    Visit,
};
use crate::{
    auth::session::{unix_now, Purpose},
    state::AppState,
};

/// The cookie of a sign-in under way, sent back only to the callback.
const SIGN_IN_COOKIE: &str = "vfps_sign_in";
/// The callback's path, registered at the provider as the redirect address.
pub const CALLBACK_PATH: &str = "/ui/authentication/callback";
/// Where the provider sends the browser back after signing out (registered
/// there as the post-logout redirect address).
pub const LOGOUT_PATH: &str = "/ui/authentication/logout";
/// Only a path of this UI is a place to return to (never another site).
fn safe_return(raw: Option<&str>) -> String {
    match raw {
        Some(p) if p.starts_with("/ui/") && !p.starts_with("//") && !p.contains('\\') => {
            p.to_owned()
        }
        _ => "/ui/".to_owned(),
    }
}

fn sign_in_cookie(value: &str, secure: bool, max_age: u64) -> String {
    let mut c = format!(
        "{SIGN_IN_COOKIE}={value}; Path=/ui/authentication; HttpOnly; SameSite=Lax; Max-Age={max_age}"
    );
    if secure {
        c.push_str("; Secure");
    }
    c
}

fn append_cookie(response: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(rename = "returnUrl")]
    return_url: Option<String>,
}

/// `GET /ui/authentication/login`: off to the identity provider.
pub async fn login(
    State(state): State<AppState>,
    visit: Visit,
    Query(q): Query<LoginQuery>,
) -> Response {
    let return_to = safe_return(q.return_url.as_deref());
    let Some(oidc) = &state.ui.oidc else {
        if !state.auth.enabled() {
            return Redirect::to(&return_to).into_response();
        }
        return visit.sign_in_first(&state);
    };
    let redirect_uri = format!("{}{CALLBACK_PATH}", redirect_base(&state, &visit));
    match oidc.begin(&redirect_uri, &return_to).await {
        Ok((address, pending)) => {
            let sealed = state.auth.sessions().seal(
                Purpose::SignIn,
                &serde_json::to_vec(&pending).unwrap_or_default(),
            );
            let mut response = Redirect::to(&address).into_response();
            append_cookie(
                &mut response,
                &sign_in_cookie(&sealed, visit.secure, SIGN_IN_WINDOW.as_secs()),
            );
            visit.with_cookie(response)
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "UI sign-in could not begin");
            visit.error_page("Sign in", &e)
        }
    }
}

/// The origin (and path prefix) the provider sends the browser back to.
fn redirect_base(state: &AppState, visit: &Visit) -> String {
    state
        .ui
        .public_url
        .clone()
        .unwrap_or_else(|| visit.own_origin.clone())
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /ui/authentication/callback`: the provider's answer.
pub async fn callback(
    State(state): State<AppState>,
    visit: Visit,
    headers: axum::http::HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let key = state.auth.sessions();
    let pending: Option<Pending> = super::cookie(&headers, SIGN_IN_COOKIE)
        .and_then(|c| key.open(Purpose::SignIn, c))
        .and_then(|json| serde_json::from_slice(&json).ok())
        .filter(|p: &Pending| p.expires_at > unix_now());
    let outcome = async {
        let oidc = state
            .ui
            .oidc
            .as_ref()
            .ok_or_else(|| Error::failed_precondition("no sign-in is configured"))?;
        let pending = pending.ok_or_else(|| {
            Error::unauthenticated(
                "this sign-in has expired or was started in another browser: sign in again",
            )
        })?;
        if let Some(error) = &q.error {
            return Err(Error::unauthenticated(format!(
                "the identity provider refused the sign-in: {error} {}",
                q.error_description.as_deref().unwrap_or("")
            )));
        }
        if q.state.as_deref() != Some(pending.state.as_str()) {
            return Err(Error::unauthenticated(
                "the sign-in's state does not match: sign in again",
            ));
        }
        let code = q
            .code
            .as_deref()
            .ok_or_else(|| Error::unauthenticated("the identity provider sent no code"))?;
        let session = oidc
            .finish(
                &pending,
                code,
                state.ui.session_lifetime,
                state.ui.role_recheck,
            )
            .await?;
        Ok((session, pending.return_to))
    }
    .await;
    match outcome {
        Ok((session, return_to)) => {
            tracing::info!(roles = session.roles.len(), "UI sign-in");
            let mut response = Redirect::to(&return_to).into_response();
            append_cookie(
                &mut response,
                &session_cookie(&key.seal_session(&session), visit.secure, None),
            );
            append_cookie(&mut response, &sign_in_cookie("", visit.secure, 0));
            response
        }
        Err(e) => {
            tracing::info!(error = %e.message, "UI sign-in refused");
            let mut response = visit.page_status(
                StatusCode::UNAUTHORIZED,
                "Sign-in failed",
                html! {
                    p role="alert" { (e.message) }
                    p { a href="/ui/authentication/login" { "Sign in again" } }
                },
            );
            append_cookie(&mut response, &sign_in_cookie("", visit.secure, 0));
            response
        }
    }
}

/// `GET /ui/authentication/logout`: a page with the sign-out button (a
/// sign-out is a state change, so it is a form with its CSRF token).
pub async fn logout_page(visit: Visit) -> Response {
    visit.page(
        "Sign out",
        html! {
            @if visit.session.signed_in() {
                form method="post" action="/ui/authentication/logout" {
                    (csrf_field(&visit))
                    button type="submit" { "Sign out" }
                }
            } @else {
                p { "You are signed out." }
                p { a href="/ui/" { "Home" } }
            }
        },
    )
}

/// `POST /ui/authentication/logout`: ends the session here, then at the
/// provider when it offers RP-initiated sign-out.
pub async fn logout(
    State(state): State<AppState>,
    visit: Visit,
    axum::Form(form): axum::Form<super::CsrfOnly>,
) -> Response {
    if let Err(e) = visit.check_csrf(&state, &form.csrf) {
        return visit.error_page("Sign out", &e);
    }
    // Ended everywhere before the browser forgets it: a copy of the cookie
    // must not sign anyone in afterwards, on any replica.
    let ended = tokio::time::timeout_at(
        visit.deadline.into(),
        state.auth.end_session(&visit.session),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Error::unavailable(
            "the sign-out could not be recorded in time: try again",
        ))
    });
    if let Err(e) = ended {
        return visit.error_page("Sign out", &e);
    }
    let mut target = LOGOUT_PATH.to_owned();
    if let Some(oidc) = &state.ui.oidc {
        if let Ok(endpoints) = oidc.endpoints().await {
            if let Some(end) = &endpoints.end_session {
                // Back to a page that needs no sign-in, saying so.
                let back = format!("{}{LOGOUT_PATH}", redirect_base(&state, &visit));
                let mut params = vec![
                    ("client_id", oidc.client_id.as_str()),
                    ("post_logout_redirect_uri", back.as_str()),
                ];
                if let Some(hint) = &visit.session.id_token {
                    params.push(("id_token_hint", hint));
                }
                target = with_query(end, &params);
            }
        }
    }
    tracing::info!("UI sign-out");
    let mut response = Redirect::to(&target).into_response();
    append_cookie(&mut response, &session_cookie("", visit.secure, Some(0)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_path_of_the_ui_is_returned_to() {
        assert_eq!(safe_return(Some("/ui/namespaces")), "/ui/namespaces");
        for bad in [
            "https://evil.example/ui/",
            "//evil.example/ui/",
            "/ui\\..\\",
            "/v1/namespaces",
            "",
        ] {
            assert_eq!(safe_return(Some(bad)), "/ui/", "{bad}");
        }
        assert_eq!(safe_return(None), "/ui/");
    }
}
