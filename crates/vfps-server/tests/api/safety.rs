//! Data safety under what real callers do and the chaos workload once never did:
//! interrupted operations, bad input among good, a synchronous standby that goes
//! away, several replicas with caches, a standby listed first.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Request};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient, NamespaceServiceCreateRequest,
    NamespaceServiceDeleteRequest, PseudonymServiceCreateRequest,
};

use crate::helpers::{backend_env, spawn_app_with, Backend, TestApp};

fn create_request(
    namespace: &str,
    original: &str,
    timeout: Duration,
) -> Request<PseudonymServiceCreateRequest> {
    let mut r = Request::new(PseudonymServiceCreateRequest {
        namespace: namespace.into(),
        original_value: original.into(),
    });
    r.set_timeout(timeout);
    r
}

/// Sessions of `database` that sit inside a transaction without running anything.
fn idle_in_transaction(cluster: &vfps_testkit::PgCluster, database: &str) -> usize {
    cluster
        .psql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}' \
                 AND state LIKE 'idle in transaction%'"
            ),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The originals of `namespace` as another session sees them (committed rows only).
fn committed(cluster: &vfps_testkit::PgCluster, database: &str, namespace: &str) -> Vec<String> {
    cluster
        .psql(
            database,
            &format!(
                "SELECT original_value || '=' || pseudonym_value FROM pseudonyms \
                 WHERE namespace = '{namespace}' ORDER BY 1"
            ),
        )
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until a session of `database` runs a statement containing `needle`.
async fn wait_for_statement(
    cluster: &'static vfps_testkit::PgCluster,
    database: &str,
    needle: &str,
) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}' \
         AND state = 'active' AND query LIKE '%{needle}%' AND pid <> pg_backend_pid()"
    );
    let found = tokio::task::spawn_blocking(move || {
        vfps_testkit::wait_for(Duration::from_secs(10), || {
            cluster
                .psql("postgres", &sql)
                .is_ok_and(|n| n.trim() != "0")
        })
    })
    .await
    .unwrap();
    assert!(found, "no session ever ran {needle}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_whose_deadline_expires_while_it_waits_for_a_lock_leaves_nothing_open() {
    let (env, database) = backend_env(Backend::Postgres);
    let db = database.unwrap();
    let app = spawn_app_with(env).await;
    app.namespace("doomed", 5, 16).await;
    app.namespace("busy", 5, 16).await;
    let cluster = vfps_testkit::shared();

    // Another session holds what any delete has to wait for: a key-share lock on the
    // namespace (as an in-flight insert does) and an uncommitted row.
    let blocker = {
        let db = db.clone();
        std::thread::spawn(move || {
            vfps_testkit::shared().psql(
                &db,
                "BEGIN; SELECT 1 FROM namespaces WHERE name = 'doomed' FOR KEY SHARE; \
                 INSERT INTO pseudonyms VALUES ('busy', 'blocker', 'blocker', now(), now()); \
                 SELECT pg_sleep(3) AS blocker_sleeps; ROLLBACK;",
            )
        })
    };
    wait_for_statement(cluster, &db, "blocker_sleeps").await;

    let mut delete = Request::new(NamespaceServiceDeleteRequest {
        name: "doomed".into(),
    });
    delete.set_timeout(Duration::from_millis(800));
    let err = app.namespaces.clone().delete(delete).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Unavailable),
        "{err:?}"
    );
    // While the interrupted delete's statement still waits for the lock, and
    // after: every Create succeeds at once (none queues behind that statement on
    // a reused connection) and is committed, visible to another session.
    let mut acknowledged = Vec::new();
    let mut blocker = Some(blocker);
    for i in 0..40 {
        if i == 20 {
            blocker.take().unwrap().join().unwrap().unwrap();
        }
        let original = format!("after-{i:02}");
        let p = app
            .pseudonyms
            .clone()
            .create(create_request("busy", &original, Duration::from_secs(1)))
            .await
            .unwrap_or_else(|e| panic!("Create {i} failed after the interrupted delete: {e:?}"))
            .into_inner()
            .pseudonym
            .unwrap();
        acknowledged.push(format!("{original}={}", p.pseudonym_value));
    }
    assert_eq!(committed(cluster, &db, "busy"), acknowledged);
    let settled = tokio::task::spawn_blocking(move || {
        vfps_testkit::wait_for(Duration::from_secs(5), || {
            idle_in_transaction(vfps_testkit::shared(), &db) == 0
        })
    })
    .await
    .unwrap();
    assert!(settled, "a session was left idle in a transaction");
    // The interrupted delete may or may not have happened; a second one settles it.
    let again = app
        .namespaces
        .clone()
        .delete(NamespaceServiceDeleteRequest {
            name: "doomed".into(),
        })
        .await;
    assert!(
        again.is_ok() || again.as_ref().unwrap_err().code() == Code::NotFound,
        "{again:?}"
    );
}

