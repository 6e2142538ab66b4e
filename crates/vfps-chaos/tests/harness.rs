//! The harness proven against a real vfps (PostgreSQL from the test kit) and a
//! fake: each checker must fail when it should, and a healthy run must pass.

#![allow(clippy::unwrap_used)]

use std::{path::PathBuf, sync::Arc, time::Duration};

use vfps_chaos::{
    checker::{availability, Budgets, History, Property, Validity},
    config::{Limits, LoadConfig, Output, Service, Verification, Workload},
    history::{Calls, CallsReport, Ledger, Status, Timeline},
    mix::Mix,
    run,
    workload::{
        generator::{self, Schedule},
        Mixed,
    },
};
use vfps_client::{Client, Endpoints, RetryPolicy};
use vfps_server::{config::Flags, startup};

mod common;
use common::vfps_on_postgres;
use vfps_testkit::fake_vfps::{self as fake, Behaviour};

fn out_dir(name: &str) -> PathBuf {
    vfps_testkit::scratch_dir(name)
}

fn config(address: String, output_dir: PathBuf, load_seconds: u64) -> LoadConfig {
    LoadConfig {
        service: Service {
            address,
            namespace: "resilience".into(),
        },
        credentials: Default::default(),
        workload: Workload {
            rate_per_second: 50,
            load_seconds,
            call_deadline_seconds: 2.0,
            max_in_flight: 500,
            seed: Some(7),
            mix: "create=100".into(),
            job_rows: 0,
            privacy_probe: None,
            privacy_rounds_apart_seconds: 70,
            http_address: None,
            ui_address: None,
            ui_user: "admin".into(),
            ui_tests_dir: "tests/ui".into(),
        },
        limits: Limits {
            max_outage_seconds: 0,
            max_unavailable_seconds: 0.0,
        },
        verification: Verification {
            settle_seconds: 0,
            verify_concurrency: 16,
        },
        output: Output {
            output_dir,
            ledger_capacity: 0,
        },
    }
}

fn verdict(summary: &vfps_chaos::report::Summary, property: Property) -> Validity {
    summary
        .verdicts
        .iter()
        .find(|v| v.property == property)
        .unwrap()
        .validity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_run_against_a_healthy_server_passes() {
    let (server, _) = vfps_on_postgres().await;
    let dir = out_dir("clean");
    let summary = run::standalone(
        &config(format!("http://{}", server.grpc_addr), dir.clone(), 3),
        false,
    )
    .await
    .unwrap();
    assert!(summary.passed, "{summary:#?}");
    assert_eq!(summary.availability.offered, 150);
    assert_eq!(summary.availability.ok, 150);
    assert_eq!(summary.ledger_entries, 150);
    for file in [
        "load-timeline.csv",
        "ledger.jsonl",
        "summary.json",
        "junit.xml",
        "run.json",
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    assert!(!dir.join("failures.txt").exists());
    // What the window cost, by part: this process is the harness (the
    // server runs in it too), the test kit's PostgreSQL is PostgreSQL.
    use vfps_chaos::history::cpu::Part;
    let cpu = summary
        .cpu
        .clone()
        .expect("the load window's CPU was measured");
    assert!(cpu.seconds_of(Part::LoadGenerator) > 0.0, "{cpu:#?}");
    assert!(cpu.seconds_of(Part::Postgres) > 0.0, "{cpu:#?}");
    assert!(cpu.window_seconds > 1.0 && cpu.cores >= 1, "{cpu:#?}");
    // The run's two budgeted figures, each with its margin.
    assert_eq!(summary.margins.len(), 2, "{:#?}", summary.margins);
    // Every acknowledged Create carries when it was acknowledged.
    let acked = std::fs::read_to_string(dir.join("ledger.jsonl")).unwrap();
    assert!(
        acked.lines().all(|l| l.contains("\"acked_unix_ms\":")),
        "{acked}"
    );
    // A saved run can be re-checked.
    let again = run::check(&dir, None, None, 8, false).await.unwrap();
    assert!(again.passed);
    assert_eq!(again.cpu, summary.cpu, "the cost is kept with the run");
    // A ledger cut short (a full disk, a bad copy) lost acknowledged writes
    // from the record: the re-check fails instead of verifying what is left.
    let ledger = std::fs::read_to_string(dir.join("ledger.jsonl")).unwrap();
    let kept: String = ledger.lines().take(20).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("ledger.jsonl"), kept).unwrap();
    let cut = run::check(&dir, None, None, 8, false).await.unwrap();
    assert!(!cut.passed, "{cut:#?}");
    let guard = cut
        .verdicts
        .iter()
        .find(|v| v.property == Property::LedgerMatchesAcknowledged)
        .unwrap();
    assert_eq!(guard.validity, Validity::Invalid);
    assert!(guard.summary.contains("20 of 150"), "{guard:?}");
    // A line replaced by a copy of another: as many acknowledged lines, one
    // pair never verified.
    let mut lines: Vec<&str> = ledger.lines().collect();
    lines[51] = lines[50];
    std::fs::write(dir.join("ledger.jsonl"), lines.join("\n") + "\n").unwrap();
    let copied = run::check(&dir, None, None, 8, false).await.unwrap();
    let guard = copied
        .verdicts
        .iter()
        .find(|v| v.property == Property::LedgerMatchesAcknowledged)
        .unwrap();
    assert_eq!(guard.validity, Validity::Invalid, "{guard:?}");
    assert!(
        guard.summary.contains("149 of the 150 entries"),
        "{guard:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_deleted_during_the_load_violate_p2_and_p3_and_check_sees_it_again() {
    let (server, db) = vfps_on_postgres().await;
    let dir = out_dir("deleted");
    let cfg = config(format!("http://{}", server.grpc_addr), dir.clone(), 4);
    let deleter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        tokio::task::spawn_blocking(move || {
            vfps_testkit::shared()
                .psql(&db, "DELETE FROM pseudonyms WHERE original_value IN (SELECT original_value FROM pseudonyms ORDER BY created_at LIMIT 10)")
                .unwrap()
        })
        .await
        .unwrap()
    });
    let summary = run::standalone(&cfg, false).await.unwrap();
    deleter.await.unwrap();
    assert!(!summary.passed);
    assert_eq!(
        verdict(&summary, Property::PseudonymStability),
        Validity::Invalid
    );
    assert_eq!(
        verdict(&summary, Property::ReverseLookup),
        Validity::Invalid
    );
    let p2 = summary
        .verdicts
        .iter()
        .find(|v| v.property == Property::PseudonymStability)
        .unwrap();
    assert_eq!(p2.evidence.len(), 10, "each lost pair is named: {p2:?}");
    assert!(
        p2.evidence
            .iter()
            .all(|e| e.contains("sha256:") && !e.contains("rs-")),
        "evidence is redacted"
    );
    assert!(dir.join("failures.txt").exists());
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.contains("<failure"));
    let again = run::check(&dir, None, None, 8, false).await.unwrap();
    assert!(!again.passed, "a re-check of a broken run still fails");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_pseudonym_violates_p2() {
    let (server, db) = vfps_on_postgres().await;
    let dir = out_dir("rewritten");
    let mut cfg = config(format!("http://{}", server.grpc_addr), dir, 2);
    cfg.verification.settle_seconds = 2;
    let rewriter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        tokio::task::spawn_blocking(move || {
            vfps_testkit::shared()
                .psql(&db, "UPDATE pseudonyms SET pseudonym_value = 'rewritten-' || pseudonym_value WHERE original_value IN (SELECT original_value FROM pseudonyms LIMIT 3)")
                .unwrap()
        })
        .await
        .unwrap()
    });
    let summary = run::standalone(&cfg, false).await.unwrap();
    rewriter.await.unwrap();
    assert_eq!(
        verdict(&summary, Property::PseudonymStability),
        Validity::Invalid,
        "{summary:#?}"
    );
}

