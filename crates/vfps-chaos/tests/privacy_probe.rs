//! P10 end to end: the harness with its privacy probe against a real vfps
//! passes on what vfps does, and fails on the revealing self-test mode
//! (`VFPS_UNSAFE_REVEALING_PSEUDONYMS`): orders that follow the originals,
//! siblings made together. Each vfps is a process of its own (the mode is
//! process-wide), on an SQLite file, with CSV jobs on.

#![allow(clippy::unwrap_used)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use vfps_chaos::{
    checker::{Property, Validity},
    config::{Limits, LoadConfig, Output, Service, Verification, Workload},
    report::Summary,
    run,
};

/// The vfps binary beside this test's (`target/<profile>/vfps`).
fn vfps_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("vfps")
}

/// A vfps process, killed when dropped.
struct Vfps {
    child: Child,
    http: String,
    grpc: String,
}

impl Drop for Vfps {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve(revealing: bool) -> Vfps {
    let dir = vfps_testkit::scratch_dir(if revealing { "p10-revealing" } else { "p10" });
    let ports: Vec<u16> = (0..3).map(|_| vfps_testkit::free_port().unwrap()).collect();
    let child = Command::new(vfps_bin())
        .args(["serve", "--listen-address", "127.0.0.1"])
        .args(["--http-port", &ports[0].to_string()])
        .args(["--grpc-port", &ports[1].to_string()])
        .args(["--metrics-port", &ports[2].to_string()])
        .arg("--sqlite-path")
        .arg(dir.join("vfps.sqlite"))
        .env("VFPS_JOBS_DIR", dir.join("jobs"))
        .env("CsvProcessing__PollInterval", "100ms")
        .env(
            "VFPS_UNSAFE_REVEALING_PSEUDONYMS",
            if revealing { "true" } else { "false" },
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", vfps_bin().display()));
    let vfps = Vfps {
        child,
        http: format!("http://127.0.0.1:{}", ports[0]),
        grpc: format!("http://127.0.0.1:{}", ports[1]),
    };
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = client.get(format!("{}/readyz", vfps.http)).send().await {
            if r.status().is_success() {
                return vfps;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("vfps never became ready");
}

fn config(vfps: &Vfps, output_dir: PathBuf) -> LoadConfig {
    LoadConfig {
        service: Service {
            address: vfps.grpc.clone(),
            namespace: "p10".into(),
        },
        credentials: Default::default(),
        workload: Workload {
            rate_per_second: 40,
            load_seconds: 4,
            call_deadline_seconds: 2.0,
            max_in_flight: 500,
            seed: Some(10),
            mix: "create=90,list=10".into(),
            // Jobs on (none fits in the window): the probe's job runs.
            job_rows: 10,
            privacy_probe: Some(true),
            privacy_rounds_apart_seconds: 1,
            http_address: Some(vfps.http.clone()),
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

fn verdict(summary: &Summary, property: Property) -> &vfps_chaos::checker::Verdict {
    summary
        .verdicts
        .iter()
        .find(|v| v.property == property)
        .unwrap_or_else(|| panic!("no {property} verdict: {:#?}", summary.verdicts))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p10_passes_on_vfps_and_fails_on_the_revealing_mode() {
    let vfps = serve(false).await;
    let dir = vfps_testkit::scratch_dir("p10-run");
    let summary = run::standalone(&config(&vfps, dir.clone()), false)
        .await
        .unwrap();
    for property in [
        Property::PseudonymsTimeless,
        Property::PseudonymsUnordered,
        Property::SiblingsUnlinked,
    ] {
        let v = verdict(&summary, property);
        assert_eq!(v.validity, Validity::Valid, "{v:#?}");
    }
    let order = verdict(&summary, Property::PseudonymsUnordered);
    assert!(
        order.summary.contains("jobs 1, Bundles 2, List pages 5"),
        "{}",
        order.summary
    );
    // The samples are kept, and a saved run is judged again from them.
    assert!(dir.join("privacy.json").exists());
    let again = run::check(&dir, None, None, 8, false).await.unwrap();
    assert_eq!(
        verdict(&again, Property::PseudonymsUnordered).validity,
        Validity::Valid
    );
    drop(vfps);

    let revealing = serve(true).await;
    let summary = run::standalone(
        &config(&revealing, vfps_testkit::scratch_dir("p10-run-revealing")),
        false,
    )
    .await
    .unwrap();
    let order = verdict(&summary, Property::PseudonymsUnordered);
    assert_eq!(order.validity, Validity::Invalid, "{order:#?}");
    for what in ["List page", "transaction Bundle", "batch Bundle", "job"] {
        assert!(
            order.evidence.iter().any(|e| e.contains(what)),
            "{what}: {:#?}",
            order.evidence
        );
    }
    let siblings = verdict(&summary, Property::SiblingsUnlinked);
    assert_eq!(siblings.validity, Validity::Invalid, "{siblings:#?}");
    assert_eq!(siblings.evidence.len(), 2, "prefix and time: {siblings:#?}");
}
