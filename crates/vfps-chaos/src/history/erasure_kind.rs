//! The words both erasure histories share (the single-pseudonym one in
//! [`super::erasures`], the multi-pseudonym one in [`super::multi`]): which
//! erasure was asked for, and what its answer means.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// How an entry is erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErasureKind {
    /// `$delete-pseudonym`: a later `$pseudonymize` makes a new pseudonym.
    Delete,
    /// `$anonymize-original`: the pseudonym is never answered again for anyone.
    Anonymize,
}

impl ErasureKind {
    pub fn operation(self) -> &'static str {
        match self {
            ErasureKind::Delete => "$delete-pseudonym",
            ErasureKind::Anonymize => "$anonymize-original",
        }
    }
}

/// What an answer means for what the service did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Meaning {
    /// Done, and promised.
    Acknowledged,
    /// Definitely not done (a 4xx, or never sent).
    Refused,
    /// May have been done: a deadline, a lost connection, a 5xx.
    Unknown,
}
