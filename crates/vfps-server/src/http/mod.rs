//! The HTTP port's REST (proto3 JSON) and health endpoints, and the helpers
//! every HTTP room shares (credentials, the 401 challenge, status codes).
//! [`crate::router`] composes the port from these, FHIR's and the UI's.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use vfps_core::ErrorKind;

use crate::state::AppState;

pub(crate) mod jobs;
pub(crate) mod json;
pub(crate) mod rest;
mod serve;
pub(crate) mod tokens;

pub use serve::serve;
pub(crate) use serve::MAX_PENDING_RESET_STREAMS;

/// The REST body parser, for the fuzzing harness.
pub use rest::parse_body as rest_body;

/// A 401 names the scheme it wants (RFC 6750): `WWW-Authenticate: Bearer`.
pub(crate) fn challenge(kind: ErrorKind, mut response: Response) -> Response {
    if kind == ErrorKind::Unauthenticated {
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// The call's `Authorization` header (or headers).
pub(crate) fn authorization(headers: &axum::http::HeaderMap) -> crate::auth::AuthHeader<'_> {
    rest::authorization(headers)
}

/// `/livez`, `/readyz` and `/healthz`: on the HTTP port, and on the metrics
/// port too, which is never TLS, so that probes reach them when the API ports
/// demand client certificates.
pub fn health_routes() -> Router<AppState> {
    Router::new()
        .route("/livez", get(|| async { "Healthy" }))
        .route("/readyz", get(ready))
        .route("/healthz", get(healthy))
}

fn verdict(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, "Healthy").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("Unhealthy: {why}")).into_response(),
    }
}

/// Whether this replica should get traffic (see [`AppState::readiness`]).
async fn ready(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    verdict(state.readiness())
}

/// Readiness plus the database as reachable from here now.
async fn healthy(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    verdict(state.health())
}

/// HTTP status of an error kind, as gRPC JSON transcoding maps status codes.
pub fn http_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidArgument | ErrorKind::OutOfRange => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::AlreadyExists => StatusCode::CONFLICT,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::FailedPrecondition => StatusCode::BAD_REQUEST,
    }
}

/// The numeric gRPC code of an error kind (the `code` of a JSON error body).
pub fn grpc_code(kind: ErrorKind) -> i32 {
    crate::wire::grpc_code(kind) as i32
}
