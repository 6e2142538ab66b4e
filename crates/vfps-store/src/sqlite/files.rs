//! The file itself: opened with its pragmas, watched for being removed or
//! replaced, and served by one process at a time.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use rusqlite::{Connection, OpenFlags};
use vfps_core::Error;

/// The database file and its write-ahead log as this process opened them.
/// SQLite keeps writing to the files it has open: if one is deleted or
/// replaced under it (an operator cleaning up, a restore), commits land in a
/// file nobody will read again and acknowledged writes are lost on restart.
/// Once that is seen, writes are refused and the store is not ready, until a
/// restart opens the files again.
pub(super) struct FileGuard {
    /// The database file, its write-ahead log, and the [`ServingLock`]'s file
    /// (removed, a second server could take the file).
    paths: [PathBuf; 3],
    opened: [Option<(u64, u64)>; 3],
    broken: std::sync::OnceLock<String>,
}

impl FileGuard {
    pub(super) fn new(path: &Path) -> Self {
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
    pub(super) fn check(&self) -> Option<&str> {
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
pub(super) fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The device and inode of the file at `path`, `None` if there is none.
pub(super) fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Busy, locked, full or failing files are transient (`Unavailable`); a value
/// too big for SQLite is the caller's (`InvalidArgument`); the rest is a bug.
pub(super) fn sql_err(e: rusqlite::Error) -> Error {
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

pub(super) fn open(path: &Path, flags: OpenFlags) -> Result<Connection, Error> {
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
