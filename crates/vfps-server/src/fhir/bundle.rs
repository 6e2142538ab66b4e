//! `POST /v1/fhir` with a `batch` Bundle of MII operations: each entry runs on
//! its own and gets its own answer (a `Parameters`, or an
//! `OperationOutcome` with its status), in the order sent, in a
//! `batch-response`. The entries run together, so their Creates and lookups
//! are written and read in the service's batches rather than one round trip
//! each. `transaction` Bundles (all or nothing) are refused as not supported.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use serde_json::{json, Value};
use vfps_core::Error;

use super::{fhir, issue, mii, outcome};
use crate::state::AppState;

/// Most entries one Bundle may carry.
pub const MAX_ENTRIES: usize = 1000;
/// Largest Bundle read: room for its entries, each up to a few KiB (an
/// original may have 2 KiB), where a single call's body is far smaller.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

pub(super) async fn bundle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let started = Instant::now();
    let result = async {
        let who = state
            .auth
            .authenticate(crate::http::authorization(&headers), d)
            .await?;
        let body = crate::http::json::strict(&body)
            .map_err(|e| Error::invalid_argument(format!("the body is not JSON: {e}")))?;
        let entries = entries(&body)?;
        let answers =
            futures::future::join_all(entries.iter().map(|entry| answer(&state, &who, entry, d)))
                .await;
        Ok(json!({
            "resourceType": "Bundle",
            "type": "batch-response",
            "entry": answers.into_iter().map(|(status, resource)| json!({
                "resource": resource,
                "response": {"status": format!(
                    "{} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or_default()
                )},
            })).collect::<Vec<_>>(),
        }))
    }
    .await;
    state
        .metrics
        .observe_request("fhir", "batch", started.elapsed(), result.as_ref().err());
    match result {
        Ok(b) => fhir(StatusCode::OK, b),
        Err(e) => outcome(&e),
    }
}

/// The entries of a batch Bundle; anything but one is refused whole.
fn entries(body: &Value) -> Result<&[Value], Error> {
    if body.get("resourceType").and_then(Value::as_str) != Some("Bundle") {
        return Err(Error::invalid_argument(
            "POST /v1/fhir takes a Bundle of type batch",
        ));
    }
    match body.get("type").and_then(Value::as_str) {
        Some("batch") => {}
        Some("transaction") => return Err(Error::failed_precondition(
            "transaction Bundles are not supported: send a batch (each entry answered on its own)",
        )),
        other => {
            return Err(Error::invalid_argument(format!(
                "Bundle.type must be batch, got {}",
                other.map_or("nothing".to_owned(), |t| format!("{t:?}"))
            )))
        }
    }
    let entries = match body.get("entry") {
        None => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err(Error::invalid_argument("Bundle.entry must be an array")),
    };
    if entries.len() > MAX_ENTRIES {
        return Err(Error::out_of_range(format!(
            "the Bundle has {} entries, at most {MAX_ENTRIES} are allowed",
            entries.len()
        )));
    }
    Ok(entries)
}

/// One entry's answer.
async fn answer(
    state: &AppState,
    who: &crate::auth::Principal,
    entry: &Value,
    deadline: std::time::Instant,
) -> (StatusCode, Value) {
    let request = &entry["request"];
    let method = request["method"].as_str().unwrap_or_default();
    if method != "POST" {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            issue(
                "not-supported",
                &format!("entry.request.method must be POST (an operation), got {method:?}"),
                Some("Bundle.entry.request.method"),
            ),
        );
    }
    let url = request["url"].as_str().unwrap_or_default();
    let Some(op) = mii::Op::from_url(url) else {
        return (
            StatusCode::NOT_FOUND,
            issue(
                "not-supported",
                &format!("entry.request.url {url:?} names no operation of this server"),
                Some("Bundle.entry.request.url"),
            ),
        );
    };
    match mii::run(state, who, op, &entry["resource"], deadline).await {
        Ok(answer) => answer,
        Err(e) => mii::refused(op, &e),
    }
}
