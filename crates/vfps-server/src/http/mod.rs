//! The HTTP port: REST (proto3 JSON), FHIR and health endpoints.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use vfps_core::{Error, ErrorKind};

use crate::state::AppState;

mod fhir;
mod rest;

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(rest::routes())
        .merge(fhir::routes())
        .route("/livez", get(|| async { "Healthy" }))
        .route("/readyz", get(ready))
        .route("/healthz", get(healthy))
        .with_state(state)
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
    }
}

/// The numeric gRPC code of an error kind (the `code` of a JSON error body).
pub fn grpc_code(kind: ErrorKind) -> i32 {
    crate::grpc::status(Error::new(kind, "")).code() as i32
}
