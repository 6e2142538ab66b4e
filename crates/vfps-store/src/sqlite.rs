//! The embedded SQLite store: one file in WAL mode with `synchronous=FULL`, one
//! writer connection (SQLite allows one writer at a time anyway) and a few reader
//! connections used in parallel. All calls run on the blocking thread pool.
//!
//! Cancel-safe by construction: a call's closure runs to completion on its
//! blocking thread even if the caller's future is dropped, and a transaction that
//! does not reach its commit rolls back when it is dropped (rusqlite). The file is
//! this process's alone, so its caches are always coherent (`Coherence::local`):
//! a serving process holds its [`ServingLock`].

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
    from_micros, is_anonymized, to_micros, Error, GenerationMethod, Namespace, NamespaceName,
    NamespaceSettings, NamespaceUid, OriginalSystem, PageCursor, Pseudonym, PseudonymPage,
    PseudonymValue,
};

use crate::{
    coherence::Coherence,
    health::{DatabaseHealth, Reachability},
    migrate, page_from_rows,
    tokens::{decode_grants, decode_hash, decode_kind, encode_grants, TOKEN_COLUMNS},
    Candidate, CreatedCount, PoolStatus, Store, Upsert, Upserted,
};

mod erasure;
mod jobs;
mod keys;
mod multi;
mod sessions;

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

/// The database file and its write-ahead log as this process opened them.
/// SQLite keeps writing to the files it has open: if one is deleted or
/// replaced under it (an operator cleaning up, a restore), commits land in a
/// file nobody will read again and acknowledged writes are lost on restart.
/// Once that is seen, writes are refused and the store is not ready, until a
/// restart opens the files again.
struct FileGuard {
    /// The database file, its write-ahead log, and the [`ServingLock`]'s file
    /// (removed, a second server could take the file).
    paths: [PathBuf; 3],
    opened: [Option<(u64, u64)>; 3],
    broken: std::sync::OnceLock<String>,
}

impl FileGuard {
    fn new(path: &Path) -> Self {
        let paths = [
            path.to_owned(),
            suffixed(path, "-wal"),
            suffixed(path, ".lock"),
        ];
        Self {
            opened: [
                identity(&paths[0]),
                identity(&paths[1]),
                identity(&paths[2]),
            ],
            paths,
            broken: std::sync::OnceLock::new(),
        }
    }

    /// Why the files can no longer be trusted, if they cannot (said once in
    /// the log, remembered until restart).
    fn check(&self) -> Option<&str> {
        if let Some(why) = self.broken.get() {
            return Some(why);
        }
        let moved = self
            .paths
            .iter()
            .zip(self.opened)
            .find(|(p, opened)| opened.is_some() && identity(p) != *opened)?;
        let why = format!(
            "{} was removed or replaced while this process had it open: writes are refused \
             until vfps is restarted (writes acknowledged since then may be lost; restore the \
             file from a backup if it was replaced by mistake)",
            moved.0.display()
        );
        let why = self.broken.get_or_init(|| {
            tracing::error!("{why}");
            why
        });
        Some(why)
    }
}

/// `path` with `suffix` appended to its file name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The device and inode of the file at `path`, `None` if there is none.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Busy, locked, full or failing files are transient (`Unavailable`); a value
/// too big for SQLite is the caller's (`InvalidArgument`); the rest is a bug.
fn sql_err(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => Error::unavailable("the database file is busy"),
        Some(DiskFull | SystemIoFailure | CannotOpen | OutOfMemory) => {
            Error::unavailable(format!("database file IO failed: {e}"))
        }
        Some(TooBig) => Error::invalid_argument("the database cannot store a value this large"),
        _ => Error::internal(format!("sqlite: {e}")),
    }
}

fn open(path: &Path, flags: OpenFlags) -> Result<Connection, Error> {
    let c = Connection::open_with_flags(path, flags).map_err(|e| {
        Error::unavailable(format!("cannot open database file {}: {e}", path.display()))
    })?;
    c.busy_timeout(Duration::from_secs(5)).map_err(sql_err)?;
    c.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
        .map_err(sql_err)?;
    Ok(c)
}

/// Held by the one process that serves a SQLite file: an exclusive lock on
/// `<file>.lock` (a file of its own: closing any descriptor of the database
/// file would drop SQLite's own locks on it). The kernel releases it when the
/// process ends, however it ends.
#[derive(Debug)]
pub struct ServingLock {
    _file: std::fs::File,
}

