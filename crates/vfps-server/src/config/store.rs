//! Where pseudonyms are kept: PostgreSQL by its connection string, as upstream,
//! else an embedded SQLite file.

use std::{path::PathBuf, time::Duration};

use vfps_store::postgres::{npgsql, PgOptions};

use super::{
    env::{duration, Env},
    Flags,
};

/// Where pseudonyms are kept: PostgreSQL when `ConnectionStrings__PostgreSQL` is
/// set, as upstream, otherwise an embedded SQLite file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    Postgres(Box<PgOptions>),
    Sqlite(PathBuf),
}

impl StoreConfig {
    /// `--postgres` or `ConnectionStrings__PostgreSQL` (with `PGUSER` and
    /// `PGPASSWORD` as fallbacks), else `--sqlite-path` or `VFPS_SQLITE_PATH`;
    /// `VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT` is checked either way.
    pub(super) fn from_env(
        env: &Env,
        flags: &Flags,
        errors: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Self {
        let connection_string = flags
            .postgres
            .clone()
            .or_else(|| env.get("ConnectionStrings__PostgreSQL").map(str::to_owned))
            .filter(|s| !s.trim().is_empty());
        // Upstream's switch: PostgreSQL needs its connection string (upstream
        // fails without one; falling back to a local file would give each
        // replica its own pseudonyms).
        match env.text("Pseudonymization__BackingStore") {
            Some(b) if b.eq_ignore_ascii_case("postgresql") && connection_string.is_none() => {
                errors.push(
                    "Pseudonymization__BackingStore=PostgreSQL but ConnectionStrings__PostgreSQL \
                     (or --postgres) is not set: set it, or unset the backing store for the \
                     embedded SQLite file"
                        .to_owned(),
                );
            }
            Some(b) if b.eq_ignore_ascii_case("sqlite") && connection_string.is_some() => {
                errors.push(
                    "Pseudonymization__BackingStore=SQLite but a PostgreSQL connection string is \
                     set: remove one of them"
                        .to_owned(),
                );
            }
            Some(b)
                if !b.eq_ignore_ascii_case("postgresql") && !b.eq_ignore_ascii_case("sqlite") =>
            {
                errors.push(format!(
                    "Pseudonymization__BackingStore={b:?} is not valid: expected PostgreSQL or SQLite"
                ));
            }
            _ => {}
        }
        let mut store = match connection_string {
            Some(cs) => match npgsql::parse(&cs, env.get("PGUSER"), env.get("PGPASSWORD")) {
                Ok(parsed) => {
                    for k in parsed.ignored_keywords {
                        notes.push(format!(
                            "ConnectionStrings__PostgreSQL: keyword {k:?} is accepted and ignored"
                        ));
                    }
                    Self::Postgres(Box::new(parsed.options))
                }
                Err(e) => {
                    errors.push(e.to_string());
                    // Never returned: the error fails the load.
                    Self::Sqlite(PathBuf::new())
                }
            },
            None => {
                let (key, path) = match (&flags.sqlite_path, env.get("VFPS_SQLITE_PATH")) {
                    (Some(p), _) => ("--sqlite-path", p.clone()),
                    (None, Some(p)) => ("VFPS_SQLITE_PATH", PathBuf::from(p)),
                    (None, None) => ("", PathBuf::from("vfps.sqlite")),
                };
                if path.as_os_str().to_string_lossy().trim().is_empty() {
                    errors.push(format!(
                        "{key} is {:?}: name a file, or leave it unset for vfps.sqlite",
                        path.as_os_str()
                    ));
                }
                Self::Sqlite(path)
            }
        };
        let idle_in_transaction_timeout = duration(
            env,
            errors,
            "VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
            Duration::from_secs(10),
        );
        if idle_in_transaction_timeout < Duration::from_millis(1) {
            errors.push("VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT must be at least 1ms".into());
        }
        if let Self::Postgres(options) = &mut store {
            options.idle_in_transaction_timeout = idle_in_transaction_timeout;
        }
        store
    }
}
