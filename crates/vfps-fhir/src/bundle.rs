//! A Bundle of MII operations, read: its kind (batch or transaction), its
//! entries, the operation each asks for, and what it may cost.

use serde_json::Value;
use vfps_core::{Error, MAX_PSEUDONYMS_PER_ORIGINAL};

use crate::operation::Op;

/// Most entries one Bundle may carry.
pub const MAX_ENTRIES: usize = 1000;
/// Largest Bundle read: room for its entries, each up to a few KiB (an
/// original may have 2 KiB), where a single call's body is far smaller.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;
/// Most pseudonyms one request may make or answer, across a Bundle's
/// entries: each entry counts one, a `$pseudonymize-multiple` its `count`
/// (a `count` 0, which answers all of an original's, as many as an original
/// may have). With [`MAX_BYTES`], it bounds what one request can cost in
/// memory and work whatever it asks (docs/fhir.md, "Bounds").
pub const MAX_PSEUDONYMS: u64 = 10_000;

/// Whether a Bundle is a transaction, and its entries; anything but a batch
/// or transaction Bundle is refused whole.
pub fn entries(body: &Value) -> Result<(bool, &[Value]), Error> {
    if body.get("resourceType").and_then(Value::as_str) != Some("Bundle") {
        return Err(Error::invalid_argument(
            "POST /v1/fhir takes a Bundle of type batch or transaction",
        ));
    }
    let transaction = match body.get("type").and_then(Value::as_str) {
        Some("batch") => false,
        Some("transaction") => true,
        other => {
            return Err(Error::invalid_argument(format!(
                "Bundle.type must be batch or transaction, got {}",
                other.map_or("nothing".to_owned(), |t| format!("{t:?}"))
            )))
        }
    };
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
    Ok((transaction, entries))
}

/// The pseudonyms an entry may make or answer (see [`MAX_PSEUDONYMS`]).
pub fn work(entry: &Value) -> u64 {
    let url = entry["request"]["url"].as_str().unwrap_or_default();
    if Op::from_url(url) != Some(Op::PseudonymizeMultiple) {
        return 1;
    }
    let count = entry["resource"]["parameter"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "count"))
        .and_then(|p| {
            ["valueInteger", "valueUnsignedInt", "valuePositiveInt"]
                .iter()
                .find_map(|k| p[*k].as_i64())
        });
    match count {
        Some(0) => u64::from(MAX_PSEUDONYMS_PER_ORIGINAL),
        // Refused by the entry itself, before any work.
        Some(n) if n < 0 => 1,
        Some(n) => n as u64,
        None => 1,
    }
}

/// What a Bundle's entries ask for in all, when it is more than one request
/// may ask (see [`MAX_PSEUDONYMS`]).
pub fn too_costly(entries: &[Value]) -> Option<u64> {
    let asked: u64 = entries.iter().map(work).sum();
    (asked > MAX_PSEUDONYMS).then_some(asked)
}

/// Why an entry names no operation this server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrunnable {
    /// 405 for a method other than POST, 404 for an unknown operation.
    pub status: u16,
    pub diagnostics: String,
    pub expression: &'static str,
}

/// The operation an entry asks for, and its resource.
pub fn operation_of(entry: &Value) -> Result<(Op, &Value), Unrunnable> {
    let request = &entry["request"];
    let method = request["method"].as_str().unwrap_or_default();
    if method != "POST" {
        return Err(Unrunnable {
            status: 405,
            diagnostics: format!(
                "entry.request.method must be POST (an operation), got {method:?}"
            ),
            expression: "Bundle.entry.request.method",
        });
    }
    let url = request["url"].as_str().unwrap_or_default();
    let op = Op::from_url(url).ok_or_else(|| Unrunnable {
        status: 404,
        diagnostics: format!("entry.request.url {url:?} names no operation of this server"),
        expression: "Bundle.entry.request.url",
    })?;
    Ok((op, &entry["resource"]))
}
