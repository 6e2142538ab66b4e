//! `vfps-chaos drill-client`, the restore drill's client as the kind
//! driver's Job runs it, against a running vfps on a test-kit PostgreSQL:
//! its load in a namespace of its own, the restore hold seen (a fresh
//! original refused), every ledger entry read back, the confirmation, the
//! first new write, and the redacted report the driver parses and judges by
//! P9 (`platform::kind::drill::judge_report`). The database is not destroyed
//! here (tests/restore_drill.rs restores one from a bucket): what the client
//! is tested on is its part of the protocol. With every write kept P9 holds;
//! with acknowledged writes removed before the hold it fails. The client's
//! output names no original and no pseudonym.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::io::{AsyncBufReadExt, BufReader};
use vfps_chaos::{
    checker::{restore::Restored, Validity, Verdict},
    drill::{self, ClientTimes, ReadBack, READ_BACK_DONE},
    history::Status,
    platform::kind::drill::judge_report,
    report::markers::LOAD_START_PREFIX,
    scenario::drill::DrillPlan,
};
use vfps_server::restore_cli::{run, RestoreAction};
use vfps_testkit::{scratch_dir, PgCluster};

mod common;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The drill's load window, seconds.
const LOAD_SECONDS: &str = "4";

/// What one drill left: its report, P9's verdict, the client's whole output,
/// and every original and pseudonym its namespace holds.
struct Drilled {
    times: ClientTimes,
    reads: Vec<ReadBack>,
    verdict: Verdict,
    output: String,
    values: Vec<String>,
    destroyed_unix: f64,
}

/// Collects a child's stream into `into`, line by line, until its end.
fn collect(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    into: Arc<Mutex<String>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let mut s = into.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    })
}

