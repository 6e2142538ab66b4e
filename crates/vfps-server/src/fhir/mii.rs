//! The six operations of the MII pseudonymization interface (IG
//! 2026.1.0-ballot.1), system-level at the FHIR base: a namespace is the IG's
//! pseudonymization context (`context.value` is its name).
//!
//! | operation | needs | answers |
//! |---|---|---|
//! | `$pseudonymize` | write | `context`, `original`, `pseudonym` (made if missing, unless `allowCreate` is false); single-pseudonym namespaces |
//! | `$get-pseudonym` | write | the same, never made; 404 without one; single-pseudonym namespaces |
//! | `$de-pseudonymize` | reverse-lookup (audited) | `original` with parts `context`, `value`, `pseudonym` |
//! | `$pseudonymize-multiple` | write | one `pseudonym` (parts `context`, `original`, `value`) per pseudonym: `count` 0 all of the original's (404 without one), `count` n n new ones (201); multi-pseudonym namespaces |
//! | `$delete-pseudonym` | erase (audited) | an `OperationOutcome`: deleted, where the namespace allows it |
//! | `$anonymize-original` | erase (audited) | an `OperationOutcome`: the link gone for good, the pseudonym reserved |
//!
//! Every operation runs through the service the other transports use; one
//! entry of a batch Bundle is one [`run`].

use axum::http::StatusCode;
use serde_json::{json, Value};
use vfps_core::{Error, ErrorKind};

use crate::{
    auth::{audit, Operation, Principal},
    service::{Adopt, Erasure},
    state::AppState,
};
pub use vfps_fhir::operation::{Op, IG};
use vfps_fhir::parameters::{read, Input};

/// Most pseudonyms one `$pseudonymize-multiple` may ask for.
pub const MAX_COUNT: i64 = crate::service::MAX_NEW_PSEUDONYMS as i64;

/// What an operation is to the authorization rules and the audit trail.
fn operation(op: Op) -> Operation {
    match op {
        Op::Pseudonymize | Op::PseudonymizeMultiple => Operation::CreatePseudonym,
        Op::GetPseudonym => Operation::FindPseudonym,
        Op::DePseudonymize => Operation::GetPseudonym,
        Op::DeletePseudonym | Op::AnonymizeOriginal => Operation::ErasePseudonym,
    }
}

/// What an operation answered: a status and a resource (`Parameters`, or
/// an `OperationOutcome`).
pub type Answer = (StatusCode, Value);

/// Runs `op` on `body` for `who`, within `deadline`; an error is answered
/// with [`refused`].
pub async fn run(
    state: &AppState,
    who: &Principal,
    op: Op,
    body: &Value,
    deadline: std::time::Instant,
) -> Result<Answer, Error> {
    let (namespace, result) = run_unaudited(state, who, op, body, deadline).await;
    record(
        state,
        who,
        op,
        &namespace,
        result.as_ref().map(|_| ()).map_err(|e| e.kind),
    );
    result
}

/// [`run`] without its audit event, for an answer that may not reach the
/// caller (a transaction's entry): the namespace it named, and the result.
pub async fn run_unaudited(
    state: &AppState,
    who: &Principal,
    op: Op,
    body: &Value,
    deadline: std::time::Instant,
) -> (String, Result<Answer, Error>) {
    let (required, optional) = op.params();
    let input = match read(body, required, optional) {
        Ok(input) => input,
        Err(e) => return (String::new(), Err(e)),
    };
    let namespace = input.context.value().to_owned();
    let result = match state.auth.authorize(who, operation(op), Some(&namespace)) {
        Ok(()) => execute(state, op, &input, &namespace, deadline).await,
        Err(e) => Err(e),
    };
    (namespace, result)
}

/// The audit event of `op` in `namespace` (for the operations that have
/// one): answered, or not with `outcome`'s error.
pub fn record(
    state: &AppState,
    who: &Principal,
    op: Op,
    namespace: &str,
    outcome: Result<(), vfps_core::ErrorKind>,
) {
    if operation(op).audited() {
        state.auth.record(&audit::Event {
            principal: Some(who),
            operation: operation(op),
            namespace,
            job: None,
            token: None,
            outcome: outcome.map(|()| 1),
        });
    }
}

/// `$pseudonymize`'s answer: the input echoed, and the pseudonym in kind.
pub fn pseudonymized(input: &Input, pseudonym: &str) -> Option<Value> {
    let original = input.original.as_ref()?;
    Some(json!({"resourceType": "Parameters", "parameter": [
        input.context.echo(input.context_name),
        original.echo("original"),
        original.answer("pseudonym", pseudonym, input.context.system()),
    ]}))
}

/// For a transaction: `op`'s input read from `body` and authorized for
/// `who`, its namespace named by `context`.
pub fn checked(state: &AppState, who: &Principal, op: Op, body: &Value) -> Result<Input, Error> {
    let (required, optional) = op.params();
    let input = read(body, required, optional)?;
    state
        .auth
        .authorize(who, operation(op), Some(input.context.value()))?;
    Ok(input)
}

