//! The HTTP port's router, composed above the protocol rooms: REST, FHIR,
//! tokens, CSV jobs, health and the UI, behind the checks every call passes
//! first (credentials before any body is read, axum's own refusals in the
//! route's error format).

use axum::{http::StatusCode, response::Response, Router};
use vfps_core::Error;

use crate::{fhir, http, state::AppState, ui};

/// Every HTTP route; bodies over `max_body_bytes` are refused with 413 (in
/// the route's own error format) before they are read. With `traced`, each
/// API call (not a health check) is a span.
pub fn router(state: AppState, max_body_bytes: usize, traced: bool) -> Router {
    let api = Router::new()
        .merge(http::rest::routes())
        .merge(fhir::routes())
        .merge(http::tokens::routes())
        .merge(http::jobs::routes());
    // Only the routes added so far get the layer.
    let api = if traced {
        api.layer(crate::telemetry::requests::TraceLayer::http())
    } else {
        api
    };
    // Who calls, before any body is read; the UI's scripts call the API
    // with the browser's session (outermost: it runs first).
    let api = api
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticated_first,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ui::session_bridge,
        ));
    api.merge(http::health_routes())
        .merge(ui::routes(&state))
        .layer(axum::middleware::from_fn(move |req, next| {
            rejections_in_kind(req, next, max_body_bytes)
        }))
        .layer(axum::extract::DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// With authorization on, every API call but the CapabilityStatement is
/// authenticated before its body is read or parsed: a caller without valid
/// credentials gets 401 (in the route's own error format) and learns nothing
/// from its body's errors, nor makes the server parse it. The handlers
/// authenticate again, from the verified-credential cache.
async fn authenticated_first(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let public = req.method() == axum::http::Method::GET && path == "/v1/fhir/metadata";
    if !state.auth.enabled() || public {
        return next.run(req).await;
    }
    let fhir = path == "/v1/fhir" || path.starts_with("/v1/fhir/");
    let deadline = state.deadline(None);
    match state
        .auth
        .authenticate(http::authorization(req.headers()), deadline)
        .await
    {
        Ok(_) => next.run(req).await,
        Err(e) if fhir => fhir::outcome(&e),
        Err(e) => http::challenge(e.kind, http::rest::error_response(&e)),
    }
}

/// Gives axum's own plain-text refusals the body the route's callers
/// expect (an OperationOutcome on FHIR routes, the JSON error elsewhere): 413
/// for a body over the limit, 400 for a path that does not decode (a
/// percent-encoded segment that is not UTF-8).
async fn rejections_in_kind(
    req: axum::extract::Request,
    next: axum::middleware::Next,
    max_body_bytes: usize,
) -> Response {
    let bundle = req.uri().path() == "/v1/fhir";
    let fhir = bundle || req.uri().path().starts_with("/v1/fhir/");
    let max_body_bytes = if bundle {
        fhir::bundle::MAX_BYTES
    } else {
        max_body_bytes
    };
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let response = next.run(req).await;
    let status = response.status();
    let content_type = response.headers().get(axum::http::header::CONTENT_TYPE);
    let plain = content_type.is_some_and(|v| v.as_bytes().starts_with(b"text/plain"));
    // axum's own answers for a path no route has, or a method the route
    // does not take, come without a body.
    let routing = fhir && content_type.is_none();
    let error = match status {
        StatusCode::NOT_FOUND if routing => {
            return fhir::not_supported(
                StatusCode::NOT_FOUND,
                &format!(
                    "{path} names no operation of this server (GET /v1/fhir/metadata lists them)"
                ),
            )
        }
        StatusCode::METHOD_NOT_ALLOWED if routing => {
            return fhir::not_supported(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{path} does not take {method}: operations are POST, metadata is GET"),
            )
        }
        // axum's (a body over the limit), not a route's own answer.
        StatusCode::PAYLOAD_TOO_LARGE if plain || content_type.is_none() => Error::out_of_range(
            format!("the request body is larger than {max_body_bytes} bytes"),
        ),
        StatusCode::BAD_REQUEST if plain => {
            // axum's rejection texts name what failed, never a value.
            let text = axum::body::to_bytes(response.into_body(), 4096)
                .await
                .unwrap_or_default();
            Error::invalid_argument(String::from_utf8_lossy(&text).trim().to_owned())
        }
        _ => return response,
    };
    let mut response = if fhir {
        fhir::outcome(&error)
    } else {
        http::rest::error_response(&error)
    };
    *response.status_mut() = status;
    response
}
