//! The restore drill end to end on real parts, judged by P9: a vfps on a
//! test-kit PostgreSQL archiving to a real Garage takes acknowledged Creates
//! (recorded as a ledger), a base backup is taken, Creates go on, the
//! database and its storage are destroyed, a fresh instance is restored from
//! the bucket alone, the restore hold is written, a new vfps serves it, every
//! ledger entry is read back (a re-Create under the hold is a read), the
//! operator confirms, and a new write is acknowledged again. P9 passes with
//! the WAL replayed, and fails when the restore skips the WAL after the base
//! backup (the unsafe setting).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tonic::{transport::Channel, Code};
use vfps_chaos::{
    backup::{
        restore::{restore, Instance},
        ArchiverStatus, Archiving, Bucket, RestoreTo,
    },
    checker::{
        restore::{check, Drill, RestoreBudgets, Restored},
        Validity,
    },
    history::{Entry, Status},
};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest,
};
use vfps_server::{
    restore_cli::{run, RestoreAction},
    startup,
};
use vfps_testkit::{free_port, garage::Garage, scratch_dir, PgCluster};

mod common;

const NAMESPACE: &str = "drill";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

fn owner() -> Option<String> {
    is_root().then(|| "postgres".to_owned())
}

fn dir_for_postgres(name: &str) -> std::path::PathBuf {
    let dir = scratch_dir(name);
    if is_root() {
        assert!(std::process::Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status()
            .unwrap()
            .success());
    }
    dir
}

/// The drill's one clock: seconds since its start.
struct Clock(Instant, f64);

impl Clock {
    fn start() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        Clock(Instant::now(), wall)
    }
    fn now(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
    /// A wall-clock instant (seconds since the epoch) on this clock.
    fn of_wall(&self, epoch_seconds: f64) -> f64 {
        epoch_seconds - self.1
    }
}

async fn vfps(connection_string: String) -> (startup::Running, PseudonymServiceClient<Channel>) {
    let running = common::vfps_on(&connection_string).await;
    let channel = Channel::from_shared(format!("http://{}", running.grpc_addr))
        .unwrap()
        .connect_lazy();
    (running, PseudonymServiceClient::new(channel))
}

async fn create(
    client: &PseudonymServiceClient<Channel>,
    original: &str,
) -> Result<String, tonic::Status> {
    client
        .clone()
        .create(PseudonymServiceCreateRequest {
            namespace: NAMESPACE.into(),
            original_value: original.into(),
        })
        .await
        .map(|r| {
            r.into_inner()
                .pseudonym
                .map(|p| p.pseudonym_value)
                .unwrap_or_default()
        })
}