/// A server stopped for four seconds shows an outage of about that long: not
/// none, and not the whole load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_for_four_seconds_shows_an_outage_as_long_as_the_stop() {
    const DEADLINE_SECONDS: f64 = 0.5;
    let sqlite = vfps_testkit::scratch_dir("outage").join("vfps.sqlite");
    let vars = vec![("VFPS_SQLITE_PATH".to_owned(), sqlite.display().to_string())];
    let first = startup::spawn(vars.clone(), Flags::default())
        .await
        .unwrap();
    let port = first.grpc_addr.port();
    let dir = out_dir("outage");
    let mut cfg = config(format!("http://127.0.0.1:{port}"), dir, 10);
    cfg.workload.call_deadline_seconds = DEADLINE_SECONDS;
    cfg.limits.max_outage_seconds = 30;
    cfg.limits.max_unavailable_seconds = 1000.0;
    let restarter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let stopped = std::time::Instant::now();
        first.shutdown.cancel();
        first.handle.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let second = startup::spawn(
            vars,
            Flags {
                grpc_port: Some(port),
                ..Flags::default()
            },
        )
        .await
        .unwrap();
        (second, stopped.elapsed())
    });
    let summary = run::standalone(&cfg, false).await.unwrap();
    let (_second, stop) = restarter.await.unwrap();
    let outage = summary.availability.longest_outage_seconds;
    // An outage second is a whole second in which calls were offered and none
    // succeeded. A call offered within its deadline of the restart succeeds
    // (the client retries until its deadline), so the failing calls were
    // offered during `stop - deadline` (at least 3.5 s here): between
    // ceil(that) - 2 and floor(that) whole seconds, one more if reconnecting
    // after the restart takes a moment.
    let dead = stop.as_secs_f64() - DEADLINE_SECONDS;
    let low = (dead.ceil() as u64).saturating_sub(2);
    let high = dead.floor() as u64 + 1;
    assert!(low >= 2, "the stop was {stop:?}");
    assert!(
        (low..=high).contains(&outage),
        "stopped {stop:?}: expected {low}..={high} s, got {outage}"
    );
    let p1 = |max_outage_seconds| {
        let mut h = History::new(
            &[],
            50,
            Budgets {
                max_outage_seconds,
                max_unavailable_seconds: 1000.0,
            },
            &[],
            &[],
        );
        h.availability = summary.availability;
        availability::longest_outage(&h).validity
    };
    assert_eq!(p1(outage - 1), Validity::Invalid);
    assert_eq!(p1(outage + 1), Validity::Valid);
    let _ = std::fs::remove_file(sqlite);
}

