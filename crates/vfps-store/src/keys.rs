//! Namespaces' keys as the database keeps them: wrapped by the key source
//! (`vfps-keys`; the database never holds a key it can use), one row a
//! namespace incarnation and key version. Made lazily by the first replica
//! that needs them; a concurrent second writer's keys are not stored, and
//! it reads the first's.

use async_trait::async_trait;
use vfps_core::{Error, NamespaceUid};

/// One key version of a namespace incarnation, wrapped.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredKeys {
    pub uid: NamespaceUid,
    pub version: u32,
    /// The data key (AES-256-GCM), wrapped.
    pub data: Vec<u8>,
    /// The blind index key (HMAC-SHA-256), wrapped.
    pub index: Vec<u8>,
    /// The id of the key that wrapped them.
    pub wrapped_by: String,
}

impl std::fmt::Debug for StoredKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKeys")
            .field("uid", &self.uid)
            .field("version", &self.version)
            .field("wrapped_by", &self.wrapped_by)
            .finish_non_exhaustive()
    }
}

/// Namespaces' wrapped keys, in both stores.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Every key version of the incarnation `uid`, newest first.
    async fn namespace_keys(&self, uid: NamespaceUid) -> Result<Vec<StoredKeys>, Error>;
    /// Stores `keys` unless their version exists: whether these were
    /// stored (`false`: another writer's are there; read those). Durable
    /// like a write.
    async fn put_namespace_keys(&self, keys: &StoredKeys) -> Result<bool, Error>;
    /// Replaces the wrapped form of `keys`' version with `keys` where it is
    /// still wrapped by `old_wrapped_by`: whether it was replaced. Durable
    /// like a write.
    async fn rewrap_namespace_keys(
        &self,
        keys: &StoredKeys,
        old_wrapped_by: &str,
    ) -> Result<bool, Error>;
}

/// Which table a sealed row lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedTable {
    /// `pseudonyms`: one pseudonym an original.
    Pseudonyms,
    /// `multi_pseudonyms`: many pseudonyms an original.
    Multi,
}

impl SealedTable {
    pub const ALL: [SealedTable; 2] = [SealedTable::Pseudonyms, SealedTable::Multi];

    /// The table's name in both stores.
    pub fn name(self) -> &'static str {
        match self {
            SealedTable::Pseudonyms => "pseudonyms",
            SealedTable::Multi => "multi_pseudonyms",
        }
    }
}

/// A row whose original is sealed, as found for re-sealing: its pseudonym
/// (what the seal is bound to) and its sealed original.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedRow {
    pub pseudonym: String,
    /// The original's blind index, as stored.
    pub value: String,
    pub sealed: Vec<u8>,
}

impl std::fmt::Debug for SealedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedRow").finish_non_exhaustive()
    }
}

/// Which sealed rows [`SealedStore::sealed_rows`] pages through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every sealed row.
    All,
    /// Those sealed under a key version other than this one (a re-seal).
    NotSealedUnder(u32),
    /// Those whose blind index is under a key version other than this one
    /// (a re-index).
    NotIndexedUnder(u32),
}

impl Which {
    /// What a blind index under `version` starts with.
    pub fn index_mark(version: u32) -> String {
        format!("~k{version}.")
    }
}

/// A row's sealed original replaced by `new` where it still is `old`.
#[derive(Clone)]
pub struct Resealed {
    pub pseudonym: String,
    pub old: Vec<u8>,
    pub new: Vec<u8>,
}

/// The key version a sealed original was written under, as stored (bytes
/// 2–5, little-endian): what [`SealedStore`] pages and counts by.
pub fn version_bytes(version: u32) -> [u8; 4] {
    version.to_le_bytes()
}

/// A row whose original is stored as it is, as found for sealing: its
/// pseudonym and original (an anonymized entry's too; the caller skips it).
#[derive(Clone, PartialEq, Eq)]
pub struct PlainRow {
    pub pseudonym: String,
    pub original: String,
}

