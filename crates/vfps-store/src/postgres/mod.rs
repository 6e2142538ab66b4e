//! The PostgreSQL store.
//!
//! # Layout
//! - `pool`: connections as leases that are cancel-safe by construction;
//!   `hosts`: what it knows of each server.
//! - `monitor`: the per-process connection that watches reachability and
//!   namespace deletions.
//! - `sqlstate`: what each SQLSTATE class means for the caller.
//! - `rows`: rows decoded, driver errors classified; `upsert`: batched
//!   Creates; `migrations`: pending and applied migrations.
//! - [`npgsql`], [`tls`]: the connection string and its TLS modes.
//!
//! # Durability
//! Nothing is acknowledged before the synchronous standby has it. A commit that
//! came back with a WARNING (a cancelled wait for the standby) is refused. An
//! answer read rather than written — an existing row returned by an idempotent
//! re-Create, an "already exists", a "not found" for a delete — may reflect such a
//! single-copy commit, so it is read in a transaction that writes a small WAL
//! record of its own (a transactional `pg_logical_emit_message`, prefix `vfps`,
//! which changes no table): PostgreSQL makes a commit wait for the standby only
//! when its transaction wrote WAL, and this one then waits until the standby has
//! everything up to it, the row read included. (A transaction id alone, from
//! `pg_current_xact_id()`, writes no WAL and makes the commit wait for nothing.)

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use deadpool::managed::{self, PoolError};
use vfps_core::{
    access::{TokenHash, TokenRecord},
    is_anonymized, Error, Namespace, NamespaceName, NamespaceUid, OriginalSystem, PageCursor,
    Pseudonym, PseudonymPage, PseudonymValue,
};

use crate::{
    coherence::Coherence,
    columns::{NAMESPACE_COLUMNS, PSEUDONYM_COLUMNS},
    health::{DatabaseHealth, Reachability},
    page_from_rows,
    tokens::{encode_grants, TOKEN_COLUMNS},
    CreatedCount, Lookup, PoolStatus, Store,
};

mod adopt;
mod erasure;
mod hosts;
mod jobs;
mod keys;
mod migrations;
mod monitor;
mod multi;
pub mod npgsql;
mod pool;
mod restore;
mod rows;
mod sessions;
pub mod sqlstate;
pub mod statements;
pub mod tls;
mod upsert;

use migrations::{applied_migrations, pending_migrations};
pub use monitor::{CACHE_LEASE, CHANNEL as NAMESPACE_DELETED_CHANNEL};
pub use npgsql::{PgOptions, TargetSession};
use pool::{Lease, Manager, Pool, Steps};
pub use restore::{Finding, RestoreHold};
pub use rows::classify;
pub(crate) use rows::page_args;
use rows::{namespace_from_row, pseudonym_from_row, token_from_row, DURABLE};
use statements::Prepared;
use upsert::CandidateColumns;

/// One warning per interval while connections fail, or writes meet a
/// read-only server (each says how many it held back).
static CONNECT_WARNINGS: crate::throttle::Throttle =
    crate::throttle::Throttle::new(Duration::from_secs(5));
static READ_ONLY_WARNINGS: crate::throttle::Throttle =
    crate::throttle::Throttle::new(Duration::from_secs(5));

pub struct PgStore {
    pool: Pool,
    options: PgOptions,
    /// Fed by every statement and by the monitor; read by readiness.
    reachability: Arc<Reachability>,
    /// Renewed by the monitor; read before serving from a cache.
    coherence: Arc<Coherence>,
    /// The monitor runs while this exists.
    alive: Arc<()>,
    /// Shared by the pool's manager and the monitor (see `pool::Distrust`).
    distrust: Arc<pool::Distrust>,
    /// Commits refused for a WARNING (see `pool::Steps`), since start.
    refused_commits: Arc<std::sync::atomic::AtomicU64>,
    /// What is wrong with the schema, as the monitor last found it.
    schema: Arc<monitor::SchemaState>,
    /// Off but in the harness's self-test of P8.
    unsafe_erasure: crate::erasure::UnsafeErasure,
}

/// Every `Connection Pruning Interval`, closes the pool's connections idle for
/// longer than `Connection Idle Lifetime`, keeping `Minimum Pool Size`
/// connections; a burst's connections do not stay open on the database for
/// ever. Ends (at its next turn) once the store is dropped.
async fn prune_idle(pool: Pool, options: PgOptions, alive: std::sync::Weak<()>) {
    let mut ticks = tokio::time::interval(options.pruning_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if alive.strong_count() == 0 {
            return;
        }
        let mut closable = pool.status().size.saturating_sub(options.min_pool_size);
        let pruned = pool.retain(|_, metrics| {
            if closable > 0 && metrics.last_used() >= options.idle_lifetime {
                closable -= 1;
                false
            } else {
                true
            }
        });
        if !pruned.removed.is_empty() {
            tracing::debug!(
                closed = pruned.removed.len(),
                kept = pruned.retained,
                "closed idle database connections"
            );
        }
    }
}

