//! The PostgreSQL store.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool::managed::{self, Object, PoolError};
use tokio_postgres::{error::SqlState, Row};
use vfps_core::{
    Error, GenerationMethod, Namespace, NamespaceName, NamespaceSettings, PageCursor, Pseudonym,
    PseudonymPage,
};

use crate::{migrate, page_from_rows, Candidate, PoolStatus, Store, Upserted};

pub mod npgsql;
mod pool;
pub mod tls;

pub use npgsql::{PgOptions, TargetSession};
use pool::{Manager, PgConnection, Pool};

/// Arbitrary but fixed: the advisory lock every `vfps migrate` takes.
const MIGRATION_LOCK_ID: i64 = 0x0076_6670_736d_6967; // "vfpsmig"

pub struct PgStore {
    pool: Pool,
    command_timeout: Duration,
    max_pool_size: usize,
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
            create: Some(
                options.connect_timeout * options.hosts.len() as u32 + Duration::from_secs(1),
            ),
            recycle: Some(Duration::from_secs(5)),
        };
        let manager = Manager::new(options)
            .map_err(|e| Error::internal(format!("ConnectionStrings__PostgreSQL: {e}")))?;
        let pool = Pool::builder(manager)
            .max_size(options.max_pool_size)
            .timeouts(timeouts)
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::internal(format!("cannot build connection pool: {e}")))?;
        Ok(Self {
            pool,
            command_timeout: options.command_timeout,
            max_pool_size: options.max_pool_size,
        })
    }

    async fn conn(&self) -> Result<Object<Manager>, Error> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => {
                // The source says why (TLS, authentication, refusal); connection
                // errors carry no stored values.
                let why = with_sources(&e);
                tracing::warn!(error = %why, "cannot connect to a writable database");
                Error::unavailable(format!("cannot connect to the database: {why}"))
            }
            PoolError::Timeout(_) => {
                Error::unavailable("timed out waiting for a database connection")
            }
            PoolError::Closed => Error::unavailable("the connection pool is closed"),
            other => Error::internal(format!("connection pool: {other}")),
        })
    }

    /// Runs one client-side-timed database step on a connection; a failure that
    /// leaves the connection suspect marks it broken.
    async fn timed<T>(
        &self,
        conn: &PgConnection,
        step: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Error> {
        let result = tokio::time::timeout(self.command_timeout, step).await;
        self.settle(conn, result)
    }

    /// Turns a timed database step's result into ours; a failure that leaves the
    /// connection suspect (transient error, or a timeout after which its protocol
    /// state is unknown) marks it broken.
    fn settle<T>(
        &self,
        conn: &PgConnection,
        result: Result<Result<T, tokio_postgres::Error>, tokio::time::error::Elapsed>,
    ) -> Result<T, Error> {
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let err = classify(&e);
                if err.is_transient() {
                    conn.mark_broken();
                }
                Err(err)
            }
            Err(_) => {
                conn.mark_broken();
                Err(Error::unavailable(format!(
                    "database did not answer within {:?}",
                    self.command_timeout
                )))
            }
        }
    }

    /// Prepares (or reuses) a statement on this connection, client-side timed.
    async fn prepare(
        &self,
        conn: &mut PgConnection,
        sql: &'static str,
    ) -> Result<tokio_postgres::Statement, Error> {
        let result = tokio::time::timeout(self.command_timeout, conn.prepared(sql)).await;
        self.settle(conn, result)
    }

    /// Versions this binary has that the database has not applied yet (without
    /// changing anything); a changed checksum is an error.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, Error> {
        let conn = self.conn().await?;
        let exists: bool = self
            .timed(
                &conn,
                conn.client.query_one(
                    "SELECT to_regclass('vfps_schema_migrations') IS NOT NULL",
                    &[],
                ),
            )
            .await?
            .try_get(0)
            .map_err(|e| classify(&e))?;
        let applied: std::collections::HashMap<i64, String> = if exists {
            self.timed(
                &conn,
                conn.client
                    .query("SELECT version, checksum FROM vfps_schema_migrations", &[]),
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
        } else {
            Default::default()
        };
        let mut pending = Vec::new();
        for m in migrate::POSTGRES {
            match applied.get(&m.version) {
                Some(sum) => migrate::verify_checksum(m, sum)?,
                None => pending.push(m.version),
            }
        }
        Ok(pending)
    }

    /// Applies pending migrations under an advisory lock (concurrent runs wait).
    pub async fn migrate(&self) -> Result<migrate::Report, Error> {
        let conn = self.conn().await?;
        let c = &conn.client;
        self.timed(
            &conn,
            c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_ID]),
        )
        .await?;
        let result = self.migrate_locked(&conn).await;
        let unlock = self
            .timed(
                &conn,
                c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_ID]),
            )
            .await;
        let report = result?;
        unlock?;
        Ok(report)
    }

    async fn migrate_locked(&self, conn: &PgConnection) -> Result<migrate::Report, Error> {
        let c = &conn.client;
        self.timed(
            conn,
            c.batch_execute(
                "CREATE TABLE IF NOT EXISTS vfps_schema_migrations (
                    version bigint PRIMARY KEY,
                    name text NOT NULL,
                    checksum text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now())",
            ),
        )
        .await?;
        let rows = self
            .timed(
                conn,
                c.query("SELECT version, checksum FROM vfps_schema_migrations", &[]),
            )
            .await?;
        let applied: std::collections::HashMap<i64, String> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let mut report = migrate::Report::default();
        for m in migrate::POSTGRES {
            if let Some(sum) = applied.get(&m.version) {
                migrate::verify_checksum(m, sum)?;
                report.already_applied.push(m.version);
                continue;
            }
            let sql = format!(
                "BEGIN;\n{}\nINSERT INTO vfps_schema_migrations (version, name, checksum) VALUES ({}, '{}', '{}');\nCOMMIT;",
                m.sql,
                m.version,
                m.name,
                m.checksum()
            );
            if let Err(e) = self.timed(conn, c.batch_execute(&sql)).await {
                // Leave the session clean if the failure happened mid-transaction.
                let _ = c.batch_execute("ROLLBACK").await;
                return Err(e);
            }
            tracing::info!(version = m.version, name = m.name, "applied migration");
            report.applied.push(m.version);
        }
        Ok(report)
    }
}