impl std::fmt::Debug for PlainRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainRow").finish_non_exhaustive()
    }
}

/// A row's stored original moved from one form to the other (plain to
/// sealed: its blind index and ciphertext; sealed to plain: the original),
/// where it still is `old_value` and `old_sealed`.
#[derive(Clone)]
pub struct Rekeyed {
    pub pseudonym: String,
    pub old_value: String,
    pub old_sealed: Option<Vec<u8>>,
    pub new_value: String,
    pub new_sealed: Option<Vec<u8>>,
}

/// The key version of [`version_bytes`] read back.
pub fn version_of(bytes: &[u8]) -> Result<u32, Error> {
    <[u8; 4]>::try_from(bytes)
        .map(u32::from_le_bytes)
        .map_err(|_| Error::internal("a sealed original too short to name its key version"))
}

/// Sealed originals found and replaced under a newer key version, in both
/// stores: the re-seal after a rotation. A replacement is a compare-and-set
/// on the old ciphertext, so two replicas re-sealing at once, an erasure
/// or a namespace delete in between, lose nothing and write nothing twice.
#[async_trait]
pub trait SealedStore: Send + Sync {
    /// Up to `limit` sealed rows of `namespace` in `table` that `which`
    /// takes, by pseudonym after `after`.
    async fn sealed_rows(
        &self,
        namespace: &vfps_core::NamespaceName,
        table: SealedTable,
        which: Which,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SealedRow>, Error>;
    /// Writes each row's `new` where its sealed original is still `old`:
    /// how many were replaced. Durable like a write.
    async fn reseal(
        &self,
        namespace: &vfps_core::NamespaceName,
        table: SealedTable,
        rows: &[Resealed],
    ) -> Result<u64, Error>;
    /// Up to `limit` rows of `namespace` in `table` whose original is
    /// stored as it is, by pseudonym after `after`.
    async fn plain_rows(
        &self,
        namespace: &vfps_core::NamespaceName,
        table: SealedTable,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PlainRow>, Error>;
    /// Moves each row's stored original to its new form where it is still
    /// as read (and, in `pseudonyms`, where no row holds the new form yet):
    /// how many were moved. Durable like a write.
    async fn rekey(
        &self,
        namespace: &vfps_core::NamespaceName,
        table: SealedTable,
        rows: &[Rekeyed],
    ) -> Result<u64, Error>;
    /// Starts moving the rows of the incarnation `uid` of `namespace` to
    /// the form `sealed` says: from now on no row of the other form is
    /// inserted (a replica that still writes it is refused and reads the
    /// namespace anew), and lookups by original try both forms until
    /// [`SealedStore::moved`]. Waits for every insert under way. Whether
    /// it started (`false`: no such incarnation, or its rows already are
    /// all of that form).
    async fn move_originals(
        &self,
        namespace: &vfps_core::NamespaceName,
        uid: vfps_core::NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error>;
    /// Starts moving the sealed rows of the incarnation `uid` of `namespace`
    /// to blind indexes under key version `version` (a re-index), as
    /// [`SealedStore::move_originals`] does: from now on only rows indexed
    /// under it are inserted, and lookups try the old index too. Whether it
    /// started (`false`: no such sealed incarnation, a move under way, or
    /// its indexes are under that version or a newer one already).
    async fn reindex_originals(
        &self,
        namespace: &vfps_core::NamespaceName,
        uid: vfps_core::NamespaceUid,
        version: u32,
    ) -> Result<bool, Error>;
    /// Ends a move to `sealed` once no row of the other form is left.
    async fn moved(
        &self,
        namespace: &vfps_core::NamespaceName,
        uid: vfps_core::NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error>;
    /// How many sealed originals of `namespace` (both tables) each key
    /// version holds, by version.
    async fn sealed_versions(
        &self,
        namespace: &vfps_core::NamespaceName,
    ) -> Result<Vec<(u32, u64)>, Error>;
}
