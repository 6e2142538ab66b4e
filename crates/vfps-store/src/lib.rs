//! Persistence for vfps: one [`Store`] trait, two implementations.
//!
//! # Layout
//! - [`postgres`]: production store — a pool that only ever hands out connections
//!   to a writable primary, multi-host failover, error classification.
//! - [`sqlite`]: the embedded default — one WAL file, one writer, parallel readers.
//! - [`migrate`]: versioned, checksummed migrations for both.
//! - [`coalesce`]: turns concurrent Creates into multi-row upserts, Gets into
//!   multi-row lookups.
//! - [`health`]: whether this process reaches its database, from its own attempts.
//! - [`coherence`]: when cached namespaces and pseudonyms may be served.
//! - [`jobs`]: CSV jobs as rows, claimed under a fenced lease.
//! - [`erasure`]: one original's entry deleted or anonymized, and found.
//! - [`multi`]: multi-pseudonym namespaces, whose originals have many
//!   pseudonyms (a table of their own).
//! - [`sessions`]: ended admin UI sessions (sign-out on every replica).
//! - [`keys`]: namespaces' keys, wrapped by the key source.
//!
//! Every method returns [`vfps_core::Error`]: transient database trouble is
//! `Unavailable` (the caller retries within its deadline), a value the database
//! cannot take `InvalidArgument`, anything else `Internal`.
//!
//! Every method is cancel-safe: its future may be dropped at any await, and what
//! it held (a pooled connection inside a transaction, a statement in flight) is
//! discarded, never handed to another call.

use std::time::SystemTime;

use async_trait::async_trait;
use vfps_core::{
    access::{TokenHash, TokenRecord},
    Error, Namespace, NamespaceName, NamespaceUid, OriginalSystem, OriginalValue, PageCursor,
    Pseudonym, PseudonymPage, PseudonymValue,
};

pub mod coalesce;
pub mod coherence;
mod columns;
pub mod erasure;
pub mod health;
pub mod jobs;
pub mod keys;
pub mod migrate;
pub mod multi;
pub mod postgres;
pub mod sessions;
pub mod sqlite;
pub mod throttle;
mod tokens;
pub mod trace;

/// A pseudonym to store unless its original already has one.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub namespace: NamespaceName,
    /// The incarnation of the namespace the pseudonym was generated for: if the
    /// namespace was deleted (and created again) since, nothing is inserted.
    pub namespace_uid: NamespaceUid,
    pub original: OriginalValue,
    /// Freshly generated; used only if the original has no pseudonym yet.
    pub pseudonym: String,
    pub created_at: SystemTime,
    /// In a sealed namespace: `original` is the original's blind index and
    /// this the original sealed for the row of `pseudonym` (`vfps-keys`).
    pub sealed: Option<Vec<u8>>,
    /// Whether the caller knows the namespace's rows are being moved to the
    /// form `sealed` is in (and looked up the other form first); nothing is
    /// inserted when the namespace says otherwise.
    pub moving: bool,
}

/// A reverse lookup: the pseudonym's row, if there is one.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub namespace: NamespaceName,
    pub pseudonym_value: PseudonymValue,
}

/// What happened to one [`Candidate`] of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upserted {
    /// The pseudonym of the original: the existing one, or the candidate's, now committed.
    Stored(Pseudonym),
    /// Neither inserted nor found: the candidate pseudonym collided with another
    /// original's, or the namespace is gone or is another incarnation now. The
    /// caller reloads the namespace, then regenerates or reports.
    Conflict,
}

/// How many pseudonyms a namespace incarnation got in a time window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedCount {
    pub namespace: String,
    pub uid: NamespaceUid,
    pub count: i64,
}

/// Connection-pool occupancy, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    pub in_use: usize,
    pub idle: usize,
    pub max_size: usize,
    /// Callers waiting for a connection.
    pub waiting: usize,
}

/// Writing pseudonyms in batches: all the [`coalesce::Coalescer`] needs.
#[async_trait]
pub trait Upsert: Send + Sync + 'static {
    /// Inserts each candidate unless its original already has a pseudonym, in one
    /// atomic statement or transaction; answers in input order. Either the whole
    /// batch is committed (and, on PostgreSQL, on the synchronous standby too, as
    /// is every existing row it answers with) or an error is returned.
    async fn upsert_pseudonyms(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error>;

    /// Cheaper than [`Upsert::upsert_pseudonyms`] for a batch whose originals
    /// are most likely new and distinct (a CSV job's next rows): `true` when
    /// every candidate is stored now, as given, in one atomic statement (on
    /// PostgreSQL committed on the synchronous standby too). `false` when it
    /// could not be: an original or a pseudonym taken, an original twice, a
    /// namespace gone or another incarnation, or a store without this path.
    /// Some of the candidates may be stored then; the caller upserts the batch,
    /// which answers those as existing.
    async fn insert_new_pseudonyms(&self, batch: &[Candidate]) -> Result<bool, Error> {
        let _ = batch;
        Ok(false)
    }
}