/// Transient database trouble is `Unavailable`; everything else is a bug.
pub fn classify(e: &tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let transient = code.code().starts_with("08") // connection exception
            || code.code().starts_with("53") // insufficient resources
            || code.code().starts_with("57P") // admin/crash shutdown, cannot connect now
            || [
                SqlState::READ_ONLY_SQL_TRANSACTION,
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
                SqlState::QUERY_CANCELED,
                SqlState::LOCK_NOT_AVAILABLE,
                // A namespace deleted under a concurrent insert: retrying answers NOT_FOUND.
                SqlState::FOREIGN_KEY_VIOLATION,
            ]
            .contains(code);
        return if transient {
            Error::unavailable(format!("database unavailable ({})", code.code()))
        } else {
            Error::internal(format!("database error {}: {}", code.code(), db.message()))
        };
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        Error::unavailable(format!("database connection lost: {e}"))
    } else {
        Error::internal(format!("database client error: {e}"))
    }
}

fn namespace_from_row(r: &Row) -> Result<Namespace, Error> {
    let bad = |what: &str| Error::internal(format!("stored namespace has an invalid {what}"));
    let method: i32 = r.try_get(2).map_err(|e| classify(&e))?;
    let length: i32 = r.try_get(3).map_err(|e| classify(&e))?;
    let settings = NamespaceSettings::parse(
        GenerationMethod::from_wire(method).ok_or_else(|| bad("generation method"))?,
        u32::try_from(length).map_err(|_| bad("length"))?,
        r.try_get(4).map_err(|e| classify(&e))?,
        r.try_get(5).map_err(|e| classify(&e))?,
    )?;
    Ok(Namespace {
        name: NamespaceName::parse(r.try_get(0).map_err(|e| classify(&e))?)?,
        description: r.try_get(1).map_err(|e| classify(&e))?,
        settings,
        created_at: r.try_get(6).map_err(|e| classify(&e))?,
        last_updated_at: r.try_get(7).map_err(|e| classify(&e))?,
    })
}

fn pseudonym_from_row(r: &Row) -> Result<Pseudonym, Error> {
    let get = |i: usize| -> Result<String, Error> { r.try_get(i).map_err(|e| classify(&e)) };
    Ok(Pseudonym {
        namespace: NamespaceName::parse(&get(0)?)?,
        original_value: get(1)?,
        pseudonym_value: get(2)?,
        created_at: r.try_get(3).map_err(|e| classify(&e))?,
        last_updated_at: r.try_get(4).map_err(|e| classify(&e))?,
    })
}

/// One statement, one commit: insert what is new. Rows of a missing namespace are
/// skipped by the EXISTS, a taken original or pseudonym by ON CONFLICT; the
/// inserted rows come back. Rows sorted by key, so concurrent batches lock index
/// entries in the same order.
const INSERT_SQL: &str = "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
    SELECT i.namespace, i.original_value, i.pseudonym_value, i.created_at, i.created_at
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
        AS i(namespace, original_value, pseudonym_value, created_at)
    WHERE EXISTS (SELECT 1 FROM namespaces n WHERE n.name = i.namespace)
    ORDER BY i.namespace, i.original_value
    ON CONFLICT DO NOTHING
    RETURNING namespace, original_value, pseudonym_value, created_at, last_updated_at";