async fn a_nul_character_fails_only_its_own_call(backend: Backend) {
    let app = spawn_app_with(backend_env(backend).0).await;
    app.namespace("n", 5, 16).await;
    let mut calls = Vec::new();
    for i in 0..300 {
        let mut client = app.pseudonyms.clone();
        let original = if i % 30 == 7 {
            format!("bad\u{0}value-{i}")
        } else {
            format!("good-{i}")
        };
        calls.push(tokio::spawn(async move {
            let r = client
                .create(create_request("n", &original, Duration::from_secs(10)))
                .await;
            (original, r.map(|r| r.into_inner().pseudonym.unwrap()))
        }));
    }
    for call in calls {
        let (original, result) = call.await.unwrap();
        if original.contains('\0') {
            let e = result.expect_err("a NUL character cannot be stored by every store");
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains("NUL"), "{e:?}");
        } else if let Err(e) = result {
            panic!("an innocent Create failed: {e:?}");
        }
    }
}

crate::on_both_backends!(a_nul_character_fails_only_its_own_call);

/// A server on the primary of a synchronous pair, once the standby has replayed
/// the new database too.
async fn on_replicated_primary(
    (primary, standby): (&vfps_testkit::PgCluster, &vfps_testkit::PgCluster),
    connection_string: impl FnOnce(&str) -> String,
) -> (TestApp, String) {
    let db = primary.create_database().unwrap();
    assert!(vfps_testkit::wait_for(Duration::from_secs(10), || standby
        .psql(&db.name, "SELECT 1")
        .is_ok()));
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            connection_string(&db.connection_string),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ("VFPS_MAX_CALL_DEADLINE".to_owned(), "10s".to_owned()),
    ];
    (spawn_app_with(env).await, db.name)
}

