//! Versioned, checksummed schema migrations.
//!
//! Migrations are SQL files compiled into the binary. Each applied version is
//! recorded with the SHA-256 of its text; a recorded version whose text changed
//! stops the migration (a changed migration is a bug, not something to re-apply).

use sha2::{Digest, Sha256};

/// One migration: its version, a name, and its SQL.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

impl Migration {
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

pub const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/postgres/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "namespace_uid",
        sql: include_str!("../migrations/postgres/0002_namespace_uid.sql"),
    },
    Migration {
        version: 3,
        name: "access_tokens",
        sql: include_str!("../migrations/postgres/0003_access_tokens.sql"),
    },
    Migration {
        version: 4,
        name: "csv_jobs",
        sql: include_str!("../migrations/postgres/0004_csv_jobs.sql"),
    },
    Migration {
        version: 5,
        name: "ui_session_ends",
        sql: include_str!("../migrations/postgres/0005_ui_session_ends.sql"),
    },
    Migration {
        version: 6,
        name: "pseudonym_deletion",
        sql: include_str!("../migrations/postgres/0006_pseudonym_deletion.sql"),
    },
    Migration {
        version: 7,
        name: "restore_holds",
        sql: include_str!("../migrations/postgres/0007_restore_holds.sql"),
    },
    Migration {
        version: 8,
        name: "multi_pseudonym",
        sql: include_str!("../migrations/postgres/0008_multi_pseudonym.sql"),
    },
    Migration {
        version: 9,
        name: "original_system",
        sql: include_str!("../migrations/postgres/0009_original_system.sql"),
    },
    Migration {
        version: 10,
        name: "sealed_originals",
        sql: include_str!("../migrations/postgres/0010_sealed_originals.sql"),
    },
    Migration {
        version: 11,
        name: "moving_originals",
        sql: include_str!("../migrations/postgres/0011_moving_originals.sql"),
    },
];

pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/sqlite/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "namespace_uid",
        sql: include_str!("../migrations/sqlite/0002_namespace_uid.sql"),
    },
    Migration {
        version: 3,
        name: "access_tokens",
        sql: include_str!("../migrations/sqlite/0003_access_tokens.sql"),
    },
    Migration {
        version: 4,
        name: "csv_jobs",
        sql: include_str!("../migrations/sqlite/0004_csv_jobs.sql"),
    },
    Migration {
        version: 5,
        name: "ui_session_ends",
        sql: include_str!("../migrations/sqlite/0005_ui_session_ends.sql"),
    },
    Migration {
        version: 6,
        name: "pseudonym_deletion",
        sql: include_str!("../migrations/sqlite/0006_pseudonym_deletion.sql"),
    },
    // 7 is left to another change (PostgreSQL's `restore_holds`); versions
    // are looked up one by one, so a gap is fine.
    Migration {
        version: 8,
        name: "multi_pseudonym",
        sql: include_str!("../migrations/sqlite/0008_multi_pseudonym.sql"),
    },
    Migration {
        version: 9,
        name: "original_system",
        sql: include_str!("../migrations/sqlite/0009_original_system.sql"),
    },
    Migration {
        version: 10,
        name: "sealed_originals",
        sql: include_str!("../migrations/sqlite/0010_sealed_originals.sql"),
    },
    Migration {
        version: 11,
        name: "moving_originals",
        sql: include_str!("../migrations/sqlite/0011_moving_originals.sql"),
    },
];

/// What a migration run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub applied: Vec<i64>,
    pub already_applied: Vec<i64>,
    /// The tables were upstream vfps's and were adopted (PostgreSQL only).
    pub adopted_upstream: bool,
}

/// Compares the recorded checksum of an applied version with the compiled one.
pub(crate) fn verify_checksum(m: &Migration, recorded: &str) -> Result<(), vfps_core::Error> {
    if recorded == m.checksum() {
        Ok(())
    } else {
        Err(vfps_core::Error::internal(format!(
            "migration {} ({}) was applied with checksum {recorded} but this binary has {}",
            m.version,
            m.name,
            m.checksum()
        )))
    }
}