/// An error and its chain of causes, `outer: inner: …`.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl PgStore {
    /// Creates the pool; connects lazily, so start-up does not need the database.
    pub fn new(options: &PgOptions) -> Result<Self, Error> {
        let timeouts = managed::Timeouts {
            wait: Some(options.command_timeout),
            create: Some(Self::connect_budget(options)),
            recycle: Some(Duration::from_secs(5)),
        };
        // The connection returned last is taken first: a few warm connections
        // (and warm backends, their caches and plans) serve the load, and the
        // rest of a burst's go idle and are pruned. Oldest first (deadpool's
        // default) wakes every backend in turn and keeps them all open.
        let distrust = Arc::new(pool::Distrust::default());
        let pool = Pool::builder(Self::manager(options)?.distrusting(distrust.clone()))
            .max_size(options.max_pool_size)
            .queue_mode(managed::QueueMode::Lifo)
            .timeouts(timeouts)
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::internal(format!("cannot build connection pool: {e}")))?;
        Ok(Self {
            pool,
            options: options.clone(),
            reachability: Arc::default(),
            coherence: Arc::new(Coherence::leased(CACHE_LEASE)),
            alive: Arc::new(()),
            distrust,
            refused_commits: Arc::default(),
            schema: Arc::default(),
            unsafe_erasure: Default::default(),
        })
    }

    /// Erasures made unsafe on purpose (the harness's self-test of P8 only).
    pub fn with_unsafe_erasure(mut self, modes: crate::erasure::UnsafeErasure) -> Self {
        self.unsafe_erasure = modes;
        self
    }

    fn manager(options: &PgOptions) -> Result<Manager, Error> {
        Manager::new(options)
            .map_err(|e| Error::internal(format!("ConnectionStrings__PostgreSQL: {e}")))
    }

    /// One connection attempt over every listed host.
    fn connect_budget(options: &PgOptions) -> Duration {
        options.connect_timeout * options.hosts.len() as u32 + Duration::from_secs(1)
    }

    /// Starts the monitor connection (reachability without the pool, namespace
    /// deletions, the cache lease) and the pruning of idle connections (Npgsql's
    /// `Connection Idle Lifetime`); both end when this store is dropped. Without
    /// it, caches are never trusted and health comes from requests alone.
    pub fn spawn_monitor(&self) -> Result<(), Error> {
        let monitor = monitor::Monitor {
            manager: Self::manager(&self.options)?,
            distrust: self.distrust.clone(),
            connect_budget: Self::connect_budget(&self.options),
            reachability: self.reachability.clone(),
            coherence: self.coherence.clone(),
            schema: self.schema.clone(),
            alive: Arc::downgrade(&self.alive),
        };
        tokio::spawn(monitor.run());
        tokio::spawn(prune_idle(
            self.pool.clone(),
            self.options.clone(),
            Arc::downgrade(&self.alive),
        ));
        Ok(())
    }

    /// Checks a connection out for one operation, with its statement runner.
    async fn lease(&self) -> Result<(Lease, Steps), Error> {
        match self.pool.get().await {
            Ok(object) => {
                let lease = pool::lease(object, self.distrust.clone());
                let steps = Steps::new(
                    &lease,
                    self.options.command_timeout,
                    self.reachability.clone(),
                    self.refused_commits.clone(),
                );
                Ok((lease, steps))
            }
            Err(e) => {
                let err = match e {
                    PoolError::Backend(e) => {
                        // The source says why (TLS, authentication, refusal);
                        // connection errors carry no stored values.
                        let why = with_sources(&e);
                        if let Some(held) = CONNECT_WARNINGS.pass() {
                            tracing::warn!(
                                error = %why,
                                held_back = held,
                                "cannot connect to a writable database"
                            );
                        }
                        Error::unavailable(format!("cannot connect to the database: {why}"))
                    }
                    PoolError::Timeout(_) => {
                        Error::unavailable("timed out waiting for a database connection")
                            .because(vfps_core::TransientCause::Timeout)
                    }
                    PoolError::Closed => Error::unavailable("the connection pool is closed"),
                    other => Error::internal(format!("connection pool: {other}")),
                };
                if err.is_transient() {
                    self.reachability.failed(&err.message);
                }
                Err(err)
            }
        }
    }
}