/// Runs the generator alone (Creates only) against `addr`; returns the timeline
/// rows, the ledger and every answer.
async fn generate(
    addr: std::net::SocketAddr,
    rate: u32,
    seconds: u64,
    deadline: Duration,
    max_in_flight: usize,
) -> (
    Vec<vfps_chaos::history::Row>,
    Vec<vfps_chaos::history::Entry>,
    CallsReport,
) {
    let client = Client::new(
        Endpoints::parse(&format!("http://{addr}")).await.unwrap(),
        RetryPolicy::default(),
    );
    let dir = out_dir(&format!("gen-{}", addr.port()));
    std::fs::create_dir_all(&dir).unwrap();
    let ledger = Arc::new(Ledger::create(&dir.join("ledger.jsonl"), 0).unwrap());
    let timeline = Arc::new(Timeline::new(seconds));
    let schedule = Schedule {
        rate_per_second: rate,
        seconds,
        deadline,
        max_in_flight,
        mix: Mix::parse("create=100").unwrap(),
    };
    let calls = Arc::new(Calls::default());
    let workload = Mixed::new(
        client,
        "n".into(),
        1,
        ledger.clone(),
        calls.clone(),
        Default::default(),
    );
    generator::run(&schedule, workload, timeline.clone(), None).await;
    ledger.flush();
    (timeline.rows(), ledger.entries(), calls.report())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_is_never_retried_and_counts_as_failed() {
    let server = fake::start(Behaviour::Internal).await.unwrap();
    let (rows, _, calls) = generate(server.addr, 20, 2, Duration::from_secs(2), 100).await;
    let a = availability::of(&rows, 20);
    assert_eq!(a.offered, 40);
    assert_eq!(a.failed, 40);
    assert_eq!(
        server
            .counters
            .creates
            .load(std::sync::atomic::Ordering::Relaxed),
        40,
        "one attempt per call"
    );
    assert_eq!(calls.codes["create"].get("Internal"), Some(&40));
    assert_eq!(
        calls
            .findings_of(vfps_chaos::history::Broken::InnocentFailure)
            .count(),
        40,
        "an INTERNAL to a well-formed Create is an innocent failure (P5)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_past_the_deadline_is_a_failure_and_indeterminate() {
    let server = fake::start(Behaviour::Slow(Duration::from_secs(2)))
        .await
        .unwrap();
    let (rows, ledger, _) = generate(server.addr, 10, 1, Duration::from_millis(300), 100).await;
    let a = availability::of(&rows, 10);
    assert_eq!((a.ok, a.failed), (0, 10), "a slow answer is not a success");
    assert_eq!(ledger.len(), 10);
    assert!(ledger.iter().all(|e| e.status == Status::Indeterminate));
    assert!(
        ledger
            .iter()
            .all(|e| e.code.as_deref() == Some("DeadlineExceeded")),
        "the call's own deadline, whichever timer noticed it: {:?}",
        ledger.iter().map(|e| e.code.clone()).collect::<Vec<_>>()
    );
    assert!(
        rows[0].max_ms >= 300.0 && rows[0].max_ms < 1500.0,
        "latency is bounded by the deadline: {rows:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_in_flight_cap_sheds_and_warns() {
    let server = fake::start(Behaviour::Slow(Duration::from_millis(300)))
        .await
        .unwrap();
    let mut cfg = config(format!("http://{}", server.addr), out_dir("shed"), 2);
    cfg.workload.max_in_flight = 2;
    cfg.limits.max_outage_seconds = 30;
    cfg.limits.max_unavailable_seconds = 1000.0;
    let summary = run::standalone(&cfg, false).await.unwrap();
    let a = summary.availability;
    assert!(a.shed > 50, "{a:?}");
    assert!(summary
        .failures_by_code
        .get("SHED")
        .is_some_and(|n| *n == a.shed));
    assert!(
        summary.warnings.iter().any(|w| w.contains("shedding")),
        "{:?}",
        summary.warnings
    );
    assert!(
        (a.unavailable_seconds - (a.failed + a.shed) as f64 / 50.0).abs() < 1e-9,
        "shed counts as unavailable"
    );
}

#[test]
fn an_empty_run_with_nothing_reachable_exits_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args([
            "load",
            "--quiet",
            "--load-seconds",
            "1",
            "--settle-seconds",
            "0",
        ])
        .env("VFPS_GRPC_ADDRESS", "http://127.0.0.1:1")
        .env("RESILIENCE_OUTPUT_DIR", out_dir("empty"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(["load", "--rate-per-second", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("rate-per-second"));
}
