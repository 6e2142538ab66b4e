//! FHIR R4: the `$create-pseudonym` operation and the CapabilityStatement.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::State,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use serde_json::{json, Value};
use vfps_core::{Error, ErrorKind};

use crate::state::AppState;

const FHIR_JSON: &str = "application/fhir+json";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/fhir/$create-pseudonym", post(create_pseudonym))
        .route("/v1/fhir/metadata", get(metadata))
}

fn fhir(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, FHIR_JSON)],
        body.to_string(),
    )
        .into_response()
}

/// An `OperationOutcome` for an error.
fn outcome(e: &Error) -> Response {
    let (status, code) = match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::OutOfRange => (StatusCode::BAD_REQUEST, "invalid"),
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not-found"),
        ErrorKind::AlreadyExists => (StatusCode::CONFLICT, "duplicate"),
        ErrorKind::Unavailable | ErrorKind::DeadlineExceeded => {
            (StatusCode::SERVICE_UNAVAILABLE, "transient")
        }
        ErrorKind::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "throttled"),
        ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "exception"),
        ErrorKind::Unauthenticated => (StatusCode::UNAUTHORIZED, "login"),
        ErrorKind::PermissionDenied => (StatusCode::FORBIDDEN, "forbidden"),
        ErrorKind::FailedPrecondition => (StatusCode::BAD_REQUEST, "business-rule"),
    };
    fhir(
        status,
        json!({
            "resourceType": "OperationOutcome",
            "issue": [{"severity": "error", "code": code, "diagnostics": e.message}],
        }),
    )
}

/// Reads `namespace` and `originalValue` (`valueString`) from a `Parameters` resource.
pub fn parameters(body: &[u8]) -> Result<(String, String), Error> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::invalid_argument(format!("the body is not JSON: {e}")))?;
    if v.get("resourceType").and_then(Value::as_str) != Some("Parameters") {
        return Err(Error::invalid_argument(
            "the body must be a FHIR Parameters resource",
        ));
    }
    let params = v
        .get("parameter")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let find = |name: &str| -> Result<String, Error> {
        params
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|p| p.get("valueString"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::invalid_argument(format!("parameter {name} with a valueString is required"))
            })
    };
    Ok((find("namespace")?, find("originalValue")?))
}

async fn create_pseudonym(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let started = Instant::now();
    let result = async {
        let who = state
            .auth
            .authenticate(super::rest::authorization(&headers), d)
            .await?;
        let (namespace, original) = parameters(&body)?;
        state.auth.authorize(
            &who,
            crate::auth::Operation::CreatePseudonym,
            Some(&namespace),
        )?;
        state
            .service
            .create_pseudonym(&namespace, &original, d)
            .await
    }
    .await;
    state.metrics.observe_request(
        "fhir",
        "create-pseudonym",
        started.elapsed(),
        result.as_ref().err(),
    );
    match result {
        Ok(p) => fhir(
            StatusCode::OK,
            json!({
                "resourceType": "Parameters",
                "parameter": [
                    {"name": "namespace", "valueString": p.namespace.as_str()},
                    {"name": "originalValue", "valueString": p.original_value},
                    {"name": "pseudonymValue", "valueString": p.pseudonym_value},
                ],
            }),
        ),
        Err(e) => outcome(&e),
    }
}

async fn metadata() -> Response {
    fhir(
        StatusCode::OK,
        json!({
            "resourceType": "CapabilityStatement",
            "status": "active",
            "date": "2026-01-01",
            "kind": "instance",
            "software": {"name": "vfps", "version": env!("CARGO_PKG_VERSION")},
            "implementation": {"description": "vfps pseudonymization service"},
            "fhirVersion": "4.0.1",
            "format": [FHIR_JSON],
            "rest": [{
                "mode": "server",
                "operation": [{
                    "name": "create-pseudonym",
                    "definition": "OperationDefinition/create-pseudonym",
                }],
            }],
        }),
    )
}
