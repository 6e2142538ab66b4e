//! What the MII interface's calls in the erasable namespace answered:
//! subjects acknowledged, every (original → pseudonym) answer with when its
//! call was sent, every erasure with what its answer means, every batch
//! Bundle and every transaction Bundle with its new originals. Saved as `erasures.json`; P8 and its companions read it
//! (`checker::erasure`).
//!
//! Times are microseconds of the wall clock: an answer is judged against an
//! erasure's acknowledgement by when its call was *sent* (a call sent before
//! the acknowledgement may rightly see the mapping).

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use serde::{Deserialize, Serialize};

pub use super::erasure_kind::{now_micros, ErasureKind, Meaning};

/// Through which path an answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    Pseudonymize,
    GetPseudonym,
    DePseudonymize,
    /// A `$pseudonymize` entry of a batch Bundle.
    BundleEntry,
    /// A `$pseudonymize` entry of an acknowledged transaction Bundle.
    TransactionEntry,
    /// A `$pseudonymize` sent together with an erasure of the same original.
    Race,
}

/// One (original → pseudonym) answer in the erasable namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The second of the load the call was offered in.
    pub second: u64,
    pub sent_micros: u64,
    pub path: Path,
    pub original: String,
    pub pseudonym: String,
}

/// A lookup answered "not found" (404) where it was expected to answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotFound {
    pub second: u64,
    pub sent_micros: u64,
    pub path: Path,
    pub original: String,
    pub pseudonym: String,
}

/// One erasure of an acknowledged subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    pub second: u64,
    pub kind: ErasureKind,
    pub original: String,
    /// The pseudonym acknowledged for the original before it was erased.
    pub pseudonym: String,
    pub sent_micros: u64,
    pub answered_micros: u64,
    pub meaning: Meaning,
    /// The HTTP status, or what ended the call without one.
    pub answer: String,
    /// Sent together with a `$pseudonymize` of the same original.
    pub raced: bool,
}

/// One batch Bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bundle {
    pub second: u64,
    pub entries: usize,
    /// Entries meant to fail (an unknown context): each must be answered 404.
    pub meant_to_fail: usize,
    pub meaning: Meaning,
    /// Entries answered 200 with a pseudonym.
    pub entries_ok: usize,
    /// Entries answered otherwise than their model allows, for people.
    pub wrong: Vec<String>,
    /// Its fresh originals' order against their pseudonyms' (P10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<crate::checker::privacy::Order>,
}

/// How the entry of a transaction meant to fail it is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Failing {
    /// A `$pseudonymize` in a namespace that does not exist: 404.
    UnknownNamespace,
    /// A `$pseudonymize` without its `original`: 400.
    Malformed,
}

impl Failing {
    /// The status the whole transaction must be refused with.
    pub fn status(self) -> u16 {
        match self {
            Failing::UnknownNamespace => 404,
            Failing::Malformed => 400,
        }
    }
}

/// The entry meant to fail a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailingEntry {
    pub index: usize,
    pub how: Failing,
}

/// An original of a transaction no one had sent before, and the pseudonym
/// the transaction answered for it (acknowledged transactions only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewEntry {
    pub original: String,
    pub pseudonym: Option<String>,
}

/// One transaction Bundle of `$pseudonymize` entries: all applied or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub second: u64,
    pub sent_micros: u64,
    pub entries: usize,
    /// The entry meant to fail the whole transaction, if any.
    pub meant_to_fail: Option<FailingEntry>,
    pub meaning: Meaning,
    /// The HTTP status, or what ended the call without one.
    pub answer: String,
    /// Its fresh originals: only they tell whether it was applied (an
    /// acknowledged subject's entry is there either way).
    pub new: Vec<NewEntry>,
    /// Answers otherwise than its model allows, for people.
    pub wrong: Vec<String>,
}

/// What the service does not offer yet, asked now and then to see it still
/// refuses it (so "not exercised" is a finding, not an assumption).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unsupported {
    /// A `transaction` Bundle, refused with 400 until the service offered
    /// them; kept to read older runs (transactions are judged now, as
    /// [`Transaction`]s).
    Transaction,
    /// `$pseudonymize-multiple`: documented as refused with 405.
    Multiple,
}

/// One such question and its answer (`None`: no answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub second: u64,
    pub what: Unsupported,
    pub status: Option<u16>,
}

/// What one replica answered one question of a cache check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Heard {
    /// The pseudonym (`$pseudonymize`) or original (`$de-pseudonymize`) answered.
    Value(String),
    NotFound,
    /// No decisive answer (another status, none, not sent).
    Failed(String),
}

/// One question of a cache check, asked of one replica on its own address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAnswer {
    /// The replica's index among the load's HTTP addresses.
    pub replica: usize,
    /// [`Path::Pseudonymize`] of the original or [`Path::DePseudonymize`]
    /// of the erased pseudonym.
    pub path: Path,
    pub sent_micros: u64,
    pub answered_micros: u64,
    pub heard: Heard,
}

