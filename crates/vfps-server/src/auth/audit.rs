//! The audit trail: one event per reverse lookup, List, namespace delete, CSV
//! job create, cancel and download, and access token mint and revoke, allowed
//! or denied, on the `vfps::audit` log target (always one JSON object
//! per line; see `telemetry`) and counted in `vfps_audit_events_total`.
//!
//! An event names the caller (its typed subject, and the token's id), the
//! namespace, the operation, the outcome and the number of items; a token
//! event also the token concerned and what it grants — never an original
//! value, a pseudonym or a credential.

use vfps_core::ErrorKind;

use super::{Operation, Principal};
use crate::metrics::{code_name, Metrics};

/// The log target of audit events.
pub const TARGET: &str = "vfps::audit";

pub struct Event<'a> {
    /// `None` when authentication failed.
    pub principal: Option<&'a Principal>,
    pub operation: Operation,
    pub namespace: &'a str,
    /// The CSV job concerned, if any.
    pub job: Option<&'a str>,
    /// The access token minted or revoked, if any.
    pub token: Option<TokenChange<'a>>,
    /// Items returned, or the error.
    pub outcome: Result<u64, ErrorKind>,
}

/// The access token of a mint or revoke event.
#[derive(Debug, Clone, Copy)]
pub struct TokenChange<'a> {
    /// Its id; empty when a mint was refused.
    pub id: &'a str,
    /// What it grants: `admin` and the grants, e.g. `admin research=read`.
    pub grants: &'a str,
}

impl Event<'_> {
    /// `allowed` (and answered), `denied` (authentication or authorization
    /// refused) or `failed` (allowed, but the call failed).
    pub fn outcome_name(&self) -> &'static str {
        match self.outcome {
            Ok(_) => "allowed",
            Err(ErrorKind::Unauthenticated | ErrorKind::PermissionDenied) => "denied",
            Err(_) => "failed",
        }
    }
}

pub fn record(metrics: &Metrics, event: &Event<'_>) {
    let outcome = event.outcome_name();
    metrics.audit(event.operation.name(), outcome);
    let subject = event
        .principal
        .map_or("unauthenticated", |p| p.subject.as_str());
    let token_id = event
        .principal
        .and_then(|p| p.token_id.as_deref())
        .unwrap_or("");
    let items = event.outcome.as_ref().copied().unwrap_or(0);
    let code = code_name(event.outcome.err());
    // Only a valid namespace name is written: the field is the caller's, and an
    // invalid one may be anything (a value put there by mistake, a megabyte).
    let namespace =
        if event.namespace.is_empty() || vfps_core::NamespaceName::parse(event.namespace).is_ok() {
            event.namespace
        } else {
            "<invalid>"
        };
    tracing::info!(
        target: TARGET,
        subject,
        token_id,
        namespace,
        job = event.job.unwrap_or(""),
        token = event.token.map_or("", |t| t.id),
        grants = event.token.map_or("", |t| t.grants),
        operation = event.operation.name(),
        outcome,
        code,
        items,
        "audit"
    );
}