/// Waits (up to a minute) until the client has printed `marker`.
async fn printed(stdout: &Mutex<String>, marker: &str, output: &dyn Fn() -> String) {
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while !stdout.lock().unwrap().contains(marker) {
        assert!(
            tokio::time::Instant::now() < until,
            "the client did not print {marker:?}: {}",
            output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the client against a vfps; once its load window is over, removes
/// the `lose` newest acknowledged rows of its namespace (a restore that lost
/// them), writes the restore hold, confirms once the client has read back.
async fn drill(name: &str, lose: usize) -> Drilled {
    let pg = PgCluster::start().unwrap();
    let db = pg.create_database().unwrap();
    let running = common::vfps_on(&db.connection_string).await;
    let store = common::store_of(&db.connection_string);
    let out_dir = scratch_dir(name);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .arg("drill-client")
        .env_clear()
        .env("VFPS_GRPC_ADDRESS", format!("http://{}", running.grpc_addr))
        .env("RESILIENCE_NAMESPACE", "drill")
        .env("RESILIENCE_RATE_PER_SECOND", "20")
        .env("RESILIENCE_SEED", "4242")
        .env("RESILIENCE_OUTPUT_DIR", &out_dir)
        .env("DURATION_DB_RESTORE_DRILL", LOAD_SECONDS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let streams = [
        collect(child.stdout.take().unwrap(), stdout.clone()),
        collect(child.stderr.take().unwrap(), stderr.clone()),
    ];
    let output = || format!("{}{}", stdout.lock().unwrap(), stderr.lock().unwrap());

    // The load window (from the client's mark of its start), then what a
    // restore would leave. The client's load ends on its own; it reports
    // being done only once it has seen the hold as well.
    printed(&stdout, LOAD_START_PREFIX, &output).await;
    let window = LOAD_SECONDS.parse::<f64>().unwrap() + 1.5;
    tokio::time::sleep(Duration::from_secs_f64(window)).await;
    let destroyed_unix = unix_now();
    let namespace = "namespace LIKE 'drill-restore-drill-%'";
    if lose > 0 {
        let deleted = pg
            .psql(
                &db.name,
                &format!(
                    "WITH gone AS (DELETE FROM pseudonyms WHERE (namespace, original_value) IN \
                     (SELECT namespace, original_value FROM pseudonyms WHERE {namespace} \
                      AND original_value NOT LIKE 'hold-probe-%' ORDER BY created_at DESC LIMIT {lose}) \
                     RETURNING 1) SELECT count(*) FROM gone"
                ),
            )
            .unwrap();
        assert_eq!(deleted.trim(), lose.to_string());
    }
    run(
        &store,
        RestoreAction::Hold {
            restored_to: "drill".into(),
        },
    )
    .await
    .unwrap();
    // The client reads back once it is refused a fresh original; then the
    // operator confirms.
    printed(&stdout, READ_BACK_DONE, &output).await;
    run(&store, RestoreAction::Confirm).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the client did not end after the confirmation")
        .unwrap();
    // The streams' last lines: both end with the process.
    for s in streams {
        tokio::time::timeout(Duration::from_secs(10), s)
            .await
            .expect("the client's output did not end")
            .unwrap();
    }
    assert!(status.success(), "{status}: {}", output());
    let (times, reads) = drill::parse_report(&stdout.lock().unwrap())
        .expect("no report")
        .unwrap();
    let plan = DrillPlan::from_env(&|k| {
        (k == "DURATION_DB_RESTORE_DRILL").then(|| LOAD_SECONDS.to_owned())
    })
    .unwrap();
    // Nothing acknowledged before the hold may be missing: the restore point
    // is the moment the rows were removed.
    let (verdict, _) = judge_report(
        &plan,
        &times,
        &reads,
        0.0,
        0.0,
        destroyed_unix,
        destroyed_unix,
    );
    let values = pg
        .psql(
            &db.name,
            &format!("SELECT original_value || E'\\n' || pseudonym_value FROM pseudonyms WHERE {namespace}"),
        )
        .unwrap()
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect();
    running.shutdown.cancel();
    let _ = running.handle.await;
    Drilled {
        times,
        reads,
        verdict,
        output: output(),
        values,
        destroyed_unix,
    }
}

fn acknowledged(d: &Drilled) -> usize {
    d.reads
        .iter()
        .filter(|r| r.entry.status == Status::Ok)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL's binaries (the test kit's cluster); run by ./scripts/test.sh"]
async fn the_drill_client_reads_every_write_back_under_the_hold_and_p9_holds() {
    let d = drill("drill-client-kept", 0).await;
    let t = d.times;
    assert!(
        t.start_unix < t.held_unix
            && t.held_unix <= t.read_back_unix
            && t.read_back_unix <= t.served_again_unix,
        "{t:?}"
    );
    assert!(
        t.held_unix >= d.destroyed_unix,
        "the hold was seen before it was written: {t:?}"
    );
    assert!(
        acknowledged(&d) >= 20,
        "{} acknowledged: {}",
        acknowledged(&d),
        d.output
    );
    for r in d.reads.iter().filter(|r| r.entry.status == Status::Ok) {
        assert!(
            matches!(&r.restored, Restored::Kept(p) if Some(p) == r.entry.pseudonym.as_ref()),
            "{r:?}"
        );
    }
    assert_eq!(d.verdict.validity, Validity::Valid, "{:?}", d.verdict);
    // Originals and pseudonyms are personal data: the report carries digests.
    assert!(!d.values.is_empty());
    for v in &d.values {
        assert!(
            !d.output.contains(v.as_str()),
            "the client's output names {v:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL's binaries (the test kit's cluster); run by ./scripts/test.sh"]
async fn acknowledged_writes_missing_under_the_hold_fail_p9() {
    let d = drill("drill-client-lost", 3).await;
    let forgotten = d
        .reads
        .iter()
        .filter(|r| r.entry.status == Status::Ok && r.restored == Restored::Forgotten)
        .count();
    assert_eq!(forgotten, 3, "{:?}", d.reads);
    assert_eq!(d.verdict.validity, Validity::Invalid, "{:?}", d.verdict);
    for v in &d.values {
        assert!(
            !d.output.contains(v.as_str()),
            "the client's output names {v:?}"
        );
    }
}