/// The persistence contract both stores fulfil (one test suite runs against both).
#[async_trait]
pub trait Store:
    Upsert
    + jobs::JobStore
    + sessions::SessionEnds
    + erasure::Erase
    + multi::Multi
    + keys::KeyStore
    + keys::SealedStore
{
    /// Fails with `AlreadyExists` when the name is taken. Like every answer about
    /// a namespace, only given once the synchronous standby has it too.
    async fn create_namespace(&self, namespace: &Namespace) -> Result<(), Error>;
    async fn get_namespace(&self, name: &NamespaceName) -> Result<Option<Namespace>, Error>;
    async fn list_namespaces(&self) -> Result<Vec<Namespace>, Error>;
    /// Declares `system` the identifier system of the namespace's originals
    /// if it has none yet (only its incarnation `uid`); the namespace as it
    /// is after, whichever declaration won (`None`: gone, or another
    /// incarnation). A declaration is never changed. Durable like a write.
    async fn adopt_original_system(
        &self,
        name: &NamespaceName,
        uid: NamespaceUid,
        system: &OriginalSystem,
    ) -> Result<Option<Namespace>, Error>;
    /// Deletes the namespace (only its incarnation `uid`, when given) and all
    /// its pseudonyms; `false` if it does not exist (or is another
    /// incarnation), an answer as durable as a delete. Creates into other
    /// namespaces go on meanwhile; a concurrent Create into this one either
    /// lands before (and is deleted with it) or finds it gone.
    async fn delete_namespace(
        &self,
        name: &NamespaceName,
        uid: Option<NamespaceUid>,
    ) -> Result<bool, Error>;

    async fn get_pseudonym(
        &self,
        namespace: &NamespaceName,
        pseudonym_value: &PseudonymValue,
    ) -> Result<Option<Pseudonym>, Error>;
    /// The rows of many pseudonyms, answered in input order (`None` where there
    /// is none); one statement where the store batches reads.
    async fn get_pseudonyms(&self, lookups: &[Lookup]) -> Result<Vec<Option<Pseudonym>>, Error> {
        let mut rows = Vec::with_capacity(lookups.len());
        for l in lookups {
            rows.push(self.get_pseudonym(&l.namespace, &l.pseudonym_value).await?);
        }
        Ok(rows)
    }
    /// In descending order of the pseudonym (nothing of the originals or of
    /// creation order; see [`PageCursor`]); `after` continues from the last
    /// item of the previous page. A single-pseudonym namespace's entries; a
    /// multi-pseudonym one's are listed by
    /// [`multi::Multi::list_multi_pseudonyms`].
    async fn list_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error>;
    /// Pseudonyms per namespace, for the metrics endpoint.
    async fn count_pseudonyms(&self) -> Result<Vec<(String, i64)>, Error> {
        Ok(self
            .count_created(None, None, None)
            .await?
            .into_iter()
            .map(|c| (c.namespace, c.count))
            .collect())
    }
    /// Pseudonyms created after `after` (all when `None`) up to `until` (no
    /// bound when `None`), per namespace incarnation: every namespace (or only
    /// `namespace`), with zero where none. Uses the `(namespace, created_at)`
    /// index, so a bounded window costs the rows in it, not the table.
    async fn count_created(
        &self,
        namespace: Option<&NamespaceName>,
        after: Option<SystemTime>,
        until: Option<SystemTime>,
    ) -> Result<Vec<CreatedCount>, Error>;

    /// Stores a new access token; `AlreadyExists` if its id or hash is taken.
    async fn insert_token(&self, token: &TokenRecord) -> Result<(), Error>;
    /// Every access token, revoked ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error>;
    /// Marks a token revoked at `at`; `false` if there is no such token. A
    /// token revoked before keeps its first revocation time.
    async fn revoke_token(&self, id: &str, at: SystemTime) -> Result<bool, Error>;
    /// The token whose plaintext has this hash, usable or not.
    async fn find_token(&self, hash: &TokenHash) -> Result<Option<TokenRecord>, Error>;

    /// Succeeds only if a writable database answers now.
    async fn check_writable(&self) -> Result<(), Error>;
    /// Whether this process reached its database lately (no database call).
    fn database_health(&self) -> health::DatabaseHealth;
    /// Why the database cannot serve this binary (migrations not applied,
    /// its files removed under it), as last checked; `None` when it can (no
    /// database call).
    fn schema_problem(&self) -> Option<String> {
        None
    }
    /// When cached namespaces and pseudonyms may be served.
    fn coherence(&self) -> &coherence::Coherence;
    fn pool_status(&self) -> PoolStatus;
    /// Commits refused because the database warned while committing (a
    /// cancelled wait for the synchronous standby), since start.
    fn refused_commits(&self) -> u64 {
        0
    }
    /// How many upsert batches may usefully run at once.
    fn write_parallelism(&self) -> usize;
    /// Whether concurrent Gets are worth batching: a lookup is a round trip to
    /// another process (`false`: an in-process read is cheaper than a queue).
    fn batches_reads(&self) -> bool {
        false
    }
}

/// Builds the next page cursor from a page fetched with one extra row.
pub(crate) fn page_from_rows(
    mut rows: Vec<Pseudonym>,
    page_size: u32,
    total_size: Option<i64>,
) -> PseudonymPage {
    let more = rows.len() > page_size as usize;
    rows.truncate(page_size as usize);
    let next = if more {
        rows.last().map(|p| PageCursor {
            pseudonym_value: p.pseudonym_value.clone(),
        })
    } else {
        None
    };
    PseudonymPage {
        items: rows,
        next,
        total_size,
    }
}

/// A HEX namespace for the store's unit tests, created at `now`.
#[cfg(test)]
pub(crate) fn test_namespace(
    name: &str,
    uid: i64,
    length: u32,
    now: std::time::SystemTime,
) -> vfps_core::Namespace {
    vfps_core::Namespace {
        name: vfps_core::NamespaceName::parse(name).unwrap(),
        uid: vfps_core::NamespaceUid(uid),
        description: String::new(),
        settings: vfps_core::NamespaceSettings::parse(
            vfps_core::GenerationMethod::from_wire(5).unwrap(),
            length,
            None,
            None,
        )
        .unwrap(),
        created_at: now,
        last_updated_at: now,
    }
}
