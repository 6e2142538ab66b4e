//! Switching a deployment of upstream vfps over: its PostgreSQL database,
//! written by upstream's EF Core migrations, is adopted by `vfps migrate`.

use std::process::{Command, Output};

use vfps_proto::v1::{
    NamespaceServiceDeleteRequest, NamespaceServiceGetRequest, PseudonymServiceCreateRequest,
    PseudonymServiceGetRequest, PseudonymServiceListRequest,
};

use crate::helpers::spawn_app_with;

const UPSTREAM: &str = include_str!("fixtures/upstream-database.sql");

/// A fresh database holding upstream's tables and rows.
fn upstream_database(extra: &str) -> vfps_testkit::TestDatabase {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().expect("test database");
    // As the database's owner, the role the service connects as.
    cluster
        .psql(&db.name, &format!("SET ROLE {}; {UPSTREAM}", db.name))
        .unwrap();
    if !extra.is_empty() {
        cluster.psql(&db.name, extra).unwrap();
    }
    db
}

fn migrate(db: &vfps_testkit::TestDatabase) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["migrate", "--wait", "10s"])
        .env("ConnectionStrings__PostgreSQL", &db.connection_string)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_database_is_adopted_and_its_pseudonyms_stay_what_they_were() {
    let db = upstream_database("");
    let migrated = migrate(&db);
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    assert!(
        String::from_utf8_lossy(&migrated.stderr).contains("adopted"),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let again = migrate(&db);
    assert!(again.status.success(), "a second run changes nothing");

    let app = spawn_app_with(vec![(
        "ConnectionStrings__PostgreSQL".to_owned(),
        db.connection_string.clone(),
    )])
    .await;
    app.wait_ready().await;
    let mut namespaces = app.namespaces.clone();
    let mut pseudonyms = app.pseudonyms.clone();

    let patients = namespaces
        .get(NamespaceServiceGetRequest {
            name: "patients".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(patients.description, "patient identifiers");
    assert_eq!(
        (
            patients.pseudonym_generation_method,
            patients.pseudonym_length
        ),
        (1, 32)
    );
    assert_eq!(patients.pseudonym_prefix.as_deref(), Some("pat-"));
    let hashes = namespaces
        .get(NamespaceServiceGetRequest {
            name: "hashes".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(hashes.description, "", "a null description reads as empty");

    let create = |namespace: &str, original: &str| PseudonymServiceCreateRequest {
        namespace: namespace.into(),
        original_value: original.into(),
    };
    for (namespace, original, pseudonym) in [
        (
            "patients",
            "p-1",
            "pat-Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3",
        ),
        (
            "hashes",
            "x",
            "2D711642B726B04401627CA9FBAC32F5C8530FB1903CC4DB02258717921A4881-h",
        ),
        ("legacy", "l-1", "bGVnYWN5LXBzZXVkb255bQ"),
    ] {
        let again = pseudonyms
            .create(create(namespace, original))
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap();
        assert_eq!(
            again.pseudonym_value, pseudonym,
            "{namespace}: the same pseudonym"
        );
        let found = pseudonyms
            .get(PseudonymServiceGetRequest {
                namespace: namespace.into(),
                pseudonym_value: pseudonym.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap();
        assert_eq!(found.original_value.as_deref(), Some(original));
    }
    let listed = pseudonyms
        .list(PseudonymServiceListRequest {
            namespace: "patients".into(),
            include_total_size: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.total_size, Some(2));
    let new = pseudonyms
        .create(create("patients", "p-3"))
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap();
    assert!(new.pseudonym_value.starts_with("pat-"));

    namespaces
        .delete(NamespaceServiceDeleteRequest {
            name: "legacy".into(),
        })
        .await
        .unwrap();
    let left = vfps_testkit::shared()
        .psql(
            &db.name,
            "SELECT (SELECT count(*) FROM pseudonyms WHERE namespace = 'legacy') || ' ' || \
             (SELECT count(*) FROM data_protection_keys) || ' ' || \
             (SELECT count(*) FROM \"__EFMigrationsHistory\")",
        )
        .unwrap();
    assert_eq!(
        left.trim(),
        "0 1 3",
        "upstream's other tables are left alone"
    );
    app.shutdown.cancel();
    let _ = app.handle.await;
}

/// A pseudonym value upstream gave to two originals cannot be reverse-looked
/// up unambiguously: the adoption stops naming the namespace, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_database_with_an_ambiguous_pseudonym_is_not_adopted_and_left_unchanged() {
    let db = upstream_database(
        "INSERT INTO pseudonyms VALUES ('x2', 'hashes', \
         '2D711642B726B04401627CA9FBAC32F5C8530FB1903CC4DB02258717921A4881-h', now(), now()); \
         INSERT INTO namespaces VALUES ('', NULL, 3, 36, NULL, NULL, now(), now()); \
         INSERT INTO namespaces VALUES ('long', NULL, 5, 5000, NULL, NULL, now(), now());",
    );
    let migrated = migrate(&db);
    let stderr = String::from_utf8_lossy(&migrated.stderr);
    assert!(!migrated.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("namespace \"hashes\": 1 pseudonym value(s) given to more than one original"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("2D711642"),
        "no pseudonym in the message: {stderr}"
    );
    let columns = vfps_testkit::shared()
        .psql(
            &db.name,
            "SELECT string_agg(column_name, ',' ORDER BY column_name) FROM information_schema.columns \
             WHERE table_name = 'pseudonyms'",
        )
        .unwrap();
    assert_eq!(
        columns.trim(),
        "created_at,last_updated_at,namespace_name,original_value,pseudonym_value"
    );

    // Resolved, the next problem is named: a namespace this service cannot name.
    vfps_testkit::shared()
        .psql(
            &db.name,
            "DELETE FROM pseudonyms WHERE original_value = 'x2'",
        )
        .unwrap();
    let migrated = migrate(&db);
    let stderr = String::from_utf8_lossy(&migrated.stderr);
    assert!(!migrated.status.success(), "{stderr}");
    assert!(stderr.contains("namespace \"\":"), "{stderr}");
    assert!(
        stderr.contains("namespace \"long\": pseudonym length must be at most"),
        "{stderr}"
    );
    let applied = vfps_testkit::shared()
        .psql(&db.name, "SELECT count(*) FROM vfps_schema_migrations")
        .unwrap();
    assert_eq!(applied.trim(), "0", "nothing recorded");
}

/// An adoption dropped mid-transaction (its caller gone while it waits for
/// upstream's tables, locked by a replica still running) changes nothing: the
/// session it held is discarded, rolling back, and the next run adopts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_dropped_mid_transaction_changes_nothing() {
    let db = upstream_database("");
    let options = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = vfps_store::postgres::PgStore::new(&options).unwrap();
    let locker = {
        let name = db.name.clone();
        std::thread::spawn(move || {
            vfps_testkit::shared()
                .psql(
                    &name,
                    "BEGIN; LOCK TABLE pseudonyms IN SHARE MODE; SELECT pg_sleep(2); COMMIT;",
                )
                .unwrap();
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let dropped =
        tokio::time::timeout(std::time::Duration::from_millis(700), store.migrate()).await;
    assert!(
        dropped.is_err(),
        "the adoption waited for the lock: {dropped:?}"
    );
    tokio::task::spawn_blocking(move || locker.join().unwrap())
        .await
        .unwrap();
    let state = || {
        vfps_testkit::shared()
            .psql(
                &db.name,
                "SELECT (SELECT count(*) FROM information_schema.columns \
                 WHERE table_name = 'pseudonyms' AND column_name = 'namespace_name') || ' ' || \
                 (SELECT count(*) FROM vfps_schema_migrations)",
            )
            .unwrap()
    };
    assert_eq!(state().trim(), "1 0", "nothing converted, nothing recorded");
    let report = store.migrate().await.unwrap();
    assert!(report.adopted_upstream, "{report:?}");
    assert_eq!(
        state().trim(),
        "0 7",
        "every migration recorded (1 to 6, and 8)"
    );
}
