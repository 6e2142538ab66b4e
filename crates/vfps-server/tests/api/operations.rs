//! Operating the server: metrics, readiness, shutdown, configuration errors, migrations.

use std::{process::Command, time::Duration};

use crate::helpers::{backend_env, spawn_app, spawn_app_with, Backend, ServerProcess};
use vfps_server::config::Flags;

async fn metrics_are_prometheus_text_with_real_histograms(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("m", 5, 16).await;
    for i in 0..3 {
        app.create("m", &format!("o{i}")).await.unwrap();
    }
    let _ = app.create("nope", "x").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = app.metrics_text().await;
        if text.contains(r#"vfps_pseudonyms{namespace="m"} 3"#) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pseudonym count never refreshed:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for needle in [
        r#"vfps_requests_total{code="OK",method="PseudonymService/Create",transport="grpc"} 3"#,
        r#"vfps_requests_total{code="NOT_FOUND",method="PseudonymService/Create",transport="grpc"} 1"#,
        r#"vfps_request_duration_seconds_bucket{method="PseudonymService/Create",transport="grpc",le="0.005"}"#,
        r#"vfps_store_operation_duration_seconds_bucket{operation="upsert_pseudonyms",le="+Inf"}"#,
        "vfps_create_batch_size_bucket",
        r#"vfps_db_pool_connections{state="idle"}"#,
        r#"vfps_db_pool_connections{state="in_use"}"#,
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    assert!(
        !text.contains("o1"),
        "metrics must never carry original values"
    );
}

crate::on_both_backends!(metrics_are_prometheus_text_with_real_histograms);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_calls_and_turns_not_ready_first() {
    let (mut env, database) = backend_env(Backend::Postgres);
    env.push(("VFPS_SHUTDOWN_PRE_STOP_DELAY".into(), "700ms".into()));
    let db = database.clone().unwrap();
    let app = spawn_app_with(env).await;
    app.namespace("n", 5, 16).await;
    let cluster = vfps_testkit::shared();

    // Hold a lock so Creates stay in flight.
    let locker = {
        let db = db.clone();
        std::thread::spawn(move || {
            vfps_testkit::shared()
                .psql(&db, "BEGIN; LOCK TABLE pseudonyms IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(2); COMMIT;")
                .unwrap()
        })
    };
    let locked = vfps_testkit::wait_for(Duration::from_secs(10), || {
        cluster
            .psql(&db, "SELECT count(*) FROM pg_locks WHERE relation = 'pseudonyms'::regclass AND granted AND mode = 'AccessExclusiveLock'")
            .is_ok_and(|n| n.trim() == "1")
    });
    assert!(locked);
    let calls: Vec<_> = (0..10)
        .map(|i| {
            let client = app.pseudonyms.clone();
            tokio::spawn(async move {
                let mut client = client;
                client
                    .create(vfps_proto::v1::PseudonymServiceCreateRequest {
                        namespace: "n".into(),
                        original_value: format!("in-flight-{i}"),
                    })
                    .await
            })
        })
        .collect();
    let waiting = vfps_testkit::wait_for(Duration::from_secs(10), || {
        cluster
            .psql(
                &db,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
            )
            .is_ok_and(|n| n.trim().parse::<i32>().unwrap_or(0) >= 1)
    });
    assert!(waiting, "Creates never reached the database");

    app.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 503, "not ready as soon as shutdown starts");

    for call in calls {
        let r = call.await.unwrap();
        assert!(r.is_ok(), "an in-flight call was cut off: {r:?}");
    }
    locker.join().unwrap();
    app.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero() {
    let (env, _) = backend_env(Backend::Sqlite);
    let mut p = ServerProcess::start(&env).await;
    p.signal("TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "vfps did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}

#[test]
fn bad_configuration_stops_start_up_naming_every_key_but_not_the_password() {
    let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .env(
            "ConnectionStrings__PostgreSQL",
            "Host=db;Port=seventy;Password=hunter2",
        )
        .env("VFPS_GRPC_PORT", "eighty")
        .env("Init__v1__Namespaces__0__Name", "x")
        .env("Init__v1__Namespaces__0__PseudonymGenerationMethod", "md5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in ["Port", "VFPS_GRPC_PORT", "PseudonymGenerationMethod"] {
        assert!(stderr.contains(key), "{key} missing from {stderr}");
    }
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// A flag means the same before and after the subcommand; before it, it was
/// silently dropped (and the default file used).
#[test]
fn flags_before_or_after_the_subcommand_are_the_same() {
    let dir = vfps_testkit::scratch_dir("flags");
    for (n, before) in [(0, true), (1, false)] {
        let file = dir.join(format!("f{n}.sqlite"));
        let file = file.to_str().unwrap();
        let args: Vec<&str> = if before {
            vec!["--sqlite-path", file, "tokens", "list"]
        } else {
            vec!["tokens", "list", "--sqlite-path", file]
        };
        let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
            .args(&args)
            .current_dir(&dir)
            .env_remove("VFPS_SQLITE_PATH")
            .env_remove("ConnectionStrings__PostgreSQL")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(std::path::Path::new(file).exists(), "{args:?} used {file}");
    }
    assert!(
        !dir.join("vfps.sqlite").exists(),
        "the default file was not used"
    );
}

/// Runs `vfps` with `args` on SQLite (no other store configured) until it
/// exits; one still running after 20 s is killed and fails the test.
fn vfps_on_sqlite(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(args)
        .env_remove("ConnectionStrings__PostgreSQL")
        .env_remove("VFPS_SQLITE_PATH")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = vfps_testkit::wait_for(Duration::from_secs(20), || {
        child.try_wait().is_ok_and(|s| s.is_some())
    });
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        exited,
        "vfps {args:?} still ran after 20 s: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Two servers on one SQLite file would each answer from caches the other's
/// deletes never reach: the second is refused, naming the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_sqlite_file_is_refused() {
    let (env, _) = backend_env(Backend::Sqlite);
    let file = env
        .iter()
        .find(|(k, _)| k == "VFPS_SQLITE_PATH")
        .map(|(_, v)| v.clone())
        .unwrap();
    let first = ServerProcess::start(&env).await;
    let second = tokio::task::spawn_blocking(move || {
        vfps_on_sqlite(
            &["--sqlite-path", &file, "--listen-address", "127.0.0.1"],
            &[
                ("VFPS_HTTP_PORT", "0"),
                ("VFPS_GRPC_PORT", "0"),
                ("VFPS_METRICS_PORT", "0"),
            ],
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("served by another vfps process")
            && stderr.contains(&format!("pid {}", first.child.id())),
        "{stderr}"
    );
    // The lock goes with the process: the next server starts.
    drop(first);
    let _next = ServerProcess::start(&env).await;
}

/// A file that cannot be used stops start-up with a message naming it.
#[test]
fn an_unusable_sqlite_setting_or_file_stops_start_up_naming_it() {
    let dir = vfps_testkit::scratch_dir("unusable");
    // Empty: a bad setting (exit 2), not a file named "".
    let out = vfps_on_sqlite(&["tokens", "list"], &[("VFPS_SQLITE_PATH", "")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("VFPS_SQLITE_PATH"), "{stderr}");
    // Not a database.
    let garbage = dir.join("garbage.sqlite");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let garbage = garbage.to_str().unwrap();
    let out = vfps_on_sqlite(&["tokens", "list", "--sqlite-path", garbage], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.matches(garbage).count(), 1, "said once: {stderr}");
    // With logging off, still said (as a plain line).
    let out = vfps_on_sqlite(
        &["tokens", "list", "--sqlite-path", garbage],
        &[("RUST_LOG", "off")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.matches(garbage).count(), 1, "said once: {stderr}");
    // Readable but not writable by the process (SQLite would open it read-only
    // and every write would fail): run as nobody on a root-owned 0444 file in
    // a directory nobody may write to (for the -wal and -shm files).
    let ro_dir = dir.join("ro");
    std::fs::create_dir(&ro_dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = ro_dir.join("vfps.sqlite");
    let file = file.to_str().unwrap();
    assert!(
        vfps_on_sqlite(&["tokens", "list", "--sqlite-path", file], &[])
            .status
            .success()
    );
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_vfps"))
        .args(["tokens", "list", "--sqlite-path", file])
        .env_remove("ConnectionStrings__PostgreSQL")
        .output()
        .expect("setpriv runs (the tests run as root)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(file) && stderr.contains("can only be read"),
        "{stderr}"
    );
}

/// A server process that cannot start is reported with its exit status and
/// its log at once, not after the readiness deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "VFPS_MAX_CALL_DEADLINE=\"banana\" is not valid")]
async fn a_server_process_that_cannot_start_is_reported_with_its_log() {
    let (mut env, _) = backend_env(Backend::Sqlite);
    env.push(("VFPS_MAX_CALL_DEADLINE".into(), "banana".into()));
    let log = vfps_testkit::scratch_dir("no-start").join("vfps.log");
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        ServerProcess::start_logging(&env, &log),
    )
    .await;
}

/// An internal error reaches the operator's log with its cause, not only the
/// caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_are_logged_with_their_cause() {
    let (env, db) = backend_env(Backend::Postgres);
    let log = vfps_testkit::scratch_dir("internal").join("vfps.log");
    let server = ServerProcess::start_logging(&env, &log).await;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/v1/namespaces", server.http))
        .json(&serde_json::json!({"name": "n", "pseudonymGenerationMethod": 5, "pseudonymLength": 16}))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success());
    // A schema the server does not expect: every namespace read fails.
    vfps_testkit::shared()
        .psql(
            &db.unwrap(),
            "ALTER TABLE namespaces RENAME COLUMN description TO renamed",
        )
        .unwrap();
    let r = http
        .get(format!("{}/v1/namespaces/n", server.http))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("internal error"))
        .unwrap_or_else(|| panic!("no internal error logged:\n{text}"));
    assert!(
        line.contains("ERROR")
            && line.contains("NamespaceService/Get")
            && line.contains("description"),
        "{line}"
    );
}

#[test]
fn migrate_is_idempotent_and_waits_for_the_database() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let connection_string = db.connection_string.clone();
    let migrate = move |wait: &str| {
        Command::new(env!("CARGO_BIN_EXE_vfps"))
            .args(["migrate", "--wait", wait])
            .env("ConnectionStrings__PostgreSQL", &connection_string)
            .output()
            .unwrap()
    };
    let check = |wait: &str| {
        Command::new(env!("CARGO_BIN_EXE_vfps"))
            .args(["migrate", "--check", "--wait", wait])
            .env("ConnectionStrings__PostgreSQL", &db.connection_string)
            .output()
            .unwrap()
    };
    assert!(
        !check("0s").status.success(),
        "--check fails before the migrations ran"
    );
    assert!(migrate("0s").status.success());
    assert!(check("0s").status.success(), "--check passes once they ran");
    assert!(migrate("0s").status.success(), "a second run is a no-op");
    let tables = cluster
        .psql(&db.name, "SELECT string_agg(tablename || ':' || tableowner, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
        .unwrap();
    assert_eq!(
        tables.trim(),
        format!(
            "access_tokens:{0},csv_jobs:{0},multi_pseudonyms:{0},namespace_keys:{0},namespaces:{0},pseudonyms:{0},ui_session_ends:{0},vfps_restore_holds:{0},vfps_schema_migrations:{0}",
            db.name
        ),
        "owned by the non-superuser role"
    );

    cluster.stop_server().unwrap();
    let failed = migrate("0s");
    assert!(
        !failed.status.success(),
        "no database and no wait must fail"
    );
    let waiting = std::thread::spawn(move || migrate("30s"));
    std::thread::sleep(Duration::from_millis(1500));
    cluster.start_server().unwrap();
    let out = waiting.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_never_contain_originals_or_pseudonyms() {
    // At the most verbose level, on both backends: the PostgreSQL client logs
    // every statement's parameters at debug.
    for backend in [Backend::Sqlite, Backend::Postgres] {
        logs_of_a_backend_never_contain_originals_or_pseudonyms(backend).await;
    }
}

async fn logs_of_a_backend_never_contain_originals_or_pseudonyms(backend: Backend) {
    let (mut env, _) = backend_env(backend);
    env.push(("RUST_LOG".into(), "trace".into()));
    let log = vfps_testkit::scratch_dir("log").join("vfps.log");
    let mut server = ServerProcess::start_logging(&env, &log).await;
    let http = reqwest::Client::new();
    let base = server.http.clone();
    http.post(format!("{base}/v1/namespaces"))
        .json(&serde_json::json!({"name": "n", "pseudonymGenerationMethod": 5, "pseudonymLength": 24}))
        .send()
        .await
        .unwrap();
    let p: serde_json::Value = http
        .post(format!("{base}/v1/namespaces/n/pseudonyms"))
        .json(&serde_json::json!({"originalValue": "very-secret-original"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pseudonym = p["pseudonym"]["pseudonymValue"]
        .as_str()
        .unwrap()
        .to_owned();
    let _ = http
        .get(format!("{base}/v1/namespaces/n/pseudonyms/{pseudonym}"))
        .send()
        .await;
    let _ = http
        .get(format!(
            "{base}/v1/namespaces/n/pseudonyms/unknown-pseudonym-value"
        ))
        .send()
        .await;
    server.signal("TERM");
    let _ = server.child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains("namespace created"),
        "the log was captured: {text}"
    );
    for secret in [
        "very-secret-original",
        pseudonym.as_str(),
        "unknown-pseudonym-value",
    ] {
        assert!(
            !text.contains(secret),
            "{secret} leaked into the log:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pseudonym_cache_answers_repeated_creates_without_the_database() {
    for cached in [false, true] {
        let (mut env, database) = backend_env(Backend::Postgres);
        if cached {
            env.push((
                "Pseudonymization__Caching__Pseudonyms__IsEnabled".into(),
                "true".into(),
            ));
        }
        let db = database.unwrap();
        let app = spawn_app_with(env).await;
        app.namespace("c", 5, 32).await;
        let first = app.create("c", "o1").await.unwrap().pseudonym_value;
        // Behind the replica's back: the stored pair is gone.
        vfps_testkit::shared()
            .psql(&db, "DELETE FROM pseudonyms")
            .unwrap();
        let second = app.create("c", "o1").await.unwrap().pseudonym_value;
        let metrics = app.metrics_text().await;
        if cached {
            assert_eq!(first, second, "answered from the cache");
            assert!(
                metrics.contains(r#"vfps_pseudonym_cache_requests_total{result="hit"} 1"#),
                "{metrics}"
            );
        } else {
            assert_ne!(first, second, "without the cache the database decides");
            assert!(!metrics.contains("vfps_pseudonym_cache_requests_total{"));
        }
        // Deleting the namespace on this replica forgets its cached pseudonyms.
        app.namespaces
            .clone()
            .delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name: "c".into() })
            .await
            .unwrap();
        app.namespace("c", 5, 32).await;
        let third = app.create("c", "o1").await.unwrap().pseudonym_value;
        assert_ne!(third, first, "a re-created namespace starts empty");
        app.shutdown.cancel();
    }
}

/// A server started on a PostgreSQL database nobody migrated (no
/// `ForceRunDatabaseMigrations`, no `vfps migrate`) is not ready and says what
/// to run, and a call's error names it too; once migrated, it becomes ready
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_database_keeps_the_server_unready_and_says_how_to_migrate() {
    let db = vfps_testkit::shared()
        .create_database()
        .expect("test database");
    let env = vec![(
        "ConnectionStrings__PostgreSQL".to_owned(),
        db.connection_string.clone(),
    )];
    let running = vfps_server::startup::spawn(env, Flags::default())
        .await
        .expect("starts without the schema");
    let http = format!("http://{}", running.http_addr);
    let client = reqwest::Client::new();
    let readyz = || async {
        let r = client.get(format!("{http}/readyz")).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    };
    // Long enough for the monitor's first round trips.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, body) = readyz().await;
    assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("vfps migrate"), "{body}");

    let created = client
        .post(format!("{http}/v1/namespaces"))
        .json(&serde_json::json!({
            "name": "unmigrated",
            "pseudonymGenerationMethod": "PSEUDONYM_GENERATION_METHOD_SECURE_RANDOM_BASE64URL_ENCODED",
            "pseudonymLength": 16
        }))
        .send()
        .await
        .unwrap();
    assert!(!created.status().is_success());
    let body = created.text().await.unwrap();
    assert!(body.contains("vfps migrate"), "{body}");

    let migrated = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["migrate", "--wait", "10s"])
        .env("ConnectionStrings__PostgreSQL", &db.connection_string)
        .output()
        .unwrap();
    assert!(migrated.status.success());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = readyz().await;
        if status.is_success() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still not ready after the migration: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown.cancel();
    let _ = running.handle.await;
}
