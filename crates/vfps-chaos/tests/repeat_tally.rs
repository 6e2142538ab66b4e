//! `scripts/repeat-tally.py`, the repeated series' tally: each failover
//! step's distribution and the targets, fed series that meet them and series
//! that miss them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command};

const HEADER: &str = "run  result scenario               failovers  longest-outage P2-changed P3-lost    seed                 fault-to-write-s";

/// A failover `fault`-relative: key expired, promoted, first write (`None`: not seen).
fn failover(scenario: &str, expired: f64, promoted: f64, write: Option<f64>) -> String {
    let fault = 23.0;
    let write = write.map_or("null".into(), |w| (fault + w).to_string());
    format!(
        r#"{{"scenario": "{scenario}", "fault": "f", "fault_seconds": {fault}, "leader_key_expired_seconds": {}, "promotion_started_seconds": {}, "promoted_seconds": {}, "standby_attached_seconds": null, "first_write_seconds": {write}, "promoted": "db-b"}}"#,
        fault + expired,
        fault + promoted - 0.1,
        fault + promoted,
    )
}

/// A series of runs, each with its failovers; answers the tally's exit code and output.
fn tally(name: &str, runs: &[Vec<String>], result: &str) -> (i32, String) {
    let dir = vfps_testkit::scratch_dir(name);
    let mut rows = vec![HEADER.to_owned()];
    for (i, failovers) in runs.iter().enumerate() {
        let run = dir.join(format!("run-{}", i + 1));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            run.join("summary.json"),
            format!(r#"{{"failovers": [{}]}}"#, failovers.join(",")),
        )
        .unwrap();
        for scenario in ["db-primary-kill", "db-primary-pause"] {
            rows.push(format!(
                "{:<4} {result:<6} {scenario:<22} 1          1s             0          0          42                   -",
                i + 1
            ));
        }
    }
    std::fs::write(dir.join("tally.txt"), rows.join("\n") + "\n").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/repeat-tally.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("total")
        .arg(&dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// Fails naming the first of `parts` the tally's output lacks.
fn assert_has(out: &str, parts: &[&str]) {
    for part in parts {
        assert!(out.contains(part), "no {part:?} in:\n{out}");
    }
}

/// A run's kill and pause, the fault to the first write as given.
fn run(kill: f64, pause: Option<f64>) -> Vec<String> {
    vec![
        failover("db-primary-kill", 4.9, kill - 0.1, Some(kill)),
        failover("db-primary-pause", 4.8, 6.9, pause),
    ]
}

#[test]
fn a_series_within_its_targets_passes_with_each_steps_distribution() {
    let (code, out) = tally(
        "tally-met",
        &[
            run(5.6, Some(8.4)),
            run(6.4, Some(9.2)),
            run(5.8, Some(8.8)),
        ],
        "PASS",
    );
    assert_eq!(code, 0, "{out}");
    assert_has(
        &out,
        &[
            "tally: 3/3 runs passed, 6 failovers",
            "fault to leader key expired            median   4.9 s, max   4.9 s over 3",
            "fault to first acknowledged write      median   5.8 s, max   6.4 s over 3",
            "fault to synchronous standby attached  not seen",
        ],
    );
    // A kill: TTL 5 s + 2 / + 4; a pause: Patroni's 2 s member check more.
    assert_has(
        &out,
        &[
            "target (TTL 5 s): median <= 7 s, max <= 9 s: met",
            "target (TTL 5 s): median <= 9 s, max <= 11 s: met",
        ],
    );
}

#[test]
fn a_kill_past_its_median_target_fails_the_tally() {
    let (code, out) = tally(
        "tally-kill",
        &[
            run(7.2, Some(8.4)),
            run(7.5, Some(8.6)),
            run(5.0, Some(8.8)),
        ],
        "PASS",
    );
    assert_eq!(code, 1, "{out}");
    assert_has(
        &out,
        &[
            "median <= 7 s, max <= 9 s: NOT MET",
            "targets missed: db-primary-kill",
        ],
    );
}

#[test]
fn one_pause_past_its_max_fails_the_tally() {
    let (code, out) = tally(
        "tally-pause",
        &[run(5.6, Some(8.4)), run(5.6, Some(11.3))],
        "PASS",
    );
    assert_eq!(code, 1, "{out}");
    assert_has(
        &out,
        &[
            "median <= 9 s, max <= 11 s: NOT MET",
            "targets missed: db-primary-pause",
        ],
    );
}

#[test]
fn a_failover_without_a_first_write_fails_the_tally() {
    let (code, out) = tally(
        "tally-unseen",
        &[run(5.6, Some(8.4)), run(5.6, None)],
        "PASS",
    );
    assert_eq!(code, 1, "{out}");
    assert_has(
        &out,
        &["over 1 (1 not seen)", "(1 failover without a write seen)"],
    );
}

#[test]
fn a_failed_run_fails_the_tally_even_within_targets() {
    let (code, out) = tally("tally-failed-run", &[run(5.6, Some(8.4))], "FAIL");
    assert_eq!(code, 1, "{out}");
    assert_has(
        &out,
        &[
            "tally: 0/1 runs passed",
            "1 run failed; targets missed: none",
        ],
    );
}

#[test]
fn a_folder_without_a_tally_is_named() {
    let dir = vfps_testkit::scratch_dir("tally-empty");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/repeat-tally.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("total")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no tally.txt in") && err.contains(&*dir.to_string_lossy()),
        "{err}"
    );
}
