//! Multi-pseudonym namespaces (the MII interface's multi-pseudonym domains):
//! an original may have many pseudonyms there (`$pseudonymize-multiple`).
//!
//! Their entries live in a table of their own, `multi_pseudonyms`, keyed by
//! `(namespace, pseudonym_value)`: the `pseudonyms` table keeps its
//! one-row-per-original key, and with it the single-pseudonym hot paths
//! (Create's upsert, the CSV jobs' inserts) unchanged. A namespace's kind is
//! fixed at creation and every insert checks it under the namespace row's
//! lock, so a namespace's entries are all in one of the two tables: each
//! table's key keeps a pseudonym unique in its namespace, and a pseudonym
//! issued as one of many is never issued to another original.
//!
//! What reads or removes entries by pseudonym or by namespace covers both
//! tables in the stores themselves (reverse lookup, batched lookups, namespace
//! delete, counts, erasure); what depends on the kind (List's order, making
//! pseudonyms) is chosen by the caller, who knows the namespace.

use std::time::SystemTime;

use async_trait::async_trait;
use vfps_core::{
    Error, NamespaceName, NamespaceUid, OriginalValue, PageCursor, Pseudonym, PseudonymPage,
};

/// What a writer knew of the namespace it writes to: its incarnation, and
/// whether its rows were being moved between plain and sealed originals.
/// The store writes nothing when either changed since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub uid: NamespaceUid,
    pub moving: bool,
}

impl From<NamespaceUid> for Known {
    /// An incarnation whose rows are not being moved.
    fn from(uid: NamespaceUid) -> Self {
        Self { uid, moving: false }
    }
}

#[async_trait]
pub trait Multi: Send + Sync {
    /// Stores each of `pseudonyms` as a new pseudonym of `original` in the
    /// incarnation `known.uid` of the multi-pseudonym namespace `namespace`, all
    /// at `created_at`, in one statement. Answers the rows stored, in input
    /// order: a pseudonym already taken in the namespace (or twice in the
    /// input) is skipped, and none is stored when the namespace is gone,
    /// another incarnation, or single-pseudonym; the caller tells these
    /// apart by reading the namespace. Committed through the synchronous
    /// standby. In a sealed namespace `original` is the blind index and
    /// `sealed[i]` the original sealed for `pseudonyms[i]`'s row (`sealed`
    /// empty: a plain namespace); none is stored when the namespace keeps
    /// its originals otherwise than that and `known` say.
    async fn add_pseudonyms(
        &self,
        namespace: &NamespaceName,
        known: Known,
        original: &OriginalValue,
        pseudonyms: &[String],
        sealed: &[Vec<u8>],
        created_at: SystemTime,
    ) -> Result<Vec<Pseudonym>, Error>;

    /// The pseudonyms of `original` in the multi-pseudonym `namespace`,
    /// oldest first (ties by pseudonym), at most `limit` of them; answered
    /// only once the synchronous standby has them.
    async fn pseudonyms_of(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        limit: u32,
    ) -> Result<Vec<Pseudonym>, Error>;

    /// [`crate::Store::list_pseudonyms`] for a multi-pseudonym namespace:
    /// newest first, ties by pseudonym (descending), which is unique here, so
    /// a page token's pseudonym is the position itself and no original is
    /// looked up or compared.
    async fn list_multi_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error>;
}

/// `rows` (as stored) in the order of `asked`, each once.
pub(crate) fn in_input_order(asked: &[String], rows: Vec<Pseudonym>) -> Vec<Pseudonym> {
    let mut by_value: std::collections::HashMap<String, Pseudonym> = rows
        .into_iter()
        .map(|p| (p.pseudonym_value.clone(), p))
        .collect();
    asked.iter().filter_map(|p| by_value.remove(p)).collect()
}
