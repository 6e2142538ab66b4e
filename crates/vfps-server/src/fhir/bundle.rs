//! `POST /v1/fhir` with a Bundle of MII operations.
//!
//! - `batch`: each entry runs on its own and gets its own answer (a
//!   `Parameters`, or an `OperationOutcome` with its status), in the order
//!   sent, in a `batch-response`. The entries run together, so their Creates
//!   and lookups are written and read in the service's batches rather than one
//!   round trip each.
//! - `transaction`: all or nothing. Its entries may be `$pseudonymize`,
//!   `$get-pseudonym` and `$de-pseudonymize` (an erasure cannot be undone, so
//!   none is part of one). Every entry is read, authorized and its lookups
//!   answered first; then the new pseudonyms of every `$pseudonymize` are
//!   stored together, in one statement. One failing entry fails the whole
//!   Bundle with its `OperationOutcome` (naming the entry) and changes nothing.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use serde_json::{json, Value};
use vfps_core::Error;

use super::{fhir, issue, mii, outcome, parameters::Input};
use crate::state::AppState;

pub use vfps_fhir::bundle::{MAX_BYTES, MAX_ENTRIES, MAX_PSEUDONYMS};

pub(super) async fn bundle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let started = Instant::now();
    let result = async {
        let (who, body) = super::caller_and_body(&state, &headers, &body, d).await?;
        let (transaction, entries) = vfps_fhir::bundle::entries(&body)?;
        if let Some(refused) = too_costly(entries) {
            return Ok(Err(refused));
        }
        let answers = if transaction {
            let mut revealed = Vec::new();
            let outcome = together(&state, &who, entries, d, &mut revealed).await;
            // A lookup's answer reaches the caller only with the whole
            // transaction's: audited as revealed then, else as not.
            let kind = outcome.as_ref().map(|_| ()).map_err(|(status, _)| {
                if status.is_server_error() {
                    vfps_core::ErrorKind::Unavailable
                } else {
                    vfps_core::ErrorKind::FailedPrecondition
                }
            });
            for (op, namespace) in &revealed {
                mii::record(&state, &who, *op, namespace, kind);
            }
            match outcome {
                Ok(answers) => answers,
                Err(failed) => return Ok(Err(failed)),
            }
        } else {
            // Entries start in a random order, not the Bundle's: a method
            // that carries its making order (UUIDv7) would otherwise carry
            // the originals' order (docs/privacy.md). Answered in the
            // Bundle's order.
            let mut order: Vec<usize> = (0..entries.len()).collect();
            if !vfps_core::generate::revealing() {
                rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rand::rng());
            }
            let started = futures::future::join_all(
                order.iter().map(|&i| answer(&state, &who, &entries[i], d)),
            )
            .await;
            let mut answers: Vec<Option<(StatusCode, Value)>> = vec![None; entries.len()];
            for (i, a) in order.into_iter().zip(started) {
                answers[i] = Some(a);
            }
            answers.into_iter().flatten().collect()
        };
        Ok(Ok(json!({
            "resourceType": "Bundle",
            "type": if transaction { "transaction-response" } else { "batch-response" },
            "entry": answers.into_iter().map(|(status, resource)| json!({
                "resource": resource,
                "response": {"status": format!(
                    "{} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or_default()
                )},
            })).collect::<Vec<_>>(),
        })))
    }
    .await;
    state
        .metrics
        .observe_request("fhir", "bundle", started.elapsed(), result.as_ref().err());
    match result {
        Ok(Ok(b)) => fhir(StatusCode::OK, b),
        Ok(Err((status, resource))) => fhir(status, resource),
        Err(e) => outcome(&e),
    }
}

/// A Bundle that asks for more than one request may: refused whole with
/// `413` (`too-costly`), naming the bound, before any entry runs.
fn too_costly(entries: &[Value]) -> Option<(StatusCode, Value)> {
    vfps_fhir::bundle::too_costly(entries).map(|asked| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            issue(
                "too-costly",
                &format!(
                    "the Bundle asks for {asked} pseudonyms (one an entry, a \
                     $pseudonymize-multiple its count, {} for a count of 0); one request may \
                     ask for at most {MAX_PSEUDONYMS}: split it",
                    vfps_core::MAX_PSEUDONYMS_PER_ORIGINAL
                ),
                Some("Bundle.entry"),
            ),
        )
    })
}

