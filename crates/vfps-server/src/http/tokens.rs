//! The admin API for access tokens (REST only; admin role needed):
//! `POST /v1/tokens` creates one granting only what the caller holds itself,
//! and answers its plaintext once,
//! `GET /v1/tokens` lists them (never a plaintext or hash),
//! `DELETE /v1/tokens/{id}` revokes one; `POST /v1/sessions:end`
//! (`{"subject": "jwt:<iss>#<sub>"}`) ends every admin UI session of a user
//! begun until then, on every replica.
//!
//! Refused while authorization is off: every caller is then an anonymous
//! admin, and a token it minted would be honoured once authorization is on.
//! `vfps tokens` (which needs the database's credentials) works either way.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::HeaderMap,
    response::Response,
    routing::{delete, get},
    Router,
};
use serde_json::{json, Value};
use vfps_core::Error;

use super::rest::{authorization, parse_body, respond};
use crate::{
    auth::{Operation, Principal},
    state::AppState,
    tokens,
};

/// Who is managing tokens, and only while authorization is on; what they
/// may do is each operation's to judge.
pub(crate) async fn manager(
    state: &AppState,
    credential: crate::auth::AuthHeader<'_>,
    deadline: std::time::Instant,
) -> Result<Arc<Principal>, Error> {
    if !state.auth.enabled() {
        return Err(Error::failed_precondition(
            "the token admin API needs authorization on (Authorization__IsEnabled=true): \
             with it off anyone could mint a credential; use `vfps tokens` instead",
        ));
    }
    state.auth.authenticate(credential, deadline).await
}

/// Who may list tokens: an admin, and only while authorization is on.
pub(crate) async fn admin(
    state: &AppState,
    credential: crate::auth::AuthHeader<'_>,
    deadline: std::time::Instant,
) -> Result<Arc<Principal>, Error> {
    let principal = manager(state, credential, deadline).await?;
    state
        .auth
        .authorize(&principal, Operation::ManageTokens, None)?;
    Ok(principal)
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens", get(list).post(create))
        .route("/v1/tokens/{id}", delete(revoke))
        .route("/v1/sessions:end", axum::routing::post(end_sessions))
}

/// `{"kind": "service-account"|"personal", "name": …, "admin": false,
/// "grants": ["<namespace>=<permission>,…"], "expiresInSeconds": …}`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateRequest {
    kind: String,
    name: String,
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    grants: Vec<String>,
    expires_in_seconds: Option<u64>,
}

async fn create(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let d = state.deadline(None);
    respond(&state, "Tokens/Create", async {
        let minter = manager(&state, authorization(&headers), d).await?;
        let req: CreateRequest = parse_body(&body)?;
        let request = tokens::NewToken::parse(
            &req.kind,
            &req.name,
            req.admin,
            &req.grants,
            req.expires_in_seconds.map(std::time::Duration::from_secs),
        )?;
        let (record, secret) = tokens::mint(
            &state.auth,
            state.service.store().as_ref(),
            &minter,
            request,
        )
        .await?;
        Ok(json!({"token": tokens::to_json(&record), "secret": secret.expose()}))
    })
    .await
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EndSessionsRequest {
    subject: String,
}

async fn end_sessions(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let d = state.deadline(None);
    respond(&state, "Sessions/End", async {
        let revoker = manager(&state, authorization(&headers), d).await?;
        let req: EndSessionsRequest = parse_body(&body)?;
        let lifetime = state.ui.session_lifetime();
        state
            .auth
            .end_sessions_of(&revoker, &req.subject, lifetime)
            .await?;
        Ok(json!({}))
    })
    .await
}

async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let d = state.deadline(None);
    respond(&state, "Tokens/List", async {
        admin(&state, authorization(&headers), d).await?;
        let all = state.service.store().list_tokens().await?;
        Ok(json!({"tokens": all.iter().map(tokens::to_json).collect::<Vec<Value>>()}))
    })
    .await
}

async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let d = state.deadline(None);
    respond(&state, "Tokens/Revoke", async {
        let revoker = manager(&state, authorization(&headers), d).await?;
        if !tokens::revoke_as(&state.auth, state.service.store().as_ref(), &revoker, &id).await? {
            return Err(Error::not_found(format!("no access token has id {id:?}")));
        }
        Ok(json!({}))
    })
    .await
}
