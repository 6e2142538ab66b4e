//! FHIR R4 at the base `/v1/fhir`: upstream vfps's `$create-pseudonym`, the
//! MII pseudonymization interface's six operations, batch Bundles of them,
//! and the CapabilityStatement naming them. JSON (`application/fhir+json`).
//!
//! # Layout
//! - [`upstream`]: `$create-pseudonym`, as upstream vfps answers it.
//! - [`parameters`] (`vfps-fhir`): the MII operations' `Parameters`, read
//!   strictly and answered in kind; the wire format lives in `vfps-fhir`,
//!   fuzzed on its own.
//! - [`mii`]: the six operations, each through the service layer.
//! - [`bundle`]: `POST /v1/fhir` with a `batch` Bundle, each entry on its own.
//!
//! Errors are `OperationOutcome`s with `http://hl7.org/fhir/issue-type`
//! codes, never carrying an original value or a pseudonym.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use serde_json::{json, Value};
use vfps_core::{Error, ErrorKind};

use crate::state::AppState;

pub mod bundle;
pub mod mii;
pub use vfps_fhir::parameters;
mod upstream;

pub use upstream::parameters as create_parameters;

pub const FHIR_JSON: &str = "application/fhir+json";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/fhir",
            post(bundle::bundle).layer(axum::extract::DefaultBodyLimit::max(bundle::MAX_BYTES)),
        )
        .route(
            "/v1/fhir/$create-pseudonym",
            post(upstream::create_pseudonym),
        )
        .route("/v1/fhir/metadata", get(metadata))
        .route("/v1/fhir/$pseudonymize", post(pseudonymize))
        .route("/v1/fhir/$get-pseudonym", post(get_pseudonym))
        .route("/v1/fhir/$de-pseudonymize", post(de_pseudonymize))
        .route(
            "/v1/fhir/$pseudonymize-multiple",
            post(pseudonymize_multiple),
        )
        .route("/v1/fhir/$delete-pseudonym", post(delete_pseudonym))
        .route("/v1/fhir/$anonymize-original", post(anonymize_original))
        .route_layer(axum::middleware::from_fn(require_fhir_json))
}

/// The handler of each MII operation's route.
macro_rules! operation_routes {
    ($($handler:ident => $op:ident),* $(,)?) => {
        $(async fn $handler(state: State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
            operation(state, headers, body, mii::Op::$op).await
        })*
    };
}

operation_routes!(
    pseudonymize => Pseudonymize,
    get_pseudonym => GetPseudonym,
    de_pseudonymize => DePseudonymize,
    pseudonymize_multiple => PseudonymizeMultiple,
    delete_pseudonym => DeletePseudonym,
    anonymize_original => AnonymizeOriginal,
);

pub(crate) fn fhir(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, FHIR_JSON)],
        body.to_string(),
    )
        .into_response()
}

/// An `OperationOutcome` of one error issue.
pub(crate) fn issue(code: &str, diagnostics: &str, expression: Option<&str>) -> Value {
    let mut issue = json!({"severity": "error", "code": code, "diagnostics": diagnostics});
    if let Some(e) = expression {
        issue["expression"] = json!([e]);
    }
    json!({"resourceType": "OperationOutcome", "issue": [issue]})
}

/// The status and `OperationOutcome` of an error.
pub(crate) fn outcome_of(e: &Error) -> (StatusCode, Value) {
    if e.is_restore_hold() {
        // The state is the operator's to change (`vfps restore confirm`),
        // not the request the caller's to mend.
        return (StatusCode::CONFLICT, issue("conflict", &e.message, None));
    }
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
    (status, issue(code, &e.message, None))
}

/// A `not-supported` `OperationOutcome` with `status`.
pub(crate) fn not_supported(status: StatusCode, diagnostics: &str) -> Response {
    fhir(status, issue("not-supported", diagnostics, None))
}

/// The media types a FHIR body may come as: FHIR JSON, plain JSON, and
/// DSTU2's `application/json+fhir`, each with parameters (`charset`,
/// `fhirVersion`).
const BODY_TYPES: [&str; 3] = [FHIR_JSON, "application/json", "application/json+fhir"];

/// Refuses a POST whose body is not FHIR JSON by its `Content-Type` with
/// `415 Unsupported Media Type`, before the body is read.
async fn require_fhir_json(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.method() == axum::http::Method::POST {
        let given = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let media = given
            .as_deref()
            .and_then(|t| t.split(';').next())
            .map(|t| t.trim().to_ascii_lowercase());
        if !media.as_deref().is_some_and(|m| BODY_TYPES.contains(&m)) {
            let got = given.map_or_else(|| "none".to_owned(), |g| format!("{g:?}"));
            return not_supported(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!("the body must be FHIR JSON (Content-Type {FHIR_JSON}), got {got}"),
            );
        }
    }
    next.run(req).await
}

/// An `OperationOutcome` response for an error.
pub(crate) fn outcome(e: &Error) -> Response {
    let (status, body) = outcome_of(e);
    crate::http::challenge(e.kind, fhir(status, body))
}

/// Who is calling, then the body as JSON: authenticated first, so that an
/// unauthenticated caller learns nothing from the body's errors.
async fn caller_and_body(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    deadline: Instant,
) -> Result<(std::sync::Arc<crate::auth::Principal>, Value), Error> {
    let who = state
        .auth
        .authenticate(crate::http::authorization(headers), deadline)
        .await?;
    let body = vfps_fhir::json::strict(body)
        .map_err(|e| Error::invalid_argument(format!("the body is not JSON: {e}")))?;
    Ok((who, body))
}

/// `POST /v1/fhir/$<operation>`: one MII operation.
async fn operation(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
    op: mii::Op,
) -> Response {
    let d = state.deadline(None);
    let started = Instant::now();
    let result = async {
        let (who, body) = caller_and_body(&state, &headers, &body, d).await?;
        mii::run(&state, &who, op, &body, d).await
    }
    .await;
    state
        .metrics
        .observe_request("fhir", op.code(), started.elapsed(), result.as_ref().err());
    match result {
        Ok((status, resource)) => fhir(status, resource),
        Err(e) if e.kind == ErrorKind::Unauthenticated => outcome(&e),
        Err(e) => {
            let (status, resource) = mii::refused(op, &e);
            fhir(status, resource)
        }
    }
}

/// `GET /v1/fhir/metadata`: what this server offers.
async fn metadata() -> Response {
    let mut operations = vec![json!({
        "name": "create-pseudonym",
        "definition": "OperationDefinition/create-pseudonym",
    })];
    operations
        .extend(mii::Op::ALL.map(|op| json!({"name": op.code(), "definition": op.definition()})));
    fhir(
        StatusCode::OK,
        json!({
            "resourceType": "CapabilityStatement",
            "status": "active",
            "date": "2026-01-01",
            "kind": "instance",
            "software": {"name": "vfps", "version": env!("CARGO_PKG_VERSION")},
            "implementation": {"description": "vfps pseudonymization service", "url": "/v1/fhir"},
            "fhirVersion": "4.0.1",
            "format": [FHIR_JSON, "json"],
            "implementationGuide": [format!("{}|2026.1.0-ballot.1", mii::IG)],
            "rest": [{
                "mode": "server",
                "interaction": [{"code": "batch"}, {"code": "transaction"}],
                "operation": operations,
            }],
        }),
    )
}