async fn execute(
    state: &AppState,
    op: Op,
    input: &Input,
    namespace: &str,
    deadline: std::time::Instant,
) -> Result<Answer, Error> {
    let service = &state.service;
    let context = &input.context;
    match op {
        Op::Pseudonymize | Op::GetPseudonym => {
            let original = input.original.as_ref().ok_or_else(missing)?;
            let creates = op == Op::Pseudonymize && input.allow_create != Some(false);
            let adopt = if creates { Adopt::Yes } else { Adopt::No };
            service
                .original_system(namespace, original.system(), adopt, deadline)
                .await?;
            let (p, made) = if creates {
                let p = service
                    .pseudonymize(namespace, original.value(), deadline)
                    .await?;
                (p.pseudonym, p.made)
            } else {
                let p = service
                    .find_pseudonym(namespace, original.value(), deadline)
                    .await?;
                (p, false)
            };
            let answer = pseudonymized(input, &p.pseudonym_value).ok_or_else(missing)?;
            // As the IG's examples: 201 Created where the pseudonym is new.
            let status = if made {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((status, answer))
        }
        Op::DePseudonymize => {
            let pseudonym = input.pseudonym.as_ref().ok_or_else(missing)?;
            let p = service
                .get_pseudonym(namespace, pseudonym.value(), deadline)
                .await?;
            // The original as it was given: in its namespace's system (not
            // the context's, nor the pseudonym's).
            let system = service
                .original_system(namespace, None, Adopt::No, deadline)
                .await?;
            Ok((
                StatusCode::OK,
                json!({"resourceType": "Parameters", "parameter": [{
                    "name": "original",
                    "part": [
                        context.echo(input.context_name),
                        pseudonym.answer("value", &p.original_value, system.as_deref()),
                        pseudonym.echo("pseudonym"),
                    ],
                }]}),
            ))
        }
        Op::PseudonymizeMultiple => {
            let count = input.count.unwrap_or_default();
            if !(0..=MAX_COUNT).contains(&count) {
                return Err(Error::invalid_argument(format!(
                    "parameter count must be between 0 and {MAX_COUNT}, got {count}"
                )));
            }
            let original = input.original.as_ref().ok_or_else(missing)?;
            let adopt = if count > 0 { Adopt::Yes } else { Adopt::No };
            service
                .original_system(namespace, original.system(), adopt, deadline)
                .await?;
            let made = service
                .pseudonymize_multiple(namespace, original.value(), count as u32, deadline)
                .await?;
            // The IG's batch example answers new pseudonyms 201 Created.
            let status = if count == 0 {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((
                status,
                json!({"resourceType": "Parameters", "parameter": made.iter().map(|p| json!({
                    "name": "pseudonym",
                    "part": [
                        context.echo("context"),
                        original.echo("original"),
                        original.answer("value", &p.pseudonym_value, context.system()),
                    ],
                })).collect::<Vec<_>>()}),
            ))
        }
        Op::DeletePseudonym | Op::AnonymizeOriginal => {
            let original = input.original.as_ref().ok_or_else(missing)?;
            service
                .original_system(namespace, original.system(), Adopt::No, deadline)
                .await?;
            let how = if op == Op::DeletePseudonym {
                Erasure::Delete
            } else {
                Erasure::Anonymize
            };
            service
                .erase(namespace, original.value(), how, deadline)
                .await?;
            let (code, text) = match how {
                Erasure::Delete => ("MSG_DELETED", "Entry deleted."),
                Erasure::Anonymize => (
                    "MSG_UPDATED",
                    "Entry anonymized: the link is gone for good.",
                ),
            };
            Ok((
                StatusCode::OK,
                json!({"resourceType": "OperationOutcome", "issue": [{
                    "severity": "information",
                    "code": "informational",
                    "details": {"coding": [{
                        "system": "http://terminology.hl7.org/CodeSystem/operation-outcome",
                        "code": code,
                    }]},
                    "diagnostics": text,
                }]}),
            ))
        }
    }
}

fn missing() -> Error {
    Error::internal("a required parameter was not read")
}

/// An error as the IG answers it: what a namespace does not allow is `405`
/// `not-supported` (the IG's batch example) — erasing where it is off,
/// `$pseudonymize-multiple` in a single-pseudonym namespace, `$pseudonymize`
/// and `$get-pseudonym` in a multi-pseudonym one — the rest as every FHIR
/// route answers errors.
pub fn refused(op: Op, e: &Error) -> Answer {
    if e.kind == ErrorKind::FailedPrecondition && op != Op::DePseudonymize && !e.is_restore_hold() {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            super::issue(
                "not-supported",
                &e.message,
                Some("Parameters.parameter.where(name='context')"),
            ),
        );
    }
    super::outcome_of(e)
}
