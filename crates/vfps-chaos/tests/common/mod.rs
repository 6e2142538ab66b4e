//! What the harness's integration tests share: a vfps on a PostgreSQL, and
//! that database's store opened beside it (to write what a test plays the
//! operator or a lost restore with). Each test file uses what it needs.

#![allow(dead_code, clippy::unwrap_used)]

use vfps_server::{config::Flags, startup};
use vfps_store::postgres::{npgsql, PgStore};

/// A vfps on the PostgreSQL database at `connection_string`, migrated.
pub async fn vfps_on(connection_string: &str) -> startup::Running {
    startup::spawn(
        vec![
            (
                "ConnectionStrings__PostgreSQL".into(),
                connection_string.to_owned(),
            ),
            ("ForceRunDatabaseMigrations".into(), "true".into()),
        ],
        Flags::default(),
    )
    .await
    .unwrap()
}

/// A vfps on a new database of the shared test cluster; the server and the
/// database's name.
pub async fn vfps_on_postgres() -> (startup::Running, String) {
    let db = vfps_testkit::shared().create_database().unwrap();
    (vfps_on(&db.connection_string).await, db.name)
}

/// The store of the database at `connection_string`.
pub fn store_of(connection_string: &str) -> PgStore {
    PgStore::new(
        &npgsql::parse(connection_string, None, None)
            .unwrap()
            .options,
    )
    .unwrap()
}