/// The existing rows of originals that were not inserted (a fresh snapshot, so
/// rows committed concurrently are seen).
const EXISTING_SQL: &str =
    "SELECT p.namespace, p.original_value, p.pseudonym_value, p.created_at, p.last_updated_at
    FROM unnest($1::text[], $2::text[]) AS i(namespace, original_value)
    CROSS JOIN LATERAL (
        SELECT * FROM pseudonyms p
        WHERE p.namespace = i.namespace AND p.original_value = i.original_value) p";

const NAMESPACE_COLUMNS: &str =
    "name, description, pseudonym_generation_method, pseudonym_length, \
     pseudonym_prefix, pseudonym_suffix, created_at, last_updated_at";
const PSEUDONYM_COLUMNS: &str =
    "namespace, original_value, pseudonym_value, created_at, last_updated_at";

#[async_trait]
impl Store for PgStore {
    async fn create_namespace(&self, ns: &Namespace) -> Result<(), Error> {
        let conn = self.conn().await?;
        let s = &ns.settings;
        let n = self
            .timed(
                &conn,
                conn.client.execute(
                    &format!(
                        "INSERT INTO namespaces ({NAMESPACE_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) \
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
                    ],
                ),
            )
            .await?;
        if n == 0 {
            return Err(Error::already_exists(format!(
                "namespace {} already exists",
                ns.name
            )));
        }
        Ok(())
    }

    async fn get_namespace(&self, name: &NamespaceName) -> Result<Option<Namespace>, Error> {
        let conn = self.conn().await?;
        let row = self
            .timed(
                &conn,
                conn.client.query_opt(
                    &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces WHERE name = $1"),
                    &[&name.as_str()],
                ),
            )
            .await?;
        row.as_ref().map(namespace_from_row).transpose()
    }

    async fn list_namespaces(&self) -> Result<Vec<Namespace>, Error> {
        let conn = self.conn().await?;
        let rows = self
            .timed(
                &conn,
                conn.client.query(
                    &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces ORDER BY name"),
                    &[],
                ),
            )
            .await?;
        rows.iter().map(namespace_from_row).collect()
    }

    async fn delete_namespace(&self, name: &NamespaceName) -> Result<bool, Error> {
        let conn = self.conn().await?;
        // One transaction holding a lock that conflicts with every insert: it waits
        // for in-flight upserts and holds off new ones (which then find the
        // namespace gone), so no pseudonym outlives its namespace. Deleting a
        // namespace is rare; the hot insert path pays nothing for this.
        let result = async {
            self.timed(
                &conn,
                conn.client
                    .batch_execute("BEGIN; LOCK TABLE pseudonyms IN SHARE ROW EXCLUSIVE MODE"),
            )
            .await?;
            let n = self
                .timed(
                    &conn,
                    conn.client
                        .execute("DELETE FROM namespaces WHERE name = $1", &[&name.as_str()]),
                )
                .await?;
            self.timed(
                &conn,
                conn.client.execute(
                    "DELETE FROM pseudonyms WHERE namespace = $1",
                    &[&name.as_str()],
                ),
            )
            .await?;
            self.timed(&conn, conn.client.batch_execute("COMMIT"))
                .await?;
            Ok::<_, Error>(n > 0)
        }
        .await;
        if result.is_err() {
            // The transaction may still be open: never hand this connection out again.
            conn.mark_broken();
        }
        result
    }

