//! The embedded SQLite store: one file in WAL mode with `synchronous=FULL`, one
//! writer connection (SQLite allows one writer at a time anyway) and a few reader
//! connections used in parallel. All calls run on the blocking thread pool.
//!
//! Cancel-safe by construction: a call's closure runs to completion on its
//! blocking thread even if the caller's future is dropped, and a transaction that
//! does not reach its commit rolls back when it is dropped (rusqlite). The file is
//! this process's alone, so its caches are always coherent (`Coherence::local`):
//! a serving process holds its [`ServingLock`] (`files`); rows are decoded in
//! `rows`.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use vfps_core::{
    access::{TokenHash, TokenRecord},
    is_anonymized, to_micros, Error, Namespace, NamespaceName, NamespaceUid, OriginalSystem,
    PageCursor, Pseudonym, PseudonymPage, PseudonymValue,
};

use crate::{
    coherence::Coherence,
    columns::{NAMESPACE_COLUMNS, PSEUDONYM_COLUMNS},
    health::{DatabaseHealth, Reachability},
    migrate, page_from_rows,
    tokens::{encode_grants, TOKEN_COLUMNS},
    Candidate, CreatedCount, PoolStatus, Store, Upsert, Upserted,
};

mod erasure;
mod files;
mod jobs;
mod keys;
mod multi;
mod rows;
mod sessions;

pub use files::ServingLock;
use files::{open, sql_err, FileGuard};
pub(crate) use rows::page_args;
use rows::{namespace_from_row, pseudonym_from_row, token_from_row};

const READERS: usize = 4;

pub struct SqliteStore {
    path: PathBuf,
    writer: Arc<Mutex<Connection>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    /// Round-robin position over `readers`.
    next_reader: AtomicUsize,
    /// Calls currently holding a connection, for the pool metric.
    in_use: Arc<AtomicUsize>,
    /// Whether the file could be used lately (I/O errors, a full disk).
    reachability: Reachability,
    /// Records this process's deletes for its caches.
    coherence: Coherence,
    /// The files as opened, to notice them removed or replaced.
    files: FileGuard,
}

impl SqliteStore {
    /// Opens (creating if needed) the file and applies migrations.
    pub fn open(path: &Path) -> Result<Self, Error> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::unavailable(format!("cannot create directory {}: {e}", dir.display()))
            })?;
        }
        let writer = open(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // SQLite opens a file it may not write read-only, silently.
        if writer.is_readonly(rusqlite::MAIN_DB).map_err(sql_err)? {
            return Err(Error::unavailable(format!(
                "{} can only be read by this process (file or directory permissions, or a \
                 read-only file system): vfps writes it",
                path.display()
            )));
        }
        let mode: String = writer
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::internal(format!(
                "sqlite refused WAL mode (got {mode})"
            )));
        }
        Self::migrate_with(&writer)?;
        let readers = (0..READERS)
            .map(|_| {
                open(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map(Mutex::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            path: path.to_owned(),
            writer: Arc::new(Mutex::new(writer)),
            readers: Arc::new(readers),
            next_reader: AtomicUsize::new(0),
            in_use: Arc::new(AtomicUsize::new(0)),
            reachability: {
                let r = Reachability::default();
                r.reached();
                r
            },
            coherence: Coherence::local(),
            files: FileGuard::new(path),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate_with(c: &Connection) -> Result<migrate::Report, Error> {
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS vfps_schema_migrations (
                version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
                applied_at INTEGER NOT NULL)",
        )
        .map_err(sql_err)?;
        let mut report = migrate::Report::default();
        for m in migrate::SQLITE {
            let recorded: Option<String> = c
                .query_row(
                    "SELECT checksum FROM vfps_schema_migrations WHERE version = ?1",
                    [m.version],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?;
            if let Some(sum) = recorded {
                migrate::verify_checksum(m, &sum)?;
                report.already_applied.push(m.version);
                continue;
            }
            let sql = format!(
                "BEGIN IMMEDIATE;\n{}\nINSERT INTO vfps_schema_migrations VALUES ({}, '{}', '{}', {});\nCOMMIT;",
                m.sql,
                m.version,
                m.name,
                m.checksum(),
                to_micros(std::time::SystemTime::now())
            );
            if let Err(e) = c.execute_batch(&sql) {
                let _ = c.execute_batch("ROLLBACK");
                return Err(sql_err(e));
            }
            report.applied.push(m.version);
        }
        Ok(report)
    }

    async fn with_writer<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if let Some(why) = self.files.check() {
            return Err(Error::unavailable(why.to_owned()));
        }
        let writer = self.writer.clone();
        let in_use = self.in_use.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut c = writer
                .lock()
                .map_err(|_| Error::internal("writer lock poisoned"))?;
            in_use.fetch_add(1, Ordering::Relaxed);
            let r = f(&mut c);
            in_use.fetch_sub(1, Ordering::Relaxed);
            r
        })
        .await
        .map_err(|e| Error::internal(format!("sqlite task failed: {e}")))?;
        self.observe(result)
    }

    /// Reports the outcome of a call to reachability, and a failing file
    /// (full, failing I/O) to the log, at most once per 5 s.
    fn observe<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        static WARNINGS: crate::throttle::Throttle =
            crate::throttle::Throttle::new(Duration::from_secs(5));
        match &result {
            Err(e) if e.is_transient() => {
                self.reachability.failed(&e.message);
                if let Some(held) = WARNINGS.pass() {
                    tracing::warn!(held_back = held, error = %e.message, "the SQLite database failed a call");
                }
            }
            _ => self.reachability.reached(),
        }
        result
    }

    async fn with_reader<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let readers = self.readers.clone();
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % READERS;
        let in_use = self.in_use.clone();
        let result = tokio::task::spawn_blocking(move || {
            let c = readers[i]
                .lock()
                .map_err(|_| Error::internal("reader lock poisoned"))?;
            in_use.fetch_add(1, Ordering::Relaxed);
            let r = f(&c);
            in_use.fetch_sub(1, Ordering::Relaxed);
            r
        })
        .await
        .map_err(|e| Error::internal(format!("sqlite task failed: {e}")))?;
        self.observe(result)
    }
}