impl ServingLock {
    /// Takes the lock of the SQLite file at `path`, or says which process
    /// holds it: a second server on one file would answer from caches the
    /// other's deletes never reach.
    pub fn acquire(path: &Path) -> Result<Self, Error> {
        use std::io::{Read, Seek, Write};
        let lock_path = suffixed(path, ".lock");
        if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::unavailable(format!("cannot create directory {}: {e}", dir.display()))
            })?;
        }
        let io = |e: std::io::Error| {
            Error::unavailable(format!("cannot lock {}: {e}", lock_path.display()))
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::unavailable(format!(
                    "{} is served by another vfps process{}: one server per SQLite file \
                     (several replicas need PostgreSQL)",
                    path.display(),
                    if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {holder})")
                    }
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
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

const NAMESPACE_COLUMNS: &str =
    "name, description, pseudonym_generation_method, pseudonym_length, \
     pseudonym_prefix, pseudonym_suffix, created_at, last_updated_at, uid, \
     pseudonym_deletion_allowed, multi_pseudonym, original_system, originals_sealed, \
     originals_moving, originals_index_version, originals_moving_from_index";
const PSEUDONYM_COLUMNS: &str =
    "namespace, original_value, pseudonym_value, created_at, last_updated_at, original_sealed";

/// A List page's bound (`AND pseudonym_value < ?3` after a token, nothing
/// before the first page) and its arguments: `?1` the namespace, `?2` the
/// limit. Two statements rather than one with an `OR`, so the
/// (namespace, pseudonym_value) index is walked from the position.
#[allow(
    clippy::ptr_arg,
    reason = "a `&String` is a sized `ToSql`; a `&str` is not"
)]
pub(crate) fn page_args<'a>(
    namespace: &'a String,
    limit: &'a i64,
    after: Option<&'a String>,
) -> (&'static str, Vec<&'a dyn rusqlite::ToSql>) {
    match after {
        Some(pseudonym) => (
            "AND pseudonym_value < ?3",
            vec![namespace, limit, pseudonym],
        ),
        None => ("", vec![namespace, limit]),
    }
}

fn namespace_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Namespace, Error>> {
    let name: String = r.get(0)?;
    let method: i32 = r.get(2)?;
    let length: i64 = r.get(3)?;
    let description: String = r.get(1)?;
    let prefix: Option<String> = r.get(4)?;
    let suffix: Option<String> = r.get(5)?;
    let created: i64 = r.get(6)?;
    let updated: i64 = r.get(7)?;
    let uid: i64 = r.get(8)?;
    let deletable: bool = r.get(9)?;
    let multi: bool = r.get(10)?;
    let system: Option<String> = r.get(11)?;
    let sealed: bool = r.get(12)?;
    let moving: bool = r.get(13)?;
    let index_version: u32 = r.get(14)?;
    let moving_from_index: Option<u32> = r.get(15)?;
    Ok((|| {
        let method = GenerationMethod::from_wire(method)
            .ok_or_else(|| Error::internal("stored namespace has an invalid generation method"))?;
        let length = u32::try_from(length)
            .map_err(|_| Error::internal("stored namespace has an invalid length"))?;
        Ok(Namespace {
            name: NamespaceName::parse(&name)?,
            uid: NamespaceUid(uid),
            description,
            settings: NamespaceSettings::parse(method, length, prefix, suffix)?
                .with_deletion(deletable)
                .with_multi(multi)?
                .with_original_system(system.as_deref().map(OriginalSystem::parse).transpose()?)
                .with_sealed(sealed)
                .with_moving(moving)
                .with_index(index_version, moving_from_index),
            created_at: from_micros(created),
            last_updated_at: from_micros(updated),
        })
    })())
}

fn token_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<TokenRecord, Error>> {
    let id: String = r.get(0)?;
    let kind: String = r.get(1)?;
    let name: String = r.get(2)?;
    let hash: Vec<u8> = r.get(3)?;
    let admin: bool = r.get(4)?;
    let grants: String = r.get(5)?;
    let created: i64 = r.get(6)?;
    let expires: Option<i64> = r.get(7)?;
    let revoked: Option<i64> = r.get(8)?;
    Ok((|| {
        Ok(TokenRecord {
            id,
            kind: decode_kind(&kind)?,
            name,
            hash: decode_hash(&hash)?,
            admin,
            grants: decode_grants(&grants)?,
            created_at: from_micros(created),
            expires_at: expires.map(from_micros),
            revoked_at: revoked.map(from_micros),
        })
    })())
}

fn pseudonym_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Pseudonym, Error>> {
    let ns: String = r.get(0)?;
    let original: String = r.get(1)?;
    let pseudonym: String = r.get(2)?;
    let created: i64 = r.get(3)?;
    let updated: i64 = r.get(4)?;
    let sealed: Option<Vec<u8>> = r.get(5)?;
    Ok(NamespaceName::parse(&ns).map(|namespace| Pseudonym {
        namespace,
        original_value: original,
        pseudonym_value: pseudonym,
        created_at: from_micros(created),
        last_updated_at: from_micros(updated),
        original_sealed: sealed,
    }))
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
