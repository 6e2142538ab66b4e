//! The capacity sweep against the fake vfps with a known ceiling: 10 ms of
//! service on 2 slots is 200 calls/s, so the knee must land below it and the
//! first step above it must break; a server already too slow at the first
//! step has no knee, and the binary says so with exit code 1.

#![allow(clippy::unwrap_used)]

use std::{process::Command, time::Duration};

use clap::Parser;
use vfps_chaos::capacity::{self, Breach, CapacityConfig, Stop, SweepReport};
use vfps_testkit::fake_vfps::{self as fake, Behaviour};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    capacity: CapacityConfig,
}

fn config(addr: std::net::SocketAddr, dir: &std::path::Path, args: &[&str]) -> CapacityConfig {
    let address = format!("http://{addr}");
    let output = dir.display().to_string();
    let mut line = vec![
        "x",
        "--address",
        &address,
        "--output-dir",
        &output,
        "--step-seconds",
        "1",
        "--seed",
        "7",
    ];
    line.extend_from_slice(args);
    Cli::parse_from(line).capacity
}

fn saved(dir: &std::path::Path) -> SweepReport {
    serde_json::from_str(&std::fs::read_to_string(dir.join("capacity.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knee_of_a_server_with_a_known_ceiling_lands_below_it() {
    // 2 slots × 10 ms: at most 200 calls/s.
    let server = fake::start(Behaviour::Capacity {
        service_time: Duration::from_millis(10),
        slots: 2,
    })
    .await
    .unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-knee");
    let cfg = config(
        server.addr,
        &dir,
        &[
            "--start-rate-per-second",
            "60",
            "--step-rate-per-second",
            "60",
            "--max-rate-per-second",
            "600",
            "--p99-target-ms",
            "100",
            "--call-deadline-seconds",
            "2",
            "--mix",
            "create=3,get=1",
        ],
    );
    let report = capacity::sweep(&cfg, true).await.unwrap();
    let rates: Vec<u32> = report.steps.iter().map(|s| s.offered_per_second).collect();
    // 180/s is 90 % of the ceiling; on a busy machine it may break, and the
    // knee is then 120/s — never 240/s or above, past the ceiling.
    let knee = report.knee_per_second.unwrap();
    assert!(
        (120..=180).contains(&knee),
        "knee {knee} outside 120..=180; steps {rates:?}"
    );
    let Some(Stop::Broke {
        offered_per_second: broke,
        breaches,
    }) = &report.stop
    else {
        panic!("the sweep did not stop at a broken step: {:?}", report.stop);
    };
    assert_eq!(*broke, knee + 60, "the sweep stops at the first break");
    assert_eq!(rates.last(), Some(broke), "and runs no step after it");
    assert!(breaches.contains(&Breach::Latency), "{breaches:?}");
    // Past the ceiling, what the service sustained is the ceiling.
    let last = report.steps.last().unwrap();
    if *broke == 240 {
        assert!(
            (170.0..=215.0).contains(&last.achieved_per_second),
            "achieved {} at 240/s offered, ceiling 200/s",
            last.achieved_per_second
        );
    }
    let k = report.knee.as_ref().unwrap();
    assert_eq!(k.failures(), 0);
    assert!(k.p99_ms.unwrap() <= 100.0);
    assert!(k.operations.contains_key("get"), "{:?}", k.operations);
    // What was printed is what was saved, with the chart beside it.
    assert_eq!(saved(&dir).knee_per_second, Some(knee));
    assert!(std::fs::read_to_string(dir.join("capacity.svg"))
        .unwrap()
        .contains(&format!("knee {knee}/s")));
    assert!(dir.join("capacity.png").exists());
    // Every step's seconds, one row each (1 s steps), the step in front.
    let timeline = std::fs::read_to_string(dir.join("capacity-timeline.csv")).unwrap();
    let lines: Vec<&str> = timeline.lines().collect();
    assert!(lines[0].starts_with("step,offered_per_second,second,offered,ok"));
    assert_eq!(lines.len(), 1 + report.steps.len(), "{timeline}");
    assert!(lines[1].starts_with("1,60,0,60,60,"), "{timeline}");
}

/// A service whose first 30 calls take 300 ms more (a cold start) breaks a
/// first step that starts cold; after the default warm-up (2 s at the first
/// step's rate, 120 calls) the same step holds, and the warm-up is reported
/// apart from the steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_up_keeps_a_cold_start_out_of_the_first_step() {
    let cold = || {
        fake::start(Behaviour::ColdCapacity {
            service_time: Duration::from_millis(10),
            slots: 2,
            cold_calls: 30,
            cold_time: Duration::from_millis(300),
        })
    };
    let args = [
        "--start-rate-per-second",
        "60",
        "--step-rate-per-second",
        "60",
        "--max-rate-per-second",
        "120",
        "--p99-target-ms",
        "100",
        "--call-deadline-seconds",
        "2",
    ];

    let server = cold().await.unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-cold");
    let mut without = args.to_vec();
    without.extend(["--warm-up-seconds", "0"]);
    let report = capacity::sweep(&config(server.addr, &dir, &without), false)
        .await
        .unwrap();
    assert_eq!(report.knee_per_second, None, "{:?}", report.steps);
    assert!(report.warm_up.is_none());
    assert!(
        report.steps[0].p99_ms.unwrap() > 100.0,
        "{:?}",
        report.steps
    );

    let server = cold().await.unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-warm");
    let report = capacity::sweep(&config(server.addr, &dir, &args), false)
        .await
        .unwrap();
    let warm_up = report.warm_up.as_ref().expect("the warm-up is reported");
    assert_eq!((warm_up.offered_per_second, warm_up.seconds), (60, 2));
    assert!(warm_up.p99_ms.unwrap() > 100.0, "{warm_up:?}");
    assert_eq!(report.knee_per_second, Some(120), "{:?}", report.steps);
    assert_eq!(report.steps.len(), 2, "the warm-up is no step");
    assert_eq!(saved(&dir).warm_up.map(|w| w.seconds), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_whose_first_step_is_past_the_ceiling_has_no_knee() {
    // One slot × 10 ms: 100 calls/s, and the sweep starts at 300.
    let server = fake::start(Behaviour::Capacity {
        service_time: Duration::from_millis(10),
        slots: 1,
    })
    .await
    .unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-none");
    let cfg = config(
        server.addr,
        &dir,
        &[
            "--start-rate-per-second",
            "300",
            "--p99-target-ms",
            "50",
            "--call-deadline-seconds",
            "1",
            "--warm-up-seconds",
            "0",
        ],
    );
    let report = capacity::sweep(&cfg, false).await.unwrap();
    assert_eq!(report.knee_per_second, None);
    assert_eq!(report.steps.len(), 1, "nothing runs after a broken step");
    assert!(report
        .summary()
        .contains("none — the first step, 300 calls/s"));
    assert_eq!(saved(&dir).knee_per_second, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_calls_break_a_step_however_fast_they_fail() {
    let server = fake::start(Behaviour::Internal).await.unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-internal");
    let cfg = config(server.addr, &dir, &["--start-rate-per-second", "50"]);
    let report = capacity::sweep(&cfg, false).await.unwrap();
    assert_eq!(report.knee_per_second, None);
    let first = &report.steps[0];
    assert_eq!(first.failed, 50);
    assert_eq!(first.failures_by_code.get("Internal"), Some(&50));
    assert_eq!(
        report.stop,
        Some(Stop::Broke {
            offered_per_second: 50,
            breaches: vec![Breach::Failures],
        })
    );
}

fn vfps_chaos(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(args)
        .env_remove("VFPS_GRPC_ADDRESS")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_exits_1_without_a_knee_and_2_for_a_bad_value_or_nothing_reachable() {
    let server = fake::start(Behaviour::Capacity {
        service_time: Duration::from_millis(10),
        slots: 1,
    })
    .await
    .unwrap();
    let dir = vfps_testkit::scratch_dir("capacity-cli");
    let address = format!("http://{}", server.addr);
    let output = dir.display().to_string();
    let common = [
        "capacity",
        "--output-dir",
        &output,
        "--step-seconds",
        "1",
        "--call-deadline-seconds",
        "1",
    ];
    let run = |extra: &[&str]| {
        let mut args = common.to_vec();
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            vfps_chaos(&args)
        })
    };

    let none = run(&[
        "--address",
        &address,
        "--start-rate-per-second",
        "300",
        "--p99-target-ms",
        "50",
        "--warm-up-seconds",
        "0",
    ])
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&none.stdout);
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("capacity knee: none"), "{stdout}");
    assert!(
        stderr.contains("capacity step 1/") && stderr.contains("p99") && stderr.contains("BROKE"),
        "{stderr}"
    );

    let bad = run(&["--address", &address, "--step-factor", "0.5"])
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--step-factor") && stderr.contains("0.5"),
        "{stderr}"
    );

    let nowhere = run(&["--address", "http://127.0.0.1:1"]).await.unwrap();
    let stderr = String::from_utf8_lossy(&nowhere.stderr);
    assert_eq!(nowhere.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
}