/// One entry's answer.
async fn answer(
    state: &AppState,
    who: &crate::auth::Principal,
    entry: &Value,
    deadline: std::time::Instant,
) -> (StatusCode, Value) {
    let (op, resource) = match operation_of(entry) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    match mii::run(state, who, op, resource, deadline).await {
        Ok(answer) => answer,
        Err(e) => mii::refused(op, &e),
    }
}

/// A failed transaction's answer: the failing entry's status and outcome,
/// its diagnostics naming the entry.
fn failed_entry(i: usize, (status, mut resource): (StatusCode, Value)) -> (StatusCode, Value) {
    if let Some(issue) = resource["issue"].get_mut(0) {
        let said = issue["diagnostics"].as_str().unwrap_or_default().to_owned();
        issue["diagnostics"] = json!(format!(
            "entry {i}: {said} (the transaction changed nothing)"
        ));
        issue["expression"] = json!([format!("Bundle.entry[{i}]")]);
    }
    (status, resource)
}

/// A transaction's entries answered, or the first failure.
///
/// FHIR processes a transaction's POSTs in entry order, as one: a
/// `$get-pseudonym` after a `$pseudonymize` of the same original sees its
/// pseudonym. Lookups change nothing, so they are answered as they come, and
/// the `$pseudonymize` entries' new pseudonyms are stored together at the end;
/// a `$get-pseudonym` of an original an earlier entry pseudonymizes is
/// answered with that entry's pseudonym.
///
/// Each lookup answered (its operation and namespace) is added to `answered`
/// for the caller to audit once the transaction's outcome is known.
async fn together(
    state: &AppState,
    who: &crate::auth::Principal,
    entries: &[Value],
    deadline: std::time::Instant,
    answered: &mut Vec<(mii::Op, String)>,
) -> Result<Vec<(StatusCode, Value)>, (StatusCode, Value)> {
    let mut answers: Vec<Option<(StatusCode, Value)>> = vec![None; entries.len()];
    let mut creates: Vec<(usize, Input)> = Vec::new();
    // `$get-pseudonym` entries answered by an earlier entry's pseudonym:
    // (entry, the create it follows).
    let mut follows: Vec<(usize, usize, Input)> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let (op, resource) = operation_of(entry).map_err(|refusal| failed_entry(i, refusal))?;
        match op {
            mii::Op::Pseudonymize => {
                let input = mii::checked(state, who, op, resource)
                    .map_err(|e| failed_entry(i, mii::refused(op, &e)))?;
                if input.allow_create == Some(false) {
                    let e = Error::invalid_argument(
                        "allowCreate false has no place in a transaction: use $get-pseudonym",
                    );
                    return Err(failed_entry(i, super::outcome_of(&e)));
                }
                creates.push((i, input));
            }
            mii::Op::GetPseudonym => {
                let input = mii::checked(state, who, op, resource)
                    .map_err(|e| failed_entry(i, mii::refused(op, &e)))?;
                match creates.iter().position(|(_, c)| same_original(c, &input)) {
                    Some(k) => follows.push((i, k, input)),
                    None => {
                        answers[i] =
                            Some(read(state, who, op, resource, i, deadline, answered).await?)
                    }
                }
            }
            mii::Op::DePseudonymize => {
                answers[i] = Some(read(state, who, op, resource, i, deadline, answered).await?);
            }
            mii::Op::PseudonymizeMultiple => {
                let why = "$pseudonymize-multiple cannot be part of a transaction: it makes new \
                           pseudonyms on every call, and a transaction's entries are answered as one \
                           stored whole; send it in a batch or on its own";
                return Err(failed_entry(
                    i,
                    (StatusCode::BAD_REQUEST, issue("not-supported", why, None)),
                ));
            }
            mii::Op::DeletePseudonym | mii::Op::AnonymizeOriginal => {
                let why = format!(
                    "${} cannot be part of a transaction (an erasure cannot be undone): send it in a batch",
                    op.code()
                );
                return Err(failed_entry(
                    i,
                    (StatusCode::BAD_REQUEST, issue("not-supported", &why, None)),
                ));
            }
        }
    }
    // Each original's system, checked (and adopted) once every entry is read
    // and authorized.
    for (i, input) in &creates {
        let system = input.original.as_ref().and_then(|o| o.system());
        state
            .service
            .original_system(
                input.context.value(),
                system,
                crate::service::Adopt::Yes,
                deadline,
            )
            .await
            .map_err(|e| failed_entry(*i, mii::refused(mii::Op::Pseudonymize, &e)))?;
    }
    let items: Vec<(String, String)> = creates
        .iter()
        .map(|(_, input)| {
            let original = input.original.as_ref().map(|o| o.value().to_owned());
            (
                input.context.value().to_owned(),
                original.unwrap_or_default(),
            )
        })
        .collect();
    if !items.is_empty() {
        let made = state
            .service
            .create_together(&items, deadline)
            .await
            .map_err(|e| {
                // "item k: …" is about the k-th $pseudonymize: name its entry.
                let entry = e
                    .message
                    .strip_prefix("item ")
                    .and_then(|rest| rest.split(':').next())
                    .and_then(|k| k.parse::<usize>().ok())
                    .and_then(|k| creates.get(k).map(|(i, _)| *i));
                let answer = mii::refused(mii::Op::Pseudonymize, &e);
                match entry {
                    Some(i) => failed_entry(i, answer),
                    None => answer,
                }
            })?;
        let answer_of = |input: &Input, p: &crate::service::Pseudonymized, made: bool| {
            let status = if made {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            mii::pseudonymized(input, &p.pseudonym.pseudonym_value)
                .map(|a| (status, a))
                .ok_or_else(|| {
                    super::outcome_of(&Error::internal("a $pseudonymize without an original"))
                })
        };
        for ((i, input), p) in creates.iter().zip(&made) {
            answers[*i] = Some(answer_of(input, p, p.made)?);
        }
        for (i, k, input) in &follows {
            answers[*i] = Some(answer_of(input, &made[*k], false)?);
        }
    }
    Ok(answers.into_iter().flatten().collect())
}