    async fn upsert_pseudonyms(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error> {
        let namespaces: Vec<&str> = batch.iter().map(|c| c.namespace.as_str()).collect();
        let originals: Vec<&str> = batch.iter().map(|c| c.original.as_str()).collect();
        let pseudonyms: Vec<&str> = batch.iter().map(|c| c.pseudonym.as_str()).collect();
        let created: Vec<SystemTime> = batch.iter().map(|c| c.created_at).collect();
        let mut conn = self.conn().await?;
        let insert = self.prepare(&mut conn, INSERT_SQL).await?;
        let warnings_before = conn.warnings();
        let rows = self
            .timed(
                &conn,
                conn.client
                    .query(&insert, &[&namespaces, &originals, &pseudonyms, &created]),
            )
            .await?;
        if conn.warnings() != warnings_before {
            // E.g. "canceling wait for synchronous replication": the commit may
            // exist on one node only. Never acknowledge it.
            conn.mark_broken();
            return Err(Error::unavailable(
                "the database warned during commit; the write is not confirmed as replicated",
            ));
        }
        // Answers by input position; keys borrow from the batch.
        let position: std::collections::HashMap<(&str, &str), usize> = batch
            .iter()
            .enumerate()
            .map(|(i, c)| ((c.namespace.as_str(), c.original.as_str()), i))
            .collect();
        let mut answers: Vec<Upserted> = vec![Upserted::Conflict; batch.len()];
        let place = |rows: &[Row], answers: &mut Vec<Upserted>| -> Result<(), Error> {
            for r in rows {
                let p = pseudonym_from_row(r)?;
                if let Some(&i) = position.get(&(p.namespace.as_str(), p.original_value.as_str())) {
                    answers[i] = Upserted::Stored(p);
                }
            }
            Ok(())
        };
        place(&rows, &mut answers)?;
        let missing: Vec<&Candidate> = batch
            .iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Upserted::Conflict))
            .map(|(c, _)| c)
            .collect();
        if !missing.is_empty() {
            let ns: Vec<&str> = missing.iter().map(|c| c.namespace.as_str()).collect();
            let orig: Vec<&str> = missing.iter().map(|c| c.original.as_str()).collect();
            let existing = self.prepare(&mut conn, EXISTING_SQL).await?;
            let rows = self
                .timed(&conn, conn.client.query(&existing, &[&ns, &orig]))
                .await?;
            place(&rows, &mut answers)?;
        }
        Ok(answers)
    }

    async fn get_pseudonym(
        &self,
        namespace: &NamespaceName,
        pseudonym_value: &str,
    ) -> Result<Option<Pseudonym>, Error> {
        let mut conn = self.conn().await?;
        let statement = self
            .prepare(
                &mut conn,
                "SELECT namespace, original_value, pseudonym_value, created_at, last_updated_at
                 FROM pseudonyms WHERE namespace = $1 AND pseudonym_value = $2",
            )
            .await?;
        let row = self
            .timed(
                &conn,
                conn.client
                    .query_opt(&statement, &[&namespace.as_str(), &pseudonym_value]),
            )
            .await?;
        row.as_ref().map(pseudonym_from_row).transpose()
    }

    async fn list_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error> {
        let conn = self.conn().await?;
        let limit = i64::from(page_size) + 1;
        let rows = match after {
            None => {
                self.timed(
                    &conn,
                    conn.client.query(
                        &format!(
                            "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = $1
                             ORDER BY created_at DESC, original_value DESC LIMIT $2"
                        ),
                        &[&namespace.as_str(), &limit],
                    ),
                )
                .await?
            }
            Some(cursor) => {
                let created = vfps_core::from_micros(cursor.created_at_micros);
                self.timed(
                    &conn,
                    conn.client.query(
                        &format!(
                            "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = $1
                             AND (created_at, original_value) < ($2, (
                                 SELECT original_value FROM pseudonyms
                                 WHERE namespace = $1 AND pseudonym_value = $3))
                             ORDER BY created_at DESC, original_value DESC LIMIT $4"
                        ),
                        &[
                            &namespace.as_str(),
                            &created,
                            &cursor.pseudonym_value,
                            &limit,
                        ],
                    ),
                )
                .await?
            }
        };
        let items = rows
            .iter()
            .map(pseudonym_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let total = if include_total_size {
            let row = self
                .timed(
                    &conn,
                    conn.client.query_one(
                        "SELECT count(*) FROM pseudonyms WHERE namespace = $1",
                        &[&namespace.as_str()],
                    ),
                )
                .await?;
            Some(row.try_get::<_, i64>(0).map_err(|e| classify(&e))?)
        } else {
            None
        };
        Ok(page_from_rows(items, page_size, total))
    }

    async fn count_pseudonyms(&self) -> Result<Vec<(String, i64)>, Error> {
        let conn = self.conn().await?;
        let rows = self
            .timed(
                &conn,
                conn.client.query(
                    "SELECT n.name, (SELECT count(*) FROM pseudonyms p WHERE p.namespace = n.name)
                     FROM namespaces n ORDER BY n.name",
                    &[],
                ),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(|e| classify(&e))?,
                    r.try_get(1).map_err(|e| classify(&e))?,
                ))
            })
            .collect()
    }

    async fn check_writable(&self) -> Result<(), Error> {
        let conn = self.conn().await?;
        let row = self
            .timed(
                &conn,
                conn.client.query_one("SELECT pg_is_in_recovery()", &[]),
            )
            .await?;
        let in_recovery: bool = row.try_get(0).map_err(|e| classify(&e))?;
        if in_recovery {
            conn.mark_broken();
            return Err(Error::unavailable(
                "the connected database is a read-only standby",
            ));
        }
        Ok(())
    }

    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            in_use: s.size.saturating_sub(s.available),
            idle: s.available,
            max_size: s.max_size,
        }
    }

    fn write_parallelism(&self) -> usize {
        // A few overlapping batches keep the database busy while the coalescer
        // lets batches grow (see coalesce.rs); more only makes them smaller.
        (self.max_pool_size / 4).clamp(1, 4)
    }
}