#[async_trait]
impl Store for PgStore {
    async fn create_namespace(&self, ns: &Namespace) -> Result<(), Error> {
        let s = &ns.settings;
        let version = |v: u32| {
            i32::try_from(v).map_err(|_| Error::invalid_argument("a key version beyond 2^31"))
        };
        let index_version = version(s.index_version)?;
        let moving_from_index = s.moving_from_index.map(version).transpose()?;
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // "Already exists" is an answer about a row too: durable as well.
        steps.run(tx.execute(DURABLE, &[])).await?;
        let n = steps
            .run(tx.execute(
                &format!(
                    "INSERT INTO namespaces ({NAMESPACE_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16) \
                     ON CONFLICT (name) DO NOTHING"
                ),
                &[
                    &ns.name.as_str(),
                    &ns.description,
                    &s.method.to_wire(),
                    &(s.length as i32),
                    &s.prefix,
                    &s.suffix,
                    &ns.created_at,
                    &ns.last_updated_at,
                    &ns.uid.0,
                    &s.deletable,
                    &s.multi,
                    &s.original_system,
                    &s.sealed,
                    &s.moving,
                    &index_version,
                    &moving_from_index,
                ],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        if n == 0 {
            return Err(Error::already_exists(format!(
                "namespace {} already exists",
                ns.name
            )));
        }
        Ok(())
    }

    async fn get_namespace(&self, name: &NamespaceName) -> Result<Option<Namespace>, Error> {
        let (mut lease, steps) = self.lease().await?;
        let statement = steps
            .run(lease.conn_mut().prepared(Prepared::GetNamespace))
            .await?;
        let row = steps
            .run(lease.client().query_opt(&statement, &[&name.as_str()]))
            .await?;
        lease.finish();
        row.as_ref().map(namespace_from_row).transpose()
    }

    async fn adopt_original_system(
        &self,
        name: &NamespaceName,
        uid: NamespaceUid,
        system: &OriginalSystem,
    ) -> Result<Option<Namespace>, Error> {
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // The answer is durable whether this call declared it or another did.
        steps.run(tx.execute(DURABLE, &[])).await?;
        steps
            .run(tx.execute(
                "UPDATE namespaces SET original_system = $3 \
                 WHERE name = $1 AND uid = $2 AND original_system IS NULL",
                &[&name.as_str(), &uid.0, &system.as_str()],
            ))
            .await?;
        let row = steps
            .run(tx.query_opt(
                &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces WHERE name = $1 AND uid = $2"),
                &[&name.as_str(), &uid.0],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        row.as_ref().map(namespace_from_row).transpose()
    }

    async fn list_namespaces(&self) -> Result<Vec<Namespace>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces ORDER BY name"),
                &[],
            ))
            .await?;
        lease.finish();
        rows.iter().map(namespace_from_row).collect()
    }

    async fn delete_namespace(
        &self,
        name: &NamespaceName,
        uid: Option<NamespaceUid>,
    ) -> Result<bool, Error> {
        let uid = uid.map(|u| u.0);
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // "Not found" must not rest on a single-copy delete either.
        steps.run(tx.execute(DURABLE, &[])).await?;
        // Locks the namespace's row: waits for inserts into it that hold their
        // key-share lock, and holds off new ones until the commit (they then find
        // it gone). Other namespaces' inserts lock other rows and go on.
        let n = steps
            .run(tx.execute(
                "DELETE FROM namespaces WHERE name = $1 AND ($2::int8 IS NULL OR uid = $2)",
                &[&name.as_str(), &uid],
            ))
            .await?;
        if n > 0 {
            steps
                .run(tx.execute(
                    "DELETE FROM pseudonyms WHERE namespace = $1",
                    &[&name.as_str()],
                ))
                .await?;
            steps
                .run(tx.execute(
                    "DELETE FROM multi_pseudonyms WHERE namespace = $1",
                    &[&name.as_str()],
                ))
                .await?;
            // Delivered at commit to every replica's monitor: caches forget it.
            steps
                .run(tx.execute(
                    "SELECT pg_notify($1, $2)",
                    &[&monitor::CHANNEL, &name.as_str()],
                ))
                .await?;
        }
        steps.run(tx.commit()).await?;
        lease.finish();
        if n > 0 {
            self.coherence.deleted(name.as_str());
        }
        Ok(n > 0)
    }

    async fn get_pseudonym(
        &self,
        namespace: &NamespaceName,
        pseudonym_value: &PseudonymValue,
    ) -> Result<Option<Pseudonym>, Error> {
        let (mut lease, steps) = self.lease().await?;
        let statement = steps
            .run(lease.conn_mut().prepared(Prepared::GetPseudonym))
            .await?;
        let row = steps
            .run(lease.client().query_opt(
                &statement,
                &[&namespace.as_str(), &pseudonym_value.as_str()],
            ))
            .await?;
        lease.finish();
        // An anonymized entry resolves to no one.
        Ok(row
            .as_ref()
            .map(pseudonym_from_row)
            .transpose()?
            .filter(|p| !is_anonymized(&p.original_value)))
    }

    async fn get_pseudonyms(&self, lookups: &[Lookup]) -> Result<Vec<Option<Pseudonym>>, Error> {
        let namespaces: Vec<&str> = lookups.iter().map(|l| l.namespace.as_str()).collect();
        let values: Vec<&str> = lookups.iter().map(|l| l.pseudonym_value.as_str()).collect();
        let (mut lease, steps) = self.lease().await?;
        let statement = steps
            .run(lease.conn_mut().prepared(Prepared::GetPseudonyms))
            .await?;
        let rows = steps
            .run(lease.client().query(&statement, &[&namespaces, &values]))
            .await?;
        lease.finish();
        // Answers in input order (a pseudonym asked for twice, twice).
        let rows: Vec<Pseudonym> = rows
            .iter()
            .map(pseudonym_from_row)
            .filter(|p| {
                p.as_ref()
                    .map_or(true, |p| !is_anonymized(&p.original_value))
            })
            .collect::<Result<_, _>>()?;
        let found: std::collections::HashMap<(&str, &str), &Pseudonym> = rows
            .iter()
            .map(|p| ((p.namespace.as_str(), p.pseudonym_value.as_str()), p))
            .collect();
        let answers = lookups
            .iter()
            .map(|l| {
                found
                    .get(&(l.namespace.as_str(), l.pseudonym_value.as_str()))
                    .map(|p| (*p).clone())
            })
            .collect();
        Ok(answers)
    }

    async fn list_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error> {
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        let limit = i64::from(page_size) + 1;
        // The unique (namespace, pseudonym_value) index orders and bounds it.
        let ns = namespace.as_str();
        let (bound, args) = page_args(&ns, &limit, after);
        let rows = steps
            .run(c.query(
                &format!(
                    "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = $1 {bound}
                     ORDER BY pseudonym_value DESC LIMIT $2"
                ),
                &args,
            ))
            .await?;
        let items = rows
            .iter()
            .map(pseudonym_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let total = if include_total_size {
            let row = steps
                .run(c.query_one(
                    "SELECT count(*) FROM pseudonyms WHERE namespace = $1",
                    &[&namespace.as_str()],
                ))
                .await?;
            Some(row.try_get::<_, i64>(0).map_err(|e| classify(&e))?)
        } else {
            None
        };
        lease.finish();
        Ok(page_from_rows(items, page_size, total))
    }

    async fn count_created(
        &self,
        namespace: Option<&NamespaceName>,
        after: Option<SystemTime>,
        until: Option<SystemTime>,
    ) -> Result<Vec<CreatedCount>, Error> {
        let (lease, steps) = self.lease().await?;
        // Bounds as timestamps (never NULL), so each namespace's count is a
        // range of the (namespace, created_at) index.
        let rows = steps
            .run(lease.client().query(
                "SELECT n.name, n.uid, (SELECT count(*) FROM pseudonyms p
                     WHERE p.namespace = n.name
                     AND p.created_at > coalesce($2, '-infinity'::timestamptz)
                     AND p.created_at <= coalesce($3, 'infinity'::timestamptz))
                   + (SELECT count(*) FROM multi_pseudonyms p
                     WHERE p.namespace = n.name
                     AND p.created_at > coalesce($2, '-infinity'::timestamptz)
                     AND p.created_at <= coalesce($3, 'infinity'::timestamptz))
                 FROM namespaces n WHERE $1::text IS NULL OR n.name = $1 ORDER BY n.name",
                &[&namespace.map(NamespaceName::as_str), &after, &until],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                let get_err = |e: tokio_postgres::Error| classify(&e);
                Ok(CreatedCount {
                    namespace: r.try_get(0).map_err(get_err)?,
                    uid: NamespaceUid(r.try_get(1).map_err(get_err)?),
                    count: r.try_get(2).map_err(get_err)?,
                })
            })
            .collect()
    }

    async fn insert_token(&self, t: &TokenRecord) -> Result<(), Error> {
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        steps.run(tx.execute(DURABLE, &[])).await?;
        let n = steps
            .run(tx.execute(
                &format!(
                    "INSERT INTO access_tokens ({TOKEN_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) \
                     ON CONFLICT DO NOTHING"
                ),
                &[
                    &t.id,
                    &t.kind.name(),
                    &t.name,
                    &t.hash.0.as_slice(),
                    &t.admin,
                    &encode_grants(&t.grants),
                    &t.created_at,
                    &t.expires_at,
                    &t.revoked_at,
                ],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        if n == 0 {
            return Err(Error::already_exists(
                "an access token with this id or secret exists",
            ));
        }
        Ok(())
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                &format!("SELECT {TOKEN_COLUMNS} FROM access_tokens ORDER BY created_at, id"),
                &[],
            ))
            .await?;
        lease.finish();
        rows.iter().map(token_from_row).collect()
    }

    async fn revoke_token(&self, id: &str, at: SystemTime) -> Result<bool, Error> {
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // "Revoked" and "no such token" both rest on the synchronous standby.
        steps.run(tx.execute(DURABLE, &[])).await?;
        let n = steps
            .run(tx.execute(
                "UPDATE access_tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1",
                &[&id, &at],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        Ok(n > 0)
    }

    async fn find_token(&self, hash: &TokenHash) -> Result<Option<TokenRecord>, Error> {
        let (mut lease, steps) = self.lease().await?;
        let statement = steps
            .run(lease.conn_mut().prepared(Prepared::FindToken))
            .await?;
        let row = steps
            .run(lease.client().query_opt(&statement, &[&hash.0.as_slice()]))
            .await?;
        lease.finish();
        row.as_ref().map(token_from_row).transpose()
    }

    async fn check_writable(&self) -> Result<(), Error> {
        let (lease, steps) = self.lease().await?;
        let row = steps
            .run(lease.client().query_one("SELECT pg_is_in_recovery()", &[]))
            .await?;
        let in_recovery: bool = row.try_get(0).map_err(|e| classify(&e))?;
        if in_recovery {
            // Not finished: the lease closes a connection to a standby.
            return Err(Error::unavailable(
                "the connected database is a read-only standby",
            ));
        }
        lease.finish();
        Ok(())
    }

    fn database_health(&self) -> DatabaseHealth {
        self.reachability.snapshot()
    }

    fn schema_problem(&self) -> Option<String> {
        self.schema.problem()
    }

    fn coherence(&self) -> &Coherence {
        &self.coherence
    }

    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            in_use: s.size.saturating_sub(s.available),
            idle: s.available,
            max_size: s.max_size,
            waiting: s.waiting,
        }
    }

    fn refused_commits(&self) -> u64 {
        self.refused_commits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn write_parallelism(&self) -> usize {
        // A few overlapping batches keep the database busy while the coalescer
        // lets batches grow (see coalesce.rs); more only makes them smaller.
        (self.options.max_pool_size / 4).clamp(1, 4)
    }

    fn batches_reads(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{Candidate, Upsert, Upserted};

    /// Runs `sql` (the re-read's parameters) on a fresh lease, giving up after 2 s.
    async fn read_within_2s(store: &PgStore, sql: &str) -> Option<usize> {
        let read = async {
            let (lease, steps) = store.lease().await?;
            let rows = steps
                .run(lease.client().query(sql, &[&vec!["n"], &vec!["o"]]))
                .await?;
            lease.finish();
            Ok::<_, Error>(rows.len())
        };
        tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .ok()
            .map(Result::unwrap)
    }

    /// A primary with a synchronous standby, a database on it, a migrated store.
    async fn migrated_on_replicated_pair() -> (
        vfps_testkit::PgCluster,
        vfps_testkit::PgCluster,
        vfps_testkit::TestDatabase,
        PgStore,
    ) {
        let (primary, standby) = vfps_testkit::PgCluster::start_replicated_pair().unwrap();
        let db = primary.create_database().unwrap();
        let store = migrated_store(&db).await;
        (primary, standby, db, store)
    }

    /// A store on `db` with the schema migrated.
    async fn migrated_store(db: &vfps_testkit::TestDatabase) -> PgStore {
        let options = npgsql::parse(&db.connection_string, None, None)
            .unwrap()
            .options;
        let store = PgStore::new(&options).unwrap();
        store.migrate().await.unwrap();
        store
    }

    /// The generic plan (what a statement runs on after five executions) of
    /// every lookup of pseudonyms by key, on a table of 2,000 analyzed rows:
    /// an index probe per key, never a scan of the whole table.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cached_plans_of_key_lookups_probe_the_indexes() {
        let cluster = vfps_testkit::shared();
        let db = cluster.create_database().unwrap();
        let _store = migrated_store(&db).await;
        cluster
            .psql(
                &db.name,
                "INSERT INTO namespaces (name, pseudonym_generation_method, pseudonym_length, \
                     created_at, last_updated_at) VALUES ('n', 0, 8, now(), now()); \
                 INSERT INTO pseudonyms SELECT 'n', 'o' || g, 'p' || g, now(), now() \
                     FROM generate_series(1, 2000) g; \
                 INSERT INTO namespaces (name, pseudonym_generation_method, pseudonym_length, \
                     created_at, last_updated_at, multi_pseudonym) \
                     VALUES ('m', 0, 8, now(), now(), true); \
                 INSERT INTO multi_pseudonyms SELECT 'm', 'q' || g, 'o' || (g / 10), now(), now() \
                     FROM generate_series(1, 2000) g; \
                 ANALYZE pseudonyms; ANALYZE multi_pseudonyms",
            )
            .unwrap();
        for (statement, arguments) in [
            (Prepared::GetPseudonym, "'n', 'p1'"),
            (Prepared::GetPseudonyms, "'{n}', '{p1}'"),
            (Prepared::Existing, "'{n}', '{o1}'"),
        ] {
            let plan = cluster
                .psql(
                    &db.name,
                    &format!(
                        "SET plan_cache_mode = force_generic_plan; \
                         PREPARE s AS {}; EXPLAIN EXECUTE s({arguments})",
                        statement.sql()
                    ),
                )
                .unwrap();
            assert!(
                plan.contains("Index")
                    && !plan.contains("Seq Scan on pseudonyms")
                    && !plan.contains("Seq Scan on multi_pseudonyms"),
                "{statement:?} scans the table:\n{plan}"
            );
        }
    }

    /// A reverse lookup that finds its row in `pseudonyms` (a single-pseudonym
    /// namespace's) never probes `multi_pseudonyms`: the `LIMIT 1` over the
    /// `UNION ALL` stops at the first branch's row, so single-pseudonym Gets
    /// cost what they did before multi-pseudonym namespaces.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reverse_lookup_hit_never_probes_the_multi_pseudonym_table() {
        let cluster = vfps_testkit::shared();
        let db = cluster.create_database().unwrap();
        let _store = migrated_store(&db).await;
        cluster
            .psql(
                &db.name,
                "INSERT INTO pseudonyms VALUES ('n', 'o1', 'p1', now(), now()); \
                 INSERT INTO multi_pseudonyms VALUES ('m', 'q1', 'o1', now(), now())",
            )
            .unwrap();
        for (statement, arguments) in [
            (Prepared::GetPseudonym, "'n', 'p1'"),
            (Prepared::GetPseudonyms, "'{n,n}', '{p1,p1}'"),
        ] {
            let plan = cluster
                .psql(
                    &db.name,
                    &format!(
                        "PREPARE s AS {}; EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE s({arguments})",
                        statement.sql()
                    ),
                )
                .unwrap();
            let multi = plan
                .lines()
                .find(|l| l.contains("on multi_pseudonyms"))
                .unwrap_or_else(|| panic!("{statement:?} has no multi_pseudonyms branch:\n{plan}"));
            assert!(
                multi.contains("never executed"),
                "{statement:?} probed multi_pseudonyms on a hit:\n{plan}"
            );
        }
        // And a multi-pseudonym namespace's row is found in the second branch.
        let found = cluster
            .psql(
                &db.name,
                &format!(
                    "PREPARE s AS {}; EXECUTE s('m', 'q1')",
                    Prepared::GetPseudonym.sql()
                ),
            )
            .unwrap();
        assert!(found.contains("o1"), "{found}");
    }

    /// Connections idle for longer than `Connection Idle Lifetime` are closed,
    /// down to `Minimum Pool Size`; a connection in use is never touched.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_connections_are_closed_down_to_the_minimum() {
        let (_db, store) = pruned_store(1, Duration::from_millis(300));
        // Four connections at once, then idle; one more stays in use.
        for lease in leases(&store, 4).await {
            lease.finish();
        }
        let (held, _) = store.lease().await.unwrap();
        assert_eq!(store.pool_status().idle, 3);
        store.spawn_monitor().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.pool_status().idle > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "idle connections were never closed: {:?}",
                store.pool_status()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = store.pool_status();
        assert_eq!(
            (status.in_use, status.idle),
            (1, 0),
            "the one in use is kept"
        );
        held.finish();
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            store.pool_status().idle,
            1,
            "Minimum Pool Size keeps one idle connection"
        );
    }

    /// A lease takes the connection returned last: under a trickle of calls one
    /// warm connection serves them all, and the rest of an earlier burst's go
    /// idle and are pruned. (Taken in turns, oldest first, a trickle of one call
    /// per pruning interval kept every connection of the burst open for ever.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trickle_of_calls_uses_one_connection_and_a_bursts_others_are_pruned() {
        let (_db, store) = pruned_store(0, Duration::from_millis(600));
        for lease in leases(&store, 4).await {
            lease.finish();
        }
        store.spawn_monitor().unwrap();
        let mut backends = std::collections::BTreeSet::new();
        let until = std::time::Instant::now() + Duration::from_millis(2500);
        while std::time::Instant::now() < until {
            let (lease, steps) = store.lease().await.unwrap();
            let row = steps
                .run(lease.client().query_one("SELECT pg_backend_pid()", &[]))
                .await
                .unwrap();
            backends.insert(row.get::<_, i32>(0));
            lease.finish();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            backends.len(),
            1,
            "one connection serves a trickle: {backends:?}"
        );
        let status = store.pool_status();
        assert_eq!(
            status.in_use + status.idle,
            1,
            "the burst's other connections are pruned: {status:?}"
        );
    }

    /// A store on a fresh database whose idle connections beyond `min` are
    /// closed after `idle_lifetime`, checked every 100 ms.
    fn pruned_store(min: usize, idle_lifetime: Duration) -> (vfps_testkit::TestDatabase, PgStore) {
        let db = vfps_testkit::shared().create_database().unwrap();
        let mut options = npgsql::parse(&db.connection_string, None, None)
            .unwrap()
            .options;
        options.min_pool_size = min;
        options.idle_lifetime = idle_lifetime;
        options.pruning_interval = Duration::from_millis(100);
        let store = PgStore::new(&options).unwrap();
        (db, store)
    }

    /// `n` connections checked out at once, each used for a round trip.
    async fn leases(store: &PgStore, n: usize) -> Vec<Lease> {
        let mut leases = Vec::new();
        for _ in 0..n {
            let (lease, steps) = store.lease().await.unwrap();
            steps
                .run(lease.client().simple_query("SELECT 1"))
                .await
                .unwrap();
            leases.push(lease);
        }
        leases
    }

    /// A migration whose recorded checksum differs from this binary's is a
    /// schema problem the monitor reports (the replica is not ready), like a
    /// missing one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_monitor_reports_a_changed_migration_checksum() {
        let cluster = vfps_testkit::shared();
        let db = cluster.create_database().unwrap();
        let store = migrated_store(&db).await;
        cluster
            .psql(
                &db.name,
                "UPDATE vfps_schema_migrations SET checksum = 'x' WHERE version = 1",
            )
            .unwrap();
        store.spawn_monitor().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let problem = loop {
            if let Some(p) = store.schema_problem() {
                break p;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the monitor never reported the changed checksum"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            problem.contains("does not match this binary") && problem.contains("checksum"),
            "{problem}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_re_read_of_an_existing_row_waits_for_the_synchronous_standby() {
        let (primary, standby, db, store) = migrated_on_replicated_pair().await;
        primary
            .psql(
                &db.name,
                "INSERT INTO pseudonyms VALUES ('n', 'o', 'p', now(), now())",
            )
            .unwrap();
        standby.stop_server().unwrap();
        // The same read without its WAL record answers at once: the standby's
        // absence is invisible to a plain read, which is what the record is for.
        let plain = statements::EXISTING
            .replace("pg_logical_emit_message(true, 'vfps', 'durable read')", "1");
        assert_eq!(read_within_2s(&store, &plain).await, Some(1));
        assert_eq!(
            read_within_2s(&store, statements::EXISTING).await,
            None,
            "the durable re-read answered while the standby was down"
        );
        standby.start_server().unwrap();
        assert_eq!(read_within_2s(&store, statements::EXISTING).await, Some(1));
    }

    /// A server that accepts no writes (a standby named alone in the
    /// connection string, a read-only database) is named as such, with what
    /// to check, not only by its SQLSTATE.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_only_server_is_named_in_the_error() {
        let cluster = vfps_testkit::shared();
        let db = cluster.create_database().unwrap();
        let store = migrated_store(&db).await;
        let now = vfps_core::now_micros();
        let ns = namespace_n(now);
        cluster
            .psql(
                "postgres",
                &format!(
                    "ALTER DATABASE {} SET default_transaction_read_only = on",
                    db.name
                ),
            )
            .unwrap();
        // A new store: new sessions take the database's setting.
        let store2 = migrated_store_without_migrating(&db);
        drop(store);
        let e = store2.create_namespace(&ns).await.unwrap_err();
        assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e:?}");
        assert!(
            e.message.contains("read-only transaction")
                && e.message.contains("Target Session Attributes"),
            "{e:?}"
        );
        // Readiness sees it too, and reads that succeed meanwhile do not hide it.
        store2.spawn_monitor().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            store2.get_namespace(&ns.name).await.unwrap();
            if let DatabaseHealth::Unreachable { why, .. } = store2.database_health() {
                assert!(why.contains("accepts no writes"), "{why}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a read-only server was reported usable: {:?}",
                store2.database_health()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Namespace `n` (uid 7, HEX of 32), created at `now`.
    fn namespace_n(now: std::time::SystemTime) -> Namespace {
        crate::test_namespace("n", 7, 32, now)
    }

    fn migrated_store_without_migrating(db: &vfps_testkit::TestDatabase) -> PgStore {
        let options = npgsql::parse(&db.connection_string, None, None)
            .unwrap()
            .options;
        PgStore::new(&options).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upsert_answering_an_existing_row_waits_for_the_synchronous_standby() {
        let (primary, standby, db, store) = migrated_on_replicated_pair().await;
        let now = vfps_core::now_micros();
        let ns = namespace_n(now);
        store.create_namespace(&ns).await.unwrap();
        primary
            .psql(
                &db.name,
                "INSERT INTO pseudonyms VALUES ('n', 'o', 'p', now(), now())",
            )
            .unwrap();
        let candidate = Candidate {
            namespace: ns.name.clone(),
            namespace_uid: ns.uid,
            original: vfps_core::OriginalValue::parse("o").unwrap(),
            pseudonym: "fresh".into(),
            created_at: now,
            sealed: None,
            moving: false,
        };
        standby.stop_server().unwrap();
        let upsert = tokio::time::timeout(
            Duration::from_secs(2),
            store.upsert_pseudonyms(std::slice::from_ref(&candidate)),
        )
        .await;
        assert!(
            upsert.is_err(),
            "an existing row was answered while the standby was down: {upsert:?}"
        );
        standby.start_server().unwrap();
        let answer = store
            .upsert_pseudonyms(std::slice::from_ref(&candidate))
            .await
            .unwrap();
        assert!(
            matches!(&answer[..], [Upserted::Stored(p)] if p.pseudonym_value == "p"),
            "{answer:?}"
        );
    }

    fn candidate(ns: &Namespace, original: &str, pseudonym: &str) -> Candidate {
        Candidate {
            namespace: ns.name.clone(),
            namespace_uid: ns.uid,
            original: vfps_core::OriginalValue::parse(original).unwrap(),
            pseudonym: pseudonym.into(),
            created_at: vfps_core::now_micros(),
            sealed: None,
            moving: false,
        }
    }

    /// The pseudonym of `original` in `ns`, if stored.
    async fn stored(store: &PgStore, ns: &Namespace, original: &str) -> Option<String> {
        match &store
            .upsert_pseudonyms(&[candidate(ns, original, "probe-unused")])
            .await
            .unwrap()[..]
        {
            [Upserted::Stored(p)] => Some(p.pseudonym_value.clone()),
            _ => None,
        }
    }

    /// The insert of new rows stores a batch of new originals as given, and
    /// refuses a batch with a taken original, a taken pseudonym or an
    /// original twice whole (nothing of it stored); a row of another
    /// namespace incarnation is skipped and the batch reported not stored.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn new_rows_are_inserted_whole_or_the_caller_is_told_to_upsert() {
        let db = vfps_testkit::shared().create_database().unwrap();
        let store = migrated_store(&db).await;
        let ns = namespace_n(vfps_core::now_micros());
        store.create_namespace(&ns).await.unwrap();
        let fresh = [candidate(&ns, "a", "pa"), candidate(&ns, "b", "pb")];
        assert!(store.insert_new_pseudonyms(&fresh).await.unwrap());
        assert_eq!(stored(&store, &ns, "a").await.as_deref(), Some("pa"));
        assert_eq!(stored(&store, &ns, "b").await.as_deref(), Some("pb"));

        for (what, batch) in [
            (
                "a taken original",
                [candidate(&ns, "c", "pc"), candidate(&ns, "a", "px")],
            ),
            (
                "a taken pseudonym",
                [candidate(&ns, "c", "pc"), candidate(&ns, "d", "pa")],
            ),
            (
                "an original twice",
                [candidate(&ns, "c", "pc"), candidate(&ns, "c", "py")],
            ),
        ] {
            assert!(
                !store.insert_new_pseudonyms(&batch).await.unwrap(),
                "{what} reported stored"
            );
            assert_eq!(
                stored(&store, &ns, "a").await.as_deref(),
                Some("pa"),
                "{what}"
            );
            let c = store
                .upsert_pseudonyms(&[candidate(&ns, "c", "probe-c")])
                .await
                .unwrap();
            assert!(
                matches!(&c[..], [Upserted::Stored(p)] if p.pseudonym_value == "probe-c"),
                "{what}: nothing of the refused batch was stored, so c is new now: {c:?}"
            );
            store
                .delete_namespace(&ns.name, Some(ns.uid))
                .await
                .unwrap();
            store.create_namespace(&ns).await.unwrap();
            assert!(store.insert_new_pseudonyms(&fresh).await.unwrap());
        }

        let mut other = candidate(&ns, "e", "pe");
        other.namespace_uid = vfps_core::NamespaceUid(ns.uid.0 + 1);
        let batch = [candidate(&ns, "d", "pd"), other];
        assert!(!store.insert_new_pseudonyms(&batch).await.unwrap());
        let answers = store.upsert_pseudonyms(&batch).await.unwrap();
        assert!(
            matches!(&answers[..], [Upserted::Stored(p), Upserted::Conflict] if p.pseudonym_value == "pd"),
            "the row of the live incarnation stored, the other skipped: {answers:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_insert_of_new_rows_dropped_mid_statement_discards_its_connection() {
        let db = vfps_testkit::shared().create_database().unwrap();
        let store = migrated_store(&db).await;
        let ns = namespace_n(vfps_core::now_micros());
        store.create_namespace(&ns).await.unwrap();
        let batch = [candidate(&ns, "a", "pa")];
        dropped_while_its_statement_waits(&db, &store, "pseudonyms", || {
            store.insert_new_pseudonyms(&batch)
        })
        .await;
        assert!(
            store.insert_new_pseudonyms(&batch).await.unwrap()
                || stored(&store, &ns, "a").await.as_deref() == Some("pa"),
            "the dropped insert committed whole or not at all"
        );
    }

    /// Holds `table` locked from another session for 2 s, calls `call` and
    /// drops it after 300 ms, while its statement waits for the lock: the
    /// connection (statement still in flight) must not go back to the pool.
    /// Answers once the lock is released.
    async fn dropped_while_its_statement_waits<F, Fut, T>(
        db: &vfps_testkit::TestDatabase,
        store: &PgStore,
        table: &str,
        call: F,
    ) where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let cluster = vfps_testkit::shared();
        assert_eq!(store.pool_status().idle, 1, "one warm connection");
        let marker = format!("holds_{table}");
        let blocker = {
            let name = db.name.clone();
            let sql = format!(
                "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; \
                 SELECT pg_sleep(2) AS {marker}; COMMIT;"
            );
            std::thread::spawn(move || vfps_testkit::shared().psql(&name, &sql))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let active = cluster
                .psql(
                    "postgres",
                    &format!(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
                         AND query LIKE '%{marker}%' AND state = 'active'",
                        db.name
                    ),
                )
                .unwrap();
            if active.trim() != "0" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the blocker never ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let dropped = tokio::time::timeout(Duration::from_millis(300), call()).await;
        assert!(dropped.is_err(), "the call did not wait for the lock");
        let s = store.pool_status();
        assert_eq!(
            (s.idle, s.in_use),
            (0, 0),
            "the dropped call's connection went back to the pool"
        );
        blocker.join().unwrap().unwrap();
    }

    /// Every await can be the last: a count dropped while its statement waits
    /// for a lock never returns its connection (statement still in flight) to
    /// the pool; the next operation gets a fresh connection and works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_count_dropped_mid_statement_discards_its_connection() {
        let db = vfps_testkit::shared().create_database().unwrap();
        let store = migrated_store(&db).await;
        dropped_while_its_statement_waits(&db, &store, "namespaces", || {
            store.count_created(None, None, None)
        })
        .await;
        assert_eq!(store.count_created(None, None, None).await.unwrap(), vec![]);
    }

    /// The switch of a move between plain and sealed originals, dropped
    /// while it waits for the namespace row: its connection is discarded
    /// and the namespace is as it was (nothing half-switched).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_move_switch_dropped_while_it_waits_changes_nothing() {
        use crate::keys::SealedStore;
        let db = vfps_testkit::shared().create_database().unwrap();
        let store = migrated_store(&db).await;
        let ns = namespace_n(vfps_core::now_micros());
        store.create_namespace(&ns).await.unwrap();
        dropped_while_its_statement_waits(&db, &store, "namespaces", || {
            store.move_originals(&ns.name, ns.uid, true)
        })
        .await;
        let now = store
            .get_namespace(&ns.name)
            .await
            .unwrap()
            .unwrap()
            .settings;
        assert!(!now.sealed && !now.moving, "{now:?}");
        assert!(store.move_originals(&ns.name, ns.uid, true).await.unwrap());
    }

    /// The same for a batch of Gets (the coalescer's lookup statement).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lookup_batch_dropped_mid_statement_discards_its_connection() {
        let db = vfps_testkit::shared().create_database().unwrap();
        let store = migrated_store(&db).await;
        let lookups = [Lookup {
            namespace: NamespaceName::parse("n").unwrap(),
            pseudonym_value: PseudonymValue::parse("p").unwrap(),
        }];
        dropped_while_its_statement_waits(&db, &store, "pseudonyms", || {
            store.get_pseudonyms(&lookups)
        })
        .await;
        assert_eq!(store.get_pseudonyms(&lookups).await.unwrap(), vec![None]);
    }
}