/// Whether two entries name one original (value and system) in one
/// namespace.
fn same_original(a: &Input, b: &Input) -> bool {
    fn original(i: &Input) -> Option<(&str, Option<&str>)> {
        i.original.as_ref().map(|o| (o.value(), o.system()))
    }
    a.context.value() == b.context.value() && original(a) == original(b)
}

/// A lookup entry of a transaction, answered now or failing it; a refused
/// one is audited at once (nothing was revealed), an answered one is added
/// to `answered`.
async fn read(
    state: &AppState,
    who: &crate::auth::Principal,
    op: mii::Op,
    resource: &Value,
    i: usize,
    deadline: std::time::Instant,
    answered: &mut Vec<(mii::Op, String)>,
) -> Result<(StatusCode, Value), (StatusCode, Value)> {
    let (namespace, result) = mii::run_unaudited(state, who, op, resource, deadline).await;
    match result {
        Ok(answer) => {
            answered.push((op, namespace));
            Ok(answer)
        }
        Err(e) => {
            mii::record(state, who, op, &namespace, Err(e.kind));
            Err(failed_entry(i, mii::refused(op, &e)))
        }
    }
}

/// The operation an entry asks for, and its resource; else the entry's
/// answer.
fn operation_of(entry: &Value) -> Result<(mii::Op, &Value), (StatusCode, Value)> {
    vfps_fhir::bundle::operation_of(entry).map_err(|u| {
        (
            StatusCode::from_u16(u.status).unwrap_or(StatusCode::BAD_REQUEST),
            issue("not-supported", &u.diagnostics, Some(u.expression)),
        )
    })
}
