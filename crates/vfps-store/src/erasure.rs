//! Erasing one original's entry (the MII interface's `$delete-pseudonym` and
//! `$anonymize-original`), and finding an original's pseudonym without
//! making one (`$get-pseudonym`).
//!
//! - Delete removes the entry: a later Create of the original makes a new
//!   pseudonym, and the old one may in time be generated again.
//! - Anonymize unlinks it for good: the entry's original becomes
//!   `vfps_core::anonymized_original` (longer than any original, so no
//!   original equals it), so the pseudonym stays reserved by the table's
//!   uniqueness and is never issued again, and no lookup answers it.
//!
//! A FHIR transaction Bundle's new pseudonyms are stored together
//! ([`Erase::insert_together`]): every one, or none.
//!
//! An erasure is a write like a namespace delete: committed through the
//! synchronous standby and announced (the namespace's name on the deletion
//! channel), so that every replica's caches of the namespace go stale; the
//! caller waits the coherence's settle delay before acknowledging.

use async_trait::async_trait;
use vfps_core::{Error, NamespaceName, OriginalValue, Pseudonym};

use crate::Candidate;

/// How an entry is erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Erasure {
    /// The entry goes.
    Delete,
    /// The link goes; the pseudonym stays, reserved and resolving to no one.
    Anonymize,
}

/// Ways to erase unsafely, for the harness's self-test only: each must make
/// it fail P8 (erased stays erased). Both off in every deployment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnsafeErasure {
    /// `VFPS_UNSAFE_ERASURE_UNANNOUNCED`: the erasure is not announced, so
    /// other replicas' pseudonym caches keep answering the erased mapping.
    pub unannounced: bool,
    /// `VFPS_UNSAFE_ERASURE_BEFORE_STANDBY`: the erasure commits without
    /// waiting for the synchronous standby, so a failover can undo an
    /// acknowledged erasure.
    pub before_standby: bool,
}

/// What an anonymized entry's original becomes: unique (128 random bits).
pub(crate) fn tombstone() -> String {
    vfps_core::anonymized_original(&format!("{:032x}", rand::random::<u128>()))
}

#[async_trait]
pub trait Erase: Send + Sync {
    /// The pseudonym of `original` in `namespace`, if it has one; a found row
    /// is answered only once the synchronous standby has it.
    async fn find_pseudonym(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
    ) -> Result<Option<Pseudonym>, Error>;

    /// Stores every candidate, as given, or none: `false` (nothing stored)
    /// when any original or pseudonym is taken, an original is there twice,
    /// or a namespace is gone or another incarnation. Committed through the
    /// synchronous standby.
    async fn insert_together(&self, batch: &[Candidate]) -> Result<bool, Error>;

    /// Erases `original`'s entry in `namespace`; answers the pseudonym it
    /// had, or `None` if it had none (nothing changed). Durable and announced
    /// before it returns.
    async fn erase(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        how: Erasure,
    ) -> Result<Option<String>, Error>;
}
