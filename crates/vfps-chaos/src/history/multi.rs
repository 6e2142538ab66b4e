//! What `$pseudonymize-multiple` and the erasures in the multi-pseudonym
//! namespace answered during the load (`<namespace>-multi`): every create
//! (`count` n) with the pseudonyms it acknowledged, every read (`count` 0)
//! with what it answered, every `$de-pseudonymize` of an acknowledged
//! pseudonym with what it answered, every erasure with what its answer
//! means. Kept in
//! `erasures.json` beside the erasable namespace's record
//! ([`super::erasures::ErasureHistory::multi`]); `checker::multi` judges it.
//!
//! Times are microseconds of the wall clock, as in [`super::erasures`].

use serde::{Deserialize, Serialize};

use super::erasure_kind::{ErasureKind, Meaning};

/// One `$pseudonymize-multiple` with `count` n ≥ 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiCreate {
    pub second: u64,
    pub sent_micros: u64,
    pub answered_micros: u64,
    pub original: String,
    pub count: u32,
    /// Acknowledged: answered 201 with `count` pseudonyms.
    pub meaning: Meaning,
    /// The HTTP status, or what ended the call without one.
    pub answer: String,
    /// The pseudonyms answered (empty unless acknowledged).
    pub pseudonyms: Vec<String>,
}

/// What a `count` 0 answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Found {
    /// 200: every pseudonym of the original, as answered.
    Pseudonyms(Vec<String>),
    /// 404: the original has none.
    NotFound,
    /// No decisive answer (a 5xx, a lost answer, another status).
    NoAnswer(String),
}

/// One `$pseudonymize-multiple` with `count` 0 (writes nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiRead {
    pub second: u64,
    pub sent_micros: u64,
    pub answered_micros: u64,
    pub original: String,
    pub found: Found,
}

/// What a `$de-pseudonymize` answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resolved {
    /// 200: the original it resolves to.
    Original(String),
    /// 404: it resolves to nothing.
    NotFound,
    /// No decisive answer.
    NoAnswer(String),
}

/// One `$de-pseudonymize` of an acknowledged pseudonym of `original`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiResolve {
    pub second: u64,
    pub sent_micros: u64,
    pub answered_micros: u64,
    /// The original the pseudonym was acknowledged for.
    pub original: String,
    pub pseudonym: String,
    pub resolved: Resolved,
}

/// One erasure of a multi original (all of its pseudonyms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiErasure {
    pub second: u64,
    pub kind: ErasureKind,
    pub original: String,
    pub sent_micros: u64,
    pub answered_micros: u64,
    pub meaning: Meaning,
    /// The HTTP status, or what ended the call without one.
    pub answer: String,
}

/// Everything the multi-pseudonym side of a run keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiHistory {
    pub namespace: String,
    pub creates: Vec<MultiCreate>,
    pub reads: Vec<MultiRead>,
    #[serde(default)]
    pub resolves: Vec<MultiResolve>,
    pub erasures: Vec<MultiErasure>,
}

/// Most creates and reads kept each (a run at 50 calls/s for an hour stays
/// well below).
pub const MAX_RECORDS: usize = 200_000;

impl MultiHistory {
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            ..Self::default()
        }
    }

    pub fn created(&mut self, c: MultiCreate) {
        if self.creates.len() < MAX_RECORDS {
            self.creates.push(c);
        }
    }

    pub fn read(&mut self, r: MultiRead) {
        if self.reads.len() < MAX_RECORDS {
            self.reads.push(r);
        }
    }

    pub fn resolved(&mut self, r: MultiResolve) {
        if self.resolves.len() < MAX_RECORDS {
            self.resolves.push(r);
        }
    }

    pub fn erased(&mut self, e: MultiErasure) {
        self.erasures.push(e);
    }

    /// Every acknowledged pseudonym of each original, in the order answered.
    pub fn acknowledged(&self) -> std::collections::BTreeMap<&str, Vec<&str>> {
        let mut by: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for c in &self.creates {
            if c.meaning == Meaning::Acknowledged {
                by.entry(c.original.as_str())
                    .or_default()
                    .extend(c.pseudonyms.iter().map(String::as_str));
            }
        }
        by
    }
}
