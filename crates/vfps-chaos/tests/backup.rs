//! Continuous backup and point-in-time restore with the Barman cloud tools,
//! against a real PostgreSQL (the test kit's) and a real S3 store (one Garage
//! node): a populated database backed up, written to after the backup, and
//! restored into a fresh instance from the bucket alone — to the latest
//! archived point and to a time between two batches; and the restore's
//! refusals (an empty bucket, another cluster's bucket, a WAL gap).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vfps_chaos::backup::{
    restore::{restore, Instance},
    ArchiverStatus, Archiving, Bucket, Refusal, RestoreTo,
};
use vfps_testkit::{free_port, garage::Garage, scratch_dir, PgCluster};

fn bucket(garage: &Garage, cluster: &str) -> Bucket {
    Bucket {
        endpoint: garage.s3_url(),
        bucket: garage.bucket().to_owned(),
        region: garage.region().to_owned(),
        cluster: cluster.to_owned(),
        access_key: garage.access_key().to_owned(),
        secret_key: garage.secret_key().to_owned(),
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn owner() -> Option<String> {
    is_root().then(|| "postgres".to_owned())
}

/// A directory the server's user may own.
fn dir_for_postgres(name: &str) -> std::path::PathBuf {
    let dir = scratch_dir(name);
    if is_root() {
        let ok = std::process::Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    dir
}

/// Rows `from..to` of a table standing in for the mappings.
fn insert(pg: &PgCluster, from: u32, to: u32) {
    pg.psql(
        "postgres",
        &format!(
            "INSERT INTO mappings SELECT 'o' || g, 'p' || md5(g::text) FROM generate_series({from}, {to} - 1) g"
        ),
    )
    .unwrap();
}

/// The table's fingerprint: row count and a digest of every row in order.
const FINGERPRINT: &str =
    "SELECT count(*) || ':' || md5(coalesce(string_agg(o || '=' || p, ',' ORDER BY o), '')) FROM mappings";

/// Waits until the archiver has archived every segment up to the current one
/// (after a switch), so the bucket holds every commit so far.
async fn archive_everything(pg: &PgCluster) {
    let switched = pg
        .psql("postgres", "SELECT pg_walfile_name(pg_switch_wal())")
        .unwrap()
        .trim()
        .to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status =
            ArchiverStatus::parse(&pg.psql("postgres", ArchiverStatus::SQL).unwrap()).unwrap();
        assert!(
            !status.failing(),
            "archiving fails: {status:?}\n{}",
            pg.server_log()
        );
        if status.last_archived_wal.as_deref() >= Some(switched.as_str()) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "segment {switched} not archived in 60 s: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn instance(name: &str, pg: &PgCluster) -> Instance {
    let dir = dir_for_postgres(name);
    Instance {
        data_dir: dir.join("data"),
        socket_dir: dir.clone(),
        port: free_port().unwrap(),
        listen: String::new(),
        bindir: pg.bindir().to_owned(),
        run_as: owner(),
        recovery_timeout: Duration::from_secs(120),
    }
}

async fn stop(instance: &Instance) {
    let pg_ctl = instance.bindir.join("pg_ctl");
    let mut c = match &instance.run_as {
        Some(u) => {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", u, "--"]).arg(pg_ctl);
            c
        }
        None => std::process::Command::new(pg_ctl),
    };
    let _ = c
        .arg("-D")
        .arg(&instance.data_dir)
        .args(["-m", "immediate", "stop"])
        .output();
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh) and barman-cli-cloud (scripts/install-deps.sh); run by ./scripts/test.sh"]
async fn a_populated_database_is_restored_from_the_bucket_alone_to_the_latest_point_and_to_a_time()
{
    let garage = Garage::start().await;
    let ours = bucket(&garage, "vfps-test");

    // Nothing archived yet: refused as an empty bucket.
    let e = ours.plan(RestoreTo::Latest).await.unwrap_err();
    assert!(
        matches!(
            e.downcast_ref::<Refusal>(),
            Some(Refusal::EmptyBucket { .. })
        ),
        "{e:#}"
    );

    // The operator's command says the same, and exits 1 (refused), not 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(["backup", "plan", "--to", "latest"])
        .env("VFPS_BACKUP_ENDPOINT", garage.s3_url())
        .env("VFPS_BACKUP_BUCKET", garage.bucket())
        .env("VFPS_BACKUP_CLUSTER", "vfps-test")
        .env("VFPS_BACKUP_REGION", garage.region())
        .env("AWS_ACCESS_KEY_ID", garage.access_key())
        .env("AWS_SECRET_ACCESS_KEY", garage.secret_key())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("refused") && said.contains("is empty"),
        "{said}"
    );

    let credentials = dir_for_postgres("credentials");
    let env = ours
        .write_credentials(&credentials, owner().as_deref())
        .unwrap();
    let conf: String = ours
        .archive_settings(
            &env,
            Archiving {
                timeout: Duration::from_secs(5),
            },
        )
        .into_iter()
        .map(|(k, v)| format!("{k} = '{}'\n", v.replace('\'', "''")))
        .collect();
    let pg = PgCluster::start_with(&conf).unwrap();
    pg.psql(
        "postgres",
        "CREATE TABLE mappings (o text PRIMARY KEY, p text NOT NULL UNIQUE)",
    )
    .unwrap();
    insert(&pg, 0, 5000);
    let socket = pg.socket_dir().display().to_string();
    let backup_id = ours
        .base_backup(&socket, pg.port(), "postgres")
        .await
        .unwrap();
    // Written after the base backup: only the WAL archive has these.
    insert(&pg, 5000, 6000);
    archive_everything(&pg).await;
    let at_target = pg.psql("postgres", FINGERPRINT).unwrap();
    // A whole second between the target and the next batch's commits.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let target = now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    insert(&pg, 6000, 6500);
    archive_everything(&pg).await;
    let latest = pg.psql("postgres", FINGERPRINT).unwrap();
    assert_ne!(at_target, latest);

    // Another cluster's name in the same bucket: refused, naming ours.
    let theirs = bucket(&garage, "someone-else");
    let e = theirs.plan(RestoreTo::Latest).await.unwrap_err();
    let refusal = e.downcast_ref::<Refusal>();
    assert!(
        matches!(refusal, Some(Refusal::OtherCluster { .. })),
        "{e:#}"
    );
    assert!(e.to_string().contains("vfps-test"), "{e:#}");

    let to_latest = instance("latest", &pg);
    let restored = restore(&ours, RestoreTo::Latest, &to_latest, &credentials)
        .await
        .unwrap();
    assert_eq!(restored.plan.backup_id, backup_id);
    assert_eq!(
        to_latest.psql(FINGERPRINT).await.unwrap().trim(),
        latest.trim()
    );
    eprintln!("restore to latest took {:?}", restored.took);
    stop(&to_latest).await;

    let to_time = instance("time", &pg);
    restore(&ours, RestoreTo::Time(target), &to_time, &credentials)
        .await
        .unwrap();
    assert_eq!(
        to_time.psql(FINGERPRINT).await.unwrap().trim(),
        at_target.trim()
    );
    stop(&to_time).await;

    // Refused before anything is copied: a target after the last archived
    // commit (nothing is written now: recovery would end before reaching
    // it, after the data directory was filled) and one in the future.
    let e = ours.plan(RestoreTo::Time(now())).await.unwrap_err();
    assert!(
        matches!(
            e.downcast_ref::<Refusal>(),
            Some(Refusal::AfterLastCommit { .. })
        ),
        "{e:#}"
    );
    let e = ours.plan(RestoreTo::Time(now() + 3600)).await.unwrap_err();
    assert!(
        matches!(e.downcast_ref::<Refusal>(), Some(Refusal::Future { .. })),
        "{e:#}"
    );
    // A wrong bucket is a named refusal, not a traceback.
    let mut wrong = ours.clone();
    wrong.bucket = "no-such-bucket".into();
    let e = wrong.plan(RestoreTo::Latest).await.unwrap_err();
    assert!(
        matches!(e.downcast_ref::<Refusal>(), Some(Refusal::Bucket { .. }))
            && e.to_string().contains("no-such-bucket")
            && !e.to_string().contains("Traceback"),
        "{e:#}"
    );

    // A restore never overwrites: the used data directory is refused.
    let e = restore(&ours, RestoreTo::Latest, &to_time, &credentials)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e:#}");

    // A segment between the backup and the end of the archive lost: refused,
    // naming it, before anything is copied.
    let backup = ours
        .backups()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.backup_id == backup_id)
        .unwrap();
    let lost = delete_wal_after(&garage, "vfps-test", &backup.end_wal);
    let gap = instance("gap", &pg);
    let e = restore(&ours, RestoreTo::Latest, &gap, &credentials)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.downcast_ref::<Refusal>(),
            Some(Refusal::MissingWal { .. })
        ),
        "{e:#}"
    );
    assert!(e.to_string().contains(&lost), "{e:#}");
    assert!(
        std::fs::read_dir(&gap.data_dir).is_err(),
        "a refused restore copied something"
    );
}

