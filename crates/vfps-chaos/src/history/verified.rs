//! What verification saw after the load, as `erasures-verify.json` keeps
//! it: each erased and a sample of live subjects through every path of
//! every replica, transactions' fresh originals as found, and the
//! multi-pseudonym namespace's originals. `workload::mii` asks; the
//! checkers judge.

use serde::{Deserialize, Serialize};

use super::multi::Found;

/// What one path of one replica answered for a pseudonym, or a Create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seen {
    /// The original the pseudonym resolves to, or the pseudonym a Create answered.
    Value(String),
    NotFound,
    /// Could not be decided (the call kept failing).
    Error(String),
}

/// Every path of one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSeen {
    pub grpc_get: Seen,
    pub rest_get: Seen,
    pub fhir_de_pseudonymize: Seen,
    /// A gRPC Create of the original.
    pub recreated: Seen,
}

impl ReplicaSeen {
    pub fn lookups(&self) -> [(&'static str, &Seen); 3] {
        [
            ("gRPC Get", &self.grpc_get),
            ("REST GET", &self.rest_get),
            ("FHIR $de-pseudonymize", &self.fhir_de_pseudonymize),
        ]
    }
}

/// One subject (erased or live) through every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectSeen {
    pub original: String,
    pub pseudonym: String,
    pub replicas: Vec<ReplicaSeen>,
}

/// What verification saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// In the order of `ErasureHistory::erasures`.
    pub erasures: Vec<SubjectSeen>,
    /// Live subjects (acknowledged, never erased), a sample.
    pub live: Vec<SubjectSeen>,
    /// Transactions' fresh originals as found (older runs have none).
    #[serde(default)]
    pub transactions: Vec<TransactionSeen>,
    /// The multi-pseudonym namespace as found (runs before it have none).
    #[serde(default)]
    pub multi: Option<MultiSeen>,
}

/// What one transaction's fresh originals are found to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionSeen {
    /// Its index in `ErasureHistory::transactions`.
    pub index: usize,
    /// `$get-pseudonym` of each, in the order of `Transaction::new`: the
    /// pseudonym stored for it, or not found.
    pub new: Vec<Seen>,
}

/// What one replica answered of one original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiReplicaSeen {
    /// `$de-pseudonymize` of each asked pseudonym, in their order.
    pub resolved: Vec<Seen>,
    /// `count` 0 of the original.
    pub all: Found,
}

/// One multi original through every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalSeen {
    pub original: String,
    /// Its acknowledged pseudonyms, as asked.
    pub pseudonyms: Vec<String>,
    pub replicas: Vec<MultiReplicaSeen>,
}

/// What verification saw of the multi-pseudonym namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiSeen {
    pub originals: Vec<OriginalSeen>,
}