/// An erasure checked against every replica's pseudonym cache: each replica
/// asked for the original's pseudonym before (which fills its cache), and
/// after the acknowledgement asked again on every path that could answer the
/// erased mapping. Only stale caches (or a lost erasure) answer it then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCheck {
    /// The second of the load the erasure was offered in.
    pub second: u64,
    pub kind: ErasureKind,
    pub original: String,
    /// The acknowledged pseudonym that was erased.
    pub pseudonym: String,
    pub meaning: Meaning,
    /// When the erasure's answer came.
    pub answered_micros: u64,
    pub before: Vec<ReplicaAnswer>,
    /// Asked only once the erasure was acknowledged.
    pub after: Vec<ReplicaAnswer>,
}

/// Everything `erasures.json` keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErasureHistory {
    pub namespace: String,
    pub answers: Vec<Answered>,
    pub not_found: Vec<NotFound>,
    pub erasures: Vec<Erasure>,
    pub bundles: Vec<Bundle>,
    /// Erasures refused for want of the right (403) or the namespace's
    /// setting (405): the run could not erase.
    pub cannot_erase: Vec<String>,
    #[serde(default)]
    pub unsupported: Vec<Probe>,
    #[serde(default)]
    pub transactions: Vec<Transaction>,
    /// The multi-pseudonym namespace's record (`None` in runs before it).
    #[serde(default)]
    pub multi: Option<super::multi::MultiHistory>,
    /// Erasures checked against every replica's cache (older runs have none).
    #[serde(default)]
    pub cache_checks: Vec<CacheCheck>,
}

/// Most answers kept (a run at 50 calls/s for an hour stays well below).
const MAX_ANSWERS: usize = 500_000;

/// Thread-safe accumulation during the load.
#[derive(Default)]
pub struct ErasureLog {
    inner: Mutex<ErasureHistory>,
}

impl ErasureLog {
    pub fn new(namespace: &str) -> Self {
        Self {
            inner: Mutex::new(ErasureHistory {
                namespace: namespace.to_owned(),
                ..ErasureHistory::default()
            }),
        }
    }

    fn with(&self, f: impl FnOnce(&mut ErasureHistory)) {
        if let Ok(mut h) = self.inner.lock() {
            f(&mut h);
        }
    }

    pub fn answered(&self, a: Answered) {
        self.with(|h| {
            if h.answers.len() < MAX_ANSWERS {
                h.answers.push(a);
            }
        });
    }

    pub fn not_found(&self, n: NotFound) {
        self.with(|h| h.not_found.push(n));
    }

    pub fn erased(&self, e: Erasure) {
        self.with(|h| h.erasures.push(e));
    }

    pub fn bundle(&self, b: Bundle) {
        self.with(|h| h.bundles.push(b));
    }

    pub fn transaction(&self, t: Transaction) {
        self.with(|h| h.transactions.push(t));
    }

    pub fn cache_check(&self, c: CacheCheck) {
        self.with(|h| h.cache_checks.push(c));
    }

    pub fn unsupported(&self, p: Probe) {
        self.with(|h| h.unsupported.push(p));
    }

    pub fn cannot_erase(&self, why: String) {
        self.with(|h| {
            if h.cannot_erase.len() < 10 {
                h.cannot_erase.push(why);
            }
        });
    }

    /// Records into the multi-pseudonym namespace's record, started as
    /// `namespace` if there is none yet.
    pub fn multi(&self, namespace: &str, f: impl FnOnce(&mut super::multi::MultiHistory)) {
        self.with(|h| {
            f(h.multi
                .get_or_insert_with(|| super::multi::MultiHistory::new(namespace)))
        });
    }

    pub fn history(&self) -> ErasureHistory {
        self.inner.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

/// What one database instance holds of the erased pseudonyms, asked directly
/// after the run (the local platform): (pseudonym, original) rows, or why it
/// could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseRows {
    pub instance: String,
    pub rows: Vec<(String, String)>,
    pub error: Option<String>,
}

/// Whether a row's stored original still stands for `original`: it is the
/// original itself, or — where originals are sealed at rest — a blind index
/// (`~k…`), which the row keeps until its mapping is erased (anonymization
/// leaves a tombstone, a delete no row).
pub fn stands_for(stored: &str, original: &str) -> bool {
    stored == original || vfps_keys::is_index(stored)
}

/// The first acknowledged pseudonym of every original (by when it was sent).
pub fn acknowledged(h: &ErasureHistory) -> HashMap<&str, (&str, u64)> {
    let mut first: HashMap<&str, (&str, u64)> = HashMap::new();
    for a in &h.answers {
        let e = first
            .entry(a.original.as_str())
            .or_insert((a.pseudonym.as_str(), a.sent_micros));
        if a.sent_micros < e.1 {
            *e = (a.pseudonym.as_str(), a.sent_micros);
        }
    }
    first
}

/// Acknowledged subjects never erased, up to `n` (for verification).
pub fn live_subjects(h: &ErasureHistory, n: usize) -> Vec<(String, String)> {
    let erased: HashSet<&str> = h.erasures.iter().map(|e| e.original.as_str()).collect();
    let mut live: Vec<(String, String)> = acknowledged(h)
        .into_iter()
        .filter(|(o, _)| !erased.contains(o))
        .map(|(o, (p, _))| (o.to_owned(), p.to_owned()))
        .collect();
    live.sort();
    live.truncate(n);
    live
}