#[async_trait]
impl Upsert for SqliteStore {
    async fn upsert_pseudonyms(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error> {
        let batch = batch.to_vec();
        self.with_writer(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let mut out = Vec::with_capacity(batch.len());
            {
                let mut insert = tx
                    .prepare_cached(&format!(
                        "INSERT INTO pseudonyms ({PSEUDONYM_COLUMNS})
                         SELECT ?1, ?2, ?3, ?4, ?4, ?6 WHERE EXISTS (SELECT 1 FROM namespaces
                             WHERE name = ?1 AND uid = ?5 AND multi_pseudonym = 0
                               AND originals_sealed = (?6 IS NOT NULL) AND originals_moving = ?7
                               AND (originals_sealed = 0 OR substr(?2, 1, length(originals_index_version) + 3)
                                   = '~k' || originals_index_version || '.'))
                         ON CONFLICT DO NOTHING"
                    ))
                    .map_err(sql_err)?;
                let mut select = tx
                    .prepare_cached(&format!(
                        "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = ?1 AND original_value = ?2"
                    ))
                    .map_err(sql_err)?;
                for cand in &batch {
                    insert
                        .execute(params![
                            cand.namespace.as_str(),
                            cand.original.as_str(),
                            cand.pseudonym,
                            to_micros(cand.created_at),
                            cand.namespace_uid.0,
                            cand.sealed,
                            cand.moving
                        ])
                        .map_err(sql_err)?;
                    let row = select
                        .query_row(
                            params![cand.namespace.as_str(), cand.original.as_str()],
                            pseudonym_from_row,
                        )
                        .optional()
                        .map_err(sql_err)?
                        .transpose()?;
                    out.push(row.map_or(Upserted::Conflict, Upserted::Stored));
                }
            }
            tx.commit().map_err(sql_err)?;
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_namespace(&self, ns: &Namespace) -> Result<(), Error> {
        let ns = ns.clone();
        self.with_writer(move |c| {
            let s = &ns.settings;
            let n = c
                .execute(
                    &format!(
                        "INSERT INTO namespaces ({NAMESPACE_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16) \
                         ON CONFLICT (name) DO NOTHING"
                    ),
                    params![
                        ns.name.as_str(),
                        ns.description,
                        s.method.to_wire(),
                        s.length,
                        s.prefix,
                        s.suffix,
                        to_micros(ns.created_at),
                        to_micros(ns.last_updated_at),
                        ns.uid.0,
                        s.deletable,
                        s.multi,
                        s.original_system,
                        s.sealed,
                        s.moving,
                        s.index_version,
                        s.moving_from_index
                    ],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(Error::already_exists(format!("namespace {} already exists", ns.name)));
            }
            Ok(())
        })
        .await
    }

    async fn get_namespace(&self, name: &NamespaceName) -> Result<Option<Namespace>, Error> {
        let name = name.as_str().to_owned();
        self.with_reader(move |c| {
            c.query_row(
                &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces WHERE name = ?1"),
                [name],
                namespace_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn adopt_original_system(
        &self,
        name: &NamespaceName,
        uid: NamespaceUid,
        system: &OriginalSystem,
    ) -> Result<Option<Namespace>, Error> {
        let (name, system) = (name.as_str().to_owned(), system.as_str().to_owned());
        self.with_writer(move |c| {
            c.execute(
                "UPDATE namespaces SET original_system = ?3 \
                 WHERE name = ?1 AND uid = ?2 AND original_system IS NULL",
                params![name, uid.0, system],
            )
            .map_err(sql_err)?;
            c.query_row(
                &format!("SELECT {NAMESPACE_COLUMNS} FROM namespaces WHERE name = ?1 AND uid = ?2"),
                params![name, uid.0],
                namespace_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn list_namespaces(&self) -> Result<Vec<Namespace>, Error> {
        self.with_reader(|c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {NAMESPACE_COLUMNS} FROM namespaces ORDER BY name"
                ))
                .map_err(sql_err)?;
            let rows = st.query_map([], namespace_from_row).map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)?).collect()
        })
        .await
    }

    async fn delete_namespace(
        &self,
        name: &NamespaceName,
        uid: Option<NamespaceUid>,
    ) -> Result<bool, Error> {
        let owned = name.as_str().to_owned();
        let deleted = self
            .with_writer(move |c| {
                let n = c
                    .execute(
                        "DELETE FROM namespaces WHERE name = ?1 AND (?2 IS NULL OR uid = ?2)",
                        rusqlite::params![owned, uid.map(|u| u.0)],
                    )
                    .map_err(sql_err)?;
                Ok(n > 0)
            })
            .await?;
        if deleted {
            self.coherence.deleted(name.as_str());
        }
        Ok(deleted)
    }

    async fn get_pseudonym(
        &self,
        namespace: &NamespaceName,
        pseudonym_value: &PseudonymValue,
    ) -> Result<Option<Pseudonym>, Error> {
        let (ns, pv) = (
            namespace.as_str().to_owned(),
            pseudonym_value.as_str().to_owned(),
        );
        self.with_reader(move |c| {
            c.query_row(
                &format!(
                    // A multi-pseudonym namespace's entries are in
                    // multi_pseudonyms (see `crate::multi`); the first
                    // branch with a row ends the lookup.
                    "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = ?1 AND pseudonym_value = ?2
                     UNION ALL
                     SELECT {PSEUDONYM_COLUMNS} FROM multi_pseudonyms WHERE namespace = ?1 AND pseudonym_value = ?2
                     LIMIT 1"
                ),
                [ns, pv],
                pseudonym_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
            // An anonymized entry resolves to no one.
            .map(|p| p.filter(|p| !is_anonymized(&p.original_value)))
        })
        .await
    }

    async fn list_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error> {
        let ns = namespace.as_str().to_owned();
        let after = after.cloned();
        self.with_reader(move |c| {
            let limit = i64::from(page_size) + 1;
            // The unique (namespace, pseudonym_value) index orders and bounds it.
            let pseudonym = after.map(|cur| cur.pseudonym_value);
            let (bound, args) = page_args(&ns, &limit, pseudonym.as_ref());
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = ?1 {bound}
                     ORDER BY pseudonym_value DESC LIMIT ?2"
                ))
                .map_err(sql_err)?;
            let items: Vec<Pseudonym> = st
                .query_map(args.as_slice(), pseudonym_from_row)
                .map_err(sql_err)?
                .map(|r| r.map_err(sql_err)?)
                .collect::<Result<_, _>>()?;
            let total = if include_total_size {
                Some(
                    c.query_row(
                        "SELECT count(*) FROM pseudonyms WHERE namespace = ?1",
                        [&ns],
                        |r| r.get::<_, i64>(0),
                    )
                    .map_err(sql_err)?,
                )
            } else {
                None
            };
            Ok(page_from_rows(items, page_size, total))
        })
        .await
    }

    async fn count_created(
        &self,
        namespace: Option<&NamespaceName>,
        after: Option<std::time::SystemTime>,
        until: Option<std::time::SystemTime>,
    ) -> Result<Vec<CreatedCount>, Error> {
        let namespace = namespace.map(|n| n.as_str().to_owned());
        let after = after.map_or(i64::MIN, to_micros);
        let until = until.map_or(i64::MAX, to_micros);
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(
                    "SELECT n.name, n.uid, (SELECT count(*) FROM pseudonyms p
                         WHERE p.namespace = n.name AND p.created_at > ?2 AND p.created_at <= ?3)
                       + (SELECT count(*) FROM multi_pseudonyms p
                         WHERE p.namespace = n.name AND p.created_at > ?2 AND p.created_at <= ?3)
                     FROM namespaces n WHERE ?1 IS NULL OR n.name = ?1 ORDER BY n.name",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(rusqlite::params![namespace, after, until], |r| {
                    Ok(CreatedCount {
                        namespace: r.get(0)?,
                        uid: NamespaceUid(r.get(1)?),
                        count: r.get(2)?,
                    })
                })
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
        .await
    }

    async fn insert_token(&self, token: &TokenRecord) -> Result<(), Error> {
        let t = token.clone();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    &format!(
                        "INSERT INTO access_tokens ({TOKEN_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9) \
                         ON CONFLICT DO NOTHING"
                    ),
                    params![
                        t.id,
                        t.kind.name(),
                        t.name,
                        t.hash.0.as_slice(),
                        t.admin,
                        encode_grants(&t.grants),
                        to_micros(t.created_at),
                        t.expires_at.map(to_micros),
                        t.revoked_at.map(to_micros),
                    ],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(Error::already_exists("an access token with this id or secret exists"));
            }
            Ok(())
        })
        .await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        self.with_reader(|c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM access_tokens ORDER BY created_at, id"
                ))
                .map_err(sql_err)?;
            let rows = st.query_map([], token_from_row).map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)?).collect()
        })
        .await
    }

    async fn revoke_token(&self, id: &str, at: std::time::SystemTime) -> Result<bool, Error> {
        let id = id.to_owned();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE access_tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1",
                    params![id, to_micros(at)],
                )
                .map_err(sql_err)?;
            Ok(n > 0)
        })
        .await
    }

    async fn find_token(&self, hash: &TokenHash) -> Result<Option<TokenRecord>, Error> {
        let hash = hash.0;
        self.with_reader(move |c| {
            c.query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM access_tokens WHERE token_hash = ?1"),
                [hash.as_slice()],
                token_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn check_writable(&self) -> Result<(), Error> {
        self.with_writer(|c| c.query_row("SELECT 1", [], |_| Ok(())).map_err(sql_err))
            .await
    }

    fn database_health(&self) -> DatabaseHealth {
        self.reachability.snapshot()
    }

    fn schema_problem(&self) -> Option<String> {
        self.files.check().map(str::to_owned)
    }

    fn coherence(&self) -> &Coherence {
        &self.coherence
    }

    fn pool_status(&self) -> PoolStatus {
        let in_use = self.in_use.load(Ordering::Relaxed);
        PoolStatus {
            in_use,
            idle: (READERS + 1).saturating_sub(in_use),
            max_size: READERS + 1,
            waiting: 0,
        }
    }

    fn write_parallelism(&self) -> usize {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str) -> Namespace {
        crate::test_namespace(name, 1, 16, vfps_core::now_micros())
    }

    /// A write-ahead log deleted under the server (its commits would go to a
    /// file nobody reads again): writes are refused and the store says why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_write_ahead_log_stops_writes() {
        let dir = vfps_testkit::scratch_dir("wal-removed");
        let path = dir.join("vfps.sqlite");
        let store = SqliteStore::open(&path).unwrap();
        store.create_namespace(&namespace("a")).await.unwrap();
        assert_eq!(store.schema_problem(), None);
        std::fs::remove_file(dir.join("vfps.sqlite-wal")).unwrap();
        let e = store.create_namespace(&namespace("b")).await.unwrap_err();
        assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e:?}");
        assert!(
            e.message
                .contains("vfps.sqlite-wal was removed or replaced"),
            "{e:?}"
        );
        assert!(store
            .schema_problem()
            .is_some_and(|p| p.contains("restarted")));
    }

    /// The serving lock's file removed (a second server could then take the
    /// database file) is noticed the same way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_serving_lock_stops_writes() {
        let dir = vfps_testkit::scratch_dir("lock-removed");
        let path = dir.join("vfps.sqlite");
        let _lock = ServingLock::acquire(&path).unwrap();
        let store = SqliteStore::open(&path).unwrap();
        store.create_namespace(&namespace("a")).await.unwrap();
        std::fs::remove_file(dir.join("vfps.sqlite.lock")).unwrap();
        let e = store.create_namespace(&namespace("b")).await.unwrap_err();
        assert!(
            e.message
                .contains("vfps.sqlite.lock was removed or replaced"),
            "{e:?}"
        );
    }

    /// The database file replaced by another (a restore over a running
    /// server) is noticed the same way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replaced_database_file_stops_writes() {
        let dir = vfps_testkit::scratch_dir("db-replaced");
        let path = dir.join("vfps.sqlite");
        let store = SqliteStore::open(&path).unwrap();
        store.create_namespace(&namespace("a")).await.unwrap();
        std::fs::copy(&path, dir.join("copy")).unwrap();
        std::fs::rename(dir.join("copy"), &path).unwrap();
        let e = store.create_namespace(&namespace("b")).await.unwrap_err();
        assert!(
            e.message.contains("vfps.sqlite was removed or replaced"),
            "{e:?}"
        );
    }
}