/// Deletes the first archived segment after `after` from the bucket (with
/// the same boto3 the tools use); its name.
fn delete_wal_after(garage: &Garage, cluster: &str, after: &str) -> String {
    let script = r#"
import sys, boto3
from botocore.config import Config
endpoint, bucket, cluster, after = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
keys = sorted(o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=cluster + "/wals/") for o in p.get("Contents", []))
name = lambda k: k.rsplit("/", 1)[-1].removesuffix(".gz")
segments = [k for k in keys if len(name(k)) == 24 and name(k) > after]
victim = segments[0]
s3.delete_object(Bucket=bucket, Key=victim)
print(name(victim))
"#;
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            script,
            &garage.s3_url(),
            garage.bucket(),
            cluster,
            after,
        ])
        .env("AWS_ACCESS_KEY_ID", garage.access_key())
        .env("AWS_SECRET_ACCESS_KEY", garage.secret_key())
        .env("AWS_DEFAULT_REGION", garage.region())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh) and barman-cli-cloud (scripts/install-deps.sh); run by ./scripts/test.sh"]
async fn an_archiving_failure_shows_in_the_archivers_counters_and_nothing_is_skipped() {
    let garage = Garage::start().await;
    let mut wrong = bucket(&garage, "vfps-test");
    "not-the-secret".clone_into(&mut wrong.secret_key);
    let credentials = dir_for_postgres("wrong-credentials");
    let env = wrong
        .write_credentials(&credentials, owner().as_deref())
        .unwrap();
    let conf: String = wrong
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
    let failed = pg
        .psql("postgres", "SELECT pg_walfile_name(pg_switch_wal())")
        .unwrap()
        .trim()
        .to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let s = ArchiverStatus::parse(&pg.psql("postgres", ArchiverStatus::SQL).unwrap()).unwrap();
        if s.failed_count > 0 {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failure counted in 60 s: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(status.failing(), "{status:?}");
    assert_eq!(status.last_failed_wal.as_deref(), Some(failed.as_str()));
    // PostgreSQL keeps the segment and retries: once the key is right, the
    // same segment is archived — no gap.
    let right = bucket(&garage, "vfps-test");
    right
        .write_credentials(&credentials, owner().as_deref())
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let s = ArchiverStatus::parse(&pg.psql("postgres", ArchiverStatus::SQL).unwrap()).unwrap();
        if s.last_archived_wal.as_deref() >= Some(failed.as_str()) {
            assert!(!s.failing(), "{s:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the segment was not archived after the fix: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let catalog = right.catalog().await.unwrap();
    assert!(
        catalog.wals.iter().any(|w| w.starts_with(&failed)),
        "{failed} not in the bucket: {:?}",
        catalog.wals
    );
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh) and barman-cli-cloud (scripts/install-deps.sh); run by ./scripts/test.sh"]
async fn pruning_to_one_base_backup_keeps_the_newest_restorable_and_refuses_older_targets() {
    let garage = Garage::start().await;
    let ours = bucket(&garage, "vfps-prune");
    let credentials = dir_for_postgres("prune-credentials");
    let env = ours
        .write_credentials(&credentials, owner().as_deref())
        .unwrap();
    let conf: String = ours
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
    pg.psql(
        "postgres",
        "CREATE TABLE mappings (o text PRIMARY KEY, p text NOT NULL UNIQUE)",
    )
    .unwrap();
    insert(&pg, 0, 1000);
    let socket = pg.socket_dir().display().to_string();
    let first = ours
        .base_backup(&socket, pg.port(), "postgres")
        .await
        .unwrap();
    archive_everything(&pg).await;
    // Base backup ids are seconds: the second one must not share the first's.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let between = now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    insert(&pg, 1000, 2000);
    let second = ours
        .base_backup(&socket, pg.port(), "postgres")
        .await
        .unwrap();
    insert(&pg, 2000, 2500);
    archive_everything(&pg).await;
    let latest = pg.psql("postgres", FINGERPRINT).unwrap();
    assert!(ours.plan(RestoreTo::Time(between)).await.is_ok());

    ours.prune("1".parse().unwrap()).await.unwrap();
    let kept: Vec<String> = ours
        .backups()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.backup_id)
        .collect();
    assert_eq!(kept, vec![second.clone()], "the first was {first}");
    let e = ours.plan(RestoreTo::Time(between)).await.unwrap_err();
    assert!(
        matches!(
            e.downcast_ref::<Refusal>(),
            Some(Refusal::TargetBeforeFirstBackup { .. })
        ),
        "{e:#}"
    );
    let to_latest = instance("pruned", &pg);
    let restored = restore(&ours, RestoreTo::Latest, &to_latest, &credentials)
        .await
        .unwrap();
    assert_eq!(restored.plan.backup_id, second);
    assert_eq!(
        to_latest.psql(FINGERPRINT).await.unwrap().trim(),
        latest.trim()
    );
    stop(&to_latest).await;
}