/// `n` acknowledged Creates, recorded in the ledger.
async fn write(
    client: &PseudonymServiceClient<Channel>,
    clock: &Clock,
    ledger: &mut Vec<Entry>,
    n: usize,
) {
    for _ in 0..n {
        let original = format!("subject-{}", ledger.len());
        let pseudonym = create(client, &original).await.unwrap();
        ledger.push(Entry {
            slot: ledger.len() as u64,
            second: clock.now() as u64,
            status: Status::Ok,
            original,
            pseudonym: Some(pseudonym),
            code: None,
            acked_unix_ms: Some(
                u64::try_from(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_millis(),
                )
                .unwrap(),
            ),
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn archive_everything(pg: &PgCluster) {
    let switched = pg
        .psql("postgres", "SELECT pg_walfile_name(pg_switch_wal())")
        .unwrap()
        .trim()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = ArchiverStatus::parse(&pg.psql("postgres", ArchiverStatus::SQL).unwrap()).unwrap();
        if s.last_archived_wal.as_deref() >= Some(switched.as_str()) {
            return;
        }
        assert!(Instant::now() < deadline, "{switched} not archived: {s:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What was lost, and what a restore has to work from.
struct Lost<'a> {
    bucket: &'a Bucket,
    credentials: &'a std::path::Path,
    /// The destroyed cluster (its binaries; its database's name and role).
    pg: &'a PgCluster,
    database: &'a str,
    clock: &'a Clock,
    destroyed_at: f64,
    ledger: &'a [Entry],
}

/// One restore of the destroyed database, judged by P9.
async fn restore_and_judge(to: RestoreTo, lost: &Lost<'_>) -> (Validity, String) {
    let Lost {
        bucket,
        credentials,
        pg,
        database,
        clock,
        destroyed_at,
        ledger,
    } = *lost;
    let dir = dir_for_postgres("restored");
    let instance = Instance {
        data_dir: dir.join("data"),
        socket_dir: dir.clone(),
        port: free_port().unwrap(),
        listen: "127.0.0.1".into(),
        bindir: pg.bindir().to_owned(),
        run_as: owner(),
        recovery_timeout: Duration::from_secs(120),
    };
    restore(bucket, to, &instance, credentials).await.unwrap();
    let conn = format!(
        "Host=127.0.0.1;Port={};Database={database};Username={database};Password=pw;Timeout=2;Command Timeout=10",
        instance.port
    );
    let store = common::store_of(&conn);
    run(
        &store,
        RestoreAction::Hold {
            restored_to: "drill".into(),
        },
    )
    .await
    .unwrap();
    // The last instant the restored database holds, on the drill's clock.
    let newest: f64 = instance
        .psql_in(
            database,
            "SELECT coalesce(extract(epoch FROM max(created_at)), 0) FROM pseudonyms",
        )
        .await
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (server, client) = vfps(conn).await;
    let mut restored = Vec::new();
    for e in ledger {
        restored.push(match create(&client, &e.original).await {
            Ok(p) => Restored::Kept(p),
            Err(s) if s.code() == Code::FailedPrecondition => Restored::Forgotten,
            Err(s) => Restored::Error(format!("{:?}", s.code())),
        });
    }
    run(&store, RestoreAction::Confirm).await.unwrap();
    create(&client, "after-the-restore").await.unwrap();
    let served_again_at = clock.now();
    server.shutdown.cancel();
    let _ = server.handle.await;
    let _ = std::process::Command::new(if is_root() { "runuser" } else { "env" })
        .args(if is_root() {
            vec!["-u", "postgres", "--"]
        } else {
            vec![]
        })
        .arg(pg.bindir().join("pg_ctl"))
        .arg("-D")
        .arg(&instance.data_dir)
        .args(["-m", "immediate", "stop"])
        .output();
    let drill = Drill {
        restore_point: clock.of_wall(newest) + 0.001,
        destroyed_at,
        origin_unix: clock.1,
        served_again_at: Some(served_again_at),
        budgets: RestoreBudgets {
            max_lost_writes: 20,
            max_lost_seconds: 3.0,
            max_rto_seconds: 120.0,
        },
    };
    let (verdict, measured) = check(ledger, &restored, &drill);
    eprintln!("{to:?}: {} ({measured:?})", verdict.summary);
    (verdict.validity, format!("{verdict:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Garage (scripts/install-garage.sh) and barman-cli-cloud (scripts/install-deps.sh); run by ./scripts/test.sh"]
async fn a_restore_drill_keeps_every_archived_write_and_fails_p9_without_the_wal() {
    let garage = Garage::start().await;
    let bucket = Bucket {
        endpoint: garage.s3_url(),
        bucket: garage.bucket().to_owned(),
        region: garage.region().to_owned(),
        cluster: "drill".into(),
        access_key: garage.access_key().to_owned(),
        secret_key: garage.secret_key().to_owned(),
    };
    let credentials = dir_for_postgres("drill-credentials");
    let env = bucket
        .write_credentials(&credentials, owner().as_deref())
        .unwrap();
    let conf: String = bucket
        .archive_settings(
            &env,
            Archiving {
                timeout: Duration::from_secs(1),
            },
        )
        .into_iter()
        .map(|(k, v)| format!("{k} = '{}'\n", v.replace('\'', "''")))
        .collect();
    let pg = PgCluster::start_with(&conf).unwrap();
    let db = pg.create_database().unwrap();
    let clock = Clock::start();
    let (server, client) = vfps(db.connection_string.clone()).await;
    NamespaceServiceClient::new(
        Channel::from_shared(format!("http://{}", server.grpc_addr))
            .unwrap()
            .connect_lazy(),
    )
    .create(NamespaceServiceCreateRequest {
        name: NAMESPACE.into(),
        pseudonym_generation_method: 1,
        pseudonym_length: 16,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ledger = Vec::new();
    write(&client, &clock, &mut ledger, 50).await;
    let socket = pg.socket_dir().display().to_string();
    bucket
        .base_backup(&socket, pg.port(), "postgres")
        .await
        .unwrap();
    // Written after the base backup: only the archived WAL keeps these.
    write(&client, &clock, &mut ledger, 100).await;
    archive_everything(&pg).await;
    // A few more, then every copy is lost at once.
    write(&client, &clock, &mut ledger, 5).await;
    server.shutdown.cancel();
    let _ = server.handle.await;
    pg.stop_server().unwrap();
    let destroyed_at = clock.now();
    std::fs::remove_dir_all(pg.data_dir()).unwrap();

    let lost = Lost {
        bucket: &bucket,
        credentials: &credentials,
        pg: &pg,
        database: &db.name,
        clock: &clock,
        destroyed_at,
        ledger: &ledger,
    };
    let (safe, evidence) = restore_and_judge(RestoreTo::Latest, &lost).await;
    assert_eq!(safe, Validity::Valid, "{evidence}");
    let (unsafe_, evidence) = restore_and_judge(RestoreTo::BackupOnly, &lost).await;
    assert_eq!(unsafe_, Validity::Invalid, "{evidence}");
    assert!(evidence.contains("RPO"), "{evidence}");
}