/// Cancels every backend of `database` waiting for the synchronous standby: its
/// commit stays on the primary alone ("committed locally").
fn cancel_sync_waits(primary: &vfps_testkit::PgCluster, database: &str) -> usize {
    primary
        .psql(
            "postgres",
            &format!(
                "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = '{database}' AND wait_event = 'SyncRep'"
            ),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_acknowledged_that_the_synchronous_standby_does_not_have() {
    let (primary, standby) = vfps_testkit::PgCluster::start_replicated_pair().unwrap();
    let (app, db) = on_replicated_primary((&primary, &standby), |cs| {
        cs.replace("Command Timeout=10", "Command Timeout=3")
    })
    .await;
    app.namespace("n", 5, 16).await;
    let kept = app.create("n", "kept").await.unwrap();
    let mut client = app.pseudonyms.clone();

    standby.stop_server().unwrap();
    // The commit waits for a standby that is gone: never acknowledged.
    let e = client
        .create(create_request("n", "single-copy", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{e:?}"
    );
    // Cancelled, the waiting commit stays on the primary alone. A retry finds that
    // row; it must not acknowledge it while the standby lacks it.
    let primary_ref = &primary;
    let db_ref = db.as_str();
    assert!(
        vfps_testkit::wait_for(Duration::from_secs(10), || cancel_sync_waits(
            primary_ref,
            db_ref
        ) > 0),
        "no backend waited for the synchronous standby"
    );
    assert_eq!(
        committed(&primary, &db, "n").len(),
        2,
        "the cancelled commit is on the primary"
    );
    let e = client
        .create(create_request("n", "single-copy", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded),
        "a row the standby lacks was acknowledged: {e:?}"
    );
    // So must a namespace whose creation the standby lacks.
    let mut ns = Request::new(NamespaceServiceCreateRequest {
        name: "single-copy-ns".into(),
        pseudonym_generation_method: 5,
        pseudonym_length: 16,
        ..Default::default()
    });
    ns.set_timeout(Duration::from_secs(2));
    let e = app.namespaces.clone().create(ns).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{e:?}"
    );
    assert!(vfps_testkit::wait_for(Duration::from_secs(10), || {
        cancel_sync_waits(primary_ref, db_ref) > 0
    }));
    let mut ns = Request::new(NamespaceServiceCreateRequest {
        name: "single-copy-ns".into(),
        pseudonym_generation_method: 5,
        pseudonym_length: 16,
        ..Default::default()
    });
    ns.set_timeout(Duration::from_secs(2));
    let e = app.namespaces.clone().create(ns).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded),
        "a namespace the standby lacks was reported as existing: {e:?}"
    );

    standby.start_server().unwrap();
    let row = client
        .create(create_request("n", "single-copy", Duration::from_secs(10)))
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap();
    let stored = committed(&primary, &db, "n");
    assert!(
        stored.contains(&format!("single-copy={}", row.pseudonym_value)),
        "{stored:?}"
    );
    assert_eq!(
        app.create("n", "kept").await.unwrap().pseudonym_value,
        kept.pseudonym_value
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_string_writes_to_the_primary_even_when_a_standby_is_listed_first() {
    let (primary, standby) = vfps_testkit::PgCluster::start_replicated_pair().unwrap();
    let (primary_port, standby_port) = (primary.port(), standby.port());
    let (app, _) = on_replicated_primary((&primary, &standby), |cs| {
        cs.replace(
            &format!("Host=127.0.0.1;Port={primary_port}"),
            &format!("Host=127.0.0.1:{standby_port},127.0.0.1:{primary_port}"),
        )
    })
    .await;
    app.namespace("n", 5, 16).await;
    let p = app
        .pseudonyms
        .clone()
        .create(create_request("n", "o", Duration::from_secs(5)))
        .await;
    assert!(p.is_ok(), "{p:?}");
}

/// Two replicas on one database, both caching namespaces and pseudonyms, or
/// with the default caching (namespace settings on the create path only).
async fn two_replicas(upstream_caches: bool) -> (TestApp, TestApp) {
    let (mut env, _) = backend_env(Backend::Postgres);
    if upstream_caches {
        env.push((
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into(),
        ));
        env.push((
            "Pseudonymization__Caching__Pseudonyms__IsEnabled".into(),
            "true".into(),
        ));
    }
    let a = spawn_app_with(env.clone()).await;
    env.retain(|(k, _)| k != "ForceRunDatabaseMigrations");
    let b = spawn_app_with(env).await;
    (a, b)
}

async fn create_namespace(
    client: &mut NamespaceServiceClient<tonic::transport::Channel>,
    prefix: &str,
) {
    client
        .create(NamespaceServiceCreateRequest {
            name: "c".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 16,
            pseudonym_prefix: Some(prefix.into()),
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_and_recreated_elsewhere_is_never_served_from_a_stale_cache() {
    let (a, b) = two_replicas(true).await;
    a_namespace_deleted_and_recreated_elsewhere_is_never_used_by(a, b).await;
}

/// Namespace settings are cached on the create path by default; the batch
/// statement checks the namespace's uid, so a recreated namespace is never
/// written with the settings of the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_default_caching_a_recreated_namespace_is_never_used_with_its_old_settings() {
    let (a, b) = two_replicas(false).await;
    a_namespace_deleted_and_recreated_elsewhere_is_never_used_by(a, b).await;
}

async fn a_namespace_deleted_and_recreated_elsewhere_is_never_used_by(a: TestApp, b: TestApp) {
    create_namespace(&mut a.namespaces.clone(), "old-").await;
    let old = a.create("c", "o").await.unwrap();
    assert!(old.pseudonym_value.starts_with("old-"));
    assert_eq!(
        a.create("c", "o").await.unwrap(),
        old,
        "served again (cached)"
    );
    // Replica A has the namespace's settings cached; B deletes it and creates
    // it again with other settings.
    let delete = |app: &TestApp| {
        let mut client = app.namespaces.clone();
        async move {
            client
                .delete(NamespaceServiceDeleteRequest { name: "c".into() })
                .await
                .unwrap();
        }
    };
    delete(&b).await;
    create_namespace(&mut b.namespaces.clone(), "new-").await;
    let mut by_replica = HashMap::new();
    for (name, app) in [("a", &a), ("b", &b)] {
        for original in ["o", "p"] {
            let p = app.create("c", original).await.unwrap();
            assert!(
                p.pseudonym_value.starts_with("new-"),
                "replica {name} used the deleted namespace's settings"
            );
            assert_ne!(p.pseudonym_value, old.pseudonym_value);
            let first = by_replica
                .entry(original)
                .or_insert_with(|| p.pseudonym_value.clone());
            assert_eq!(*first, p.pseudonym_value, "the replicas disagree");
        }
    }
    // A has the new namespace cached now; B deletes it: A must not write into
    // it (nor resurrect a pseudonym from a cache).
    delete(&b).await;
    for original in ["o", "q"] {
        let gone = a.create("c", original).await.unwrap_err();
        assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_never_stops_writes_to_the_others() {
    let (env, database) = backend_env(Backend::Postgres);
    let db = database.unwrap();
    let app = spawn_app_with(env).await;
    app.namespace("doomed", 5, 16).await;
    app.namespace("other", 5, 16).await;
    for i in 0..20 {
        app.create("doomed", &format!("d{i:02}")).await.unwrap();
    }
    let cluster = vfps_testkit::shared();
    // Freeze the delete half-way: another session holds one of the doomed rows,
    // so the delete waits with the namespace already locked.
    let blocker = {
        let db = db.clone();
        std::thread::spawn(move || {
            vfps_testkit::shared().psql(
                &db,
                "BEGIN; SELECT 1 FROM pseudonyms WHERE namespace = 'doomed' \
                 AND original_value = 'd07' FOR UPDATE; \
                 SELECT pg_sleep(4) AS holds_a_row; COMMIT;",
            )
        })
    };
    wait_for_statement(cluster, &db, "holds_a_row").await;
    let deleting = tokio::spawn({
        let mut client = app.namespaces.clone();
        async move {
            let mut r = Request::new(NamespaceServiceDeleteRequest {
                name: "doomed".into(),
            });
            r.set_timeout(Duration::from_secs(30));
            client.delete(r).await
        }
    });
    wait_for_statement(cluster, &db, "DELETE FROM pseudonyms").await;

    // The delete is in progress: other namespaces keep writing.
    for i in 0..20 {
        app.pseudonyms
            .clone()
            .create(create_request(
                "other",
                &format!("o{i}"),
                Duration::from_secs(1),
            ))
            .await
            .unwrap_or_else(|e| {
                panic!("a write to another namespace waited for the delete: {e:?}")
            });
    }
    // A Create into the doomed namespace waits for the delete and then finds it gone.
    let late = tokio::spawn({
        let mut client = app.pseudonyms.clone();
        async move {
            client
                .create(create_request("doomed", "late", Duration::from_secs(20)))
                .await
        }
    });
    blocker.join().unwrap().unwrap();
    deleting.await.unwrap().unwrap();
    let late = late.await.unwrap().unwrap_err();
    assert_eq!(late.code(), Code::NotFound, "{late:?}");
    assert!(
        committed(cluster, &db, "doomed").is_empty(),
        "orphans survived"
    );
    assert_eq!(committed(cluster, &db, "other").len(), 20);
}
