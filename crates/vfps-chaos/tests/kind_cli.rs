//! `vfps-chaos kind …` as a user runs it: the real binary and its child
//! processes, with `kind` and `kubectl` replaced by scripts on PATH (no cluster
//! can run here) that record what they were asked and answer like the real tools.

#![allow(clippy::unwrap_used)]

use std::{os::unix::fs::PermissionsExt, path::Path, process::Command};

fn tool(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn vfps_chaos(dir: &Path, args: &[&str]) -> std::process::Output {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(args)
        .env("PATH", path)
        .env(
            "VFPS_CHAOS_ASSETS",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/chaos/ha"),
        )
        .output()
        .unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    vfps_testkit::scratch_dir(name)
}

#[test]
fn down_deletes_the_named_cluster_through_kind() {
    let dir = scratch("down");
    let log = dir.join("calls");
    tool(&dir, "kind", &format!("echo \"$@\" >> {}", log.display()));
    let out = vfps_chaos(&dir, &["kind", "down", "--cluster-name", "ha-test"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        "delete cluster --name ha-test"
    );
}

#[test]
fn a_failing_tool_is_a_harness_failure_carrying_its_message() {
    let dir = scratch("fail");
    tool(
        &dir,
        "kind",
        "echo 'ERROR: failed to delete cluster: boom' >&2; exit 1",
    );
    // The earlier form, `--platform kind <step>`, still works.
    let out = vfps_chaos(&dir, &["--platform", "kind", "down"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kind delete cluster --name vfps-ha failed") && err.contains("boom"),
        "{err}"
    );
}

#[test]
fn collect_without_a_load_report_fails_the_run_and_says_why() {
    let dir = scratch("collect");
    // The Job's log has no timeline; every other query answers empty.
    tool(
        &dir,
        "kubectl",
        "case \"$1\" in logs) echo 'the generator crashed' ;; *) : ;; esac",
    );
    let out_dir = dir.join("run");
    let out = vfps_chaos(
        &dir,
        &["kind", "collect", "--output-dir", out_dir.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no timeline between the markers"));
    assert!(std::fs::read_to_string(out_dir.join("failures.txt"))
        .unwrap()
        .contains("no timeline"));
    assert_eq!(
        std::fs::read_to_string(out_dir.join("resilience.log"))
            .unwrap()
            .trim(),
        "the generator crashed"
    );
}

#[test]
fn an_unknown_scenario_is_refused_before_anything_runs() {
    let dir = scratch("plan");
    let log = dir.join("calls");
    tool(
        &dir,
        "kubectl",
        &format!("echo \"$@\" >> {}", log.display()),
    );
    let out = vfps_chaos(
        &dir,
        &["kind", "scenarios", "--scenarios", "baseline,pod-explode"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario \"pod-explode\""));
    assert!(!log.exists(), "no kubectl call was made");
}

#[test]
fn the_restore_drill_is_refused_locally_without_the_wal_archive_before_anything_runs() {
    let dir = scratch("drill-plan");
    let log = dir.join("calls");
    // Should the check regress, what a bring-up runs first is these fakes.
    for t in ["kubectl", "ip", "nft", "etcd", "haproxy", "chown", "sysctl"] {
        tool(&dir, t, &format!("echo {t} \"$@\" >> {}", log.display()));
    }
    let base = dir.join("base");
    let out = vfps_chaos(
        &dir,
        &[
            "local",
            "all",
            "--scenarios",
            "baseline,db-restore-drill",
            "--base",
            base.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs the WAL archive"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!log.exists(), "nothing was stood up");
    assert!(!base.exists(), "nothing was stood up");
}

#[test]
fn render_refuses_load_settings_the_job_could_not_run() {
    let dir = scratch("render");
    for bad in [
        ["--mix", "create=abc"],
        ["--call-deadline-seconds", "1e300"],
    ] {
        let out_dir = dir.join("out");
        let out = vfps_chaos(
            &dir,
            &[
                &["kind", "render", "--out", out_dir.to_str().unwrap()][..],
                &bad[..],
            ]
            .concat(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(!out_dir.join("loadgen-job.yaml").exists(), "{bad:?}");
    }
}

/// Every step of both platforms parses its flags (clap checks, in a debug
/// build, that no two flattened settings share a name): a clash would stop
/// `local all` before it ran anything (it did, once: the UI's folder).
#[test]
fn every_platform_step_has_flags_that_do_not_clash() {
    let dir = scratch("help");
    for platform in ["local", "kind"] {
        for step in ["all", "up", "scenarios", "collect", "down"] {
            let out = vfps_chaos(&dir, &[platform, step, "--help"]);
            assert!(
                out.status.success(),
                "{platform} {step} --help: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
