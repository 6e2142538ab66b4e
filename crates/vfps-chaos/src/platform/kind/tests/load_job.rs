//! The load job: its window and deadline, the CSV jobs it submits, the chaos
//! objects on its clock, and how the run ends when it does not start or dies.

use super::*;

#[test]
fn the_job_runs_the_plans_load_window_with_its_deadline() {
    let plan = Plan::from_env("baseline,cnpg-primary-kill", Target::Kind, |k| match k {
        "DURATION_BASELINE" => Some("30".into()),
        "DURATION_CNPG_PRIMARY_KILL" => Some("100".into()),
        "LOAD_MARGIN_SECONDS" => Some("20".into()),
        _ => None,
    })
    .unwrap();
    let dir = std::env::temp_dir();
    let job = job::render_job(
        &std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap(),
        &plan,
        &load_config(&dir),
        "v9",
    )
    .unwrap();
    assert!(
        job.contains(r#"{name: RESILIENCE_LOAD_SECONDS, value: "150"}"#),
        "{job}"
    );
    assert!(
        job.contains("activeDeadlineSeconds: 1110"),
        "150 + 60 settle + 900"
    );
    assert!(job.contains("stress-test:v9"));
    assert!(
        job.contains(r#"{name: RESILIENCE_MIX, value: "create=60"#),
        "the Job runs the same mix: {job}"
    );
    // The local platform's MII side (P8), which the default mix leaves out,
    // and the FHIR calls through the Service (pod addresses change on a kill).
    assert!(
        job.contains(r#",mii=4,bundle=1,erase=2"}"#),
        "the Job speaks the MII interface: {job}"
    );
    assert!(
        job.contains(
            r#"{name: RESILIENCE_HTTP_ADDRESS, value: "http://vfps.vfps.svc.cluster.local:8080"}"#
        ),
        "{job}"
    );
    assert!(!job.contains("${"));
    let missing = job::render_job("x: ${NOT_A_VARIABLE}", &plan, &load_config(&dir), "v9");
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("${NOT_A_VARIABLE}"));
}

#[test]
fn the_job_submits_csv_jobs_when_the_plan_faults_their_store() {
    let template = std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap();
    let dir = std::env::temp_dir();
    let render = |list: &str, rows: u64| {
        let plan = Plan::from_env(list, Target::Kind, |_| None).unwrap();
        let mut load = load_config(&dir);
        load.workload.job_rows = rows;
        job::render_job(&template, &plan, &load, "v9").unwrap()
    };
    let rows = |n: u64| format!(r#"{{name: RESILIENCE_JOB_ROWS, value: "{n}"}}"#);
    let job = render("baseline,objects-node-kill", 0);
    assert!(job.contains(&rows(job::DEFAULT_JOB_ROWS)), "{job}");
    // The files go to the object store through presigned URLs naming its
    // Service; the HTTP address (the vfps Service's) is the FHIR calls'.
    assert!(
        job.contains(r#"value: "http://vfps.vfps.svc.cluster.local:8080"}"#),
        "{job}"
    );
    assert!(render("baseline,vfps-pod-kill", 0).contains(&rows(0)));
    assert!(
        render("baseline,vfps-pod-kill", 7).contains(&rows(7)),
        "RESILIENCE_JOB_ROWS as configured"
    );
    assert!(render("baseline,objects-node-kill", 9).contains(&rows(9)));
}

/// The `labelSelectors` blocks of a manifest, each as `k=v,…` sorted.
fn label_selectors(manifest: &str) -> Vec<String> {
    let lines: Vec<&str> = manifest.lines().collect();
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "labelSelectors:" {
            continue;
        }
        let indent = l.len() - l.trim_start().len();
        let mut labels: Vec<String> = lines[i + 1..]
            .iter()
            .take_while(|m| m.len() - m.trim_start().len() > indent)
            .filter_map(|m| m.trim().split_once(": "))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        found.push(labels.join(","));
    }
    found
}

#[test]
fn the_chaos_objects_select_the_pods_the_driver_watches() {
    let sorted = |selector: &str| {
        let mut labels: Vec<&str> = selector.split(',').collect();
        labels.sort();
        labels.join(",")
    };
    let mut seen = 0;
    for entry in std::fs::read_dir(assets().join("chaos")).unwrap() {
        let path = entry.unwrap().path();
        for selector in label_selectors(&std::fs::read_to_string(&path).unwrap()) {
            let expected = if selector.contains("app.kubernetes.io/name=vfps") {
                sorted(VFPS_PODS)
            } else if selector.contains("cnpg.io/instanceRole=primary") {
                sorted(PRIMARY_POD)
            } else if selector.contains("cnpg.io/instanceRole=replica") {
                sorted(assets::STANDBY_PODS)
            } else {
                sorted(assets::DB_PODS)
            };
            assert_eq!(selector, expected, "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 8, "{seen} selectors");
}

#[test]
fn the_partition_burst_comes_from_the_schedules_template() {
    let schedule =
        std::fs::read_to_string(assets().join("chaos/db-network-partition.yaml")).unwrap();
    let burst = partition_burst(&schedule, Duration::from_secs(20)).unwrap();
    assert!(
        burst.contains("kind: NetworkChaos") && burst.contains("name: db-network-partition-burst")
    );
    assert!(burst.contains("  action: partition\n") && burst.contains("  direction: to\n"));
    assert!(
        burst.contains("  duration: 50s\n"),
        "burst + 30 s as a dead man's switch: {burst}"
    );
    assert!(burst.contains("cnpg.io/cluster: vfps-db"));
    assert!(partition_burst(
        "kind: Schedule\nmetadata:\n  namespace: x\n",
        Duration::ZERO
    )
    .is_err());
    let kill = std::fs::read_to_string(assets().join("chaos/vfps-pod-kill.yaml")).unwrap();
    assert!(pod_kill_schedule(&kill, Duration::from_secs(7))
        .unwrap()
        .contains("schedule: \"@every 7s\""));
}

#[tokio::test]
async fn scenarios_put_chaos_on_the_jobs_clock_and_collect_attributes_it() {
    let dir = vfps_testkit::scratch_dir("kind-run");
    let d = driver(kube());
    objects::install(&d.kube).await;
    // Two seconds, so that second 1 lies well inside the window even when the
    // machine is busy.
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 2)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let load = load_config(&dir);
    let passed = d.scenarios(&plan, &knobs(), &load).await.unwrap();
    assert!(passed, "the Job completed");
    let timeline = std::fs::read_to_string(dir.join("chaos-timeline.csv")).unwrap();
    let events = crate::scenario::events::parse_chaos_csv(&timeline).unwrap();
    assert!(
        events[0].at_seconds >= 0.4,
        "the first event is on the Job's clock, which began 0.5 s before: {events:?}"
    );
    assert!(dir.join("loadgen-job.yaml").exists());

    // The fake Job never printed a timeline: collect fails the run and says why.
    let e = steps::collect(&d, &plan, &load).await.unwrap_err();
    assert!(
        e.to_string().contains("no timeline between the markers"),
        "{e}"
    );
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("no timeline"));

    // A log with a timeline and a summary: per-scenario verdicts and the report.
    let rows: Vec<crate::history::Row> = (0..3)
        .map(|s| crate::history::Row {
            offered: 10,
            ok: if s == 1 { 0 } else { 10 },
            failed: if s == 1 { 10 } else { 0 },
            mean_ms: 1.0,
            p50_ms: 1.0,
            p99_ms: 1.0,
            max_ms: 1.0,
            ..crate::history::Row::empty(s)
        })
        .collect();
    let summary = crate::report::Summary {
        passed: true,
        seed: 1,
        rate_per_second: 10,
        availability: crate::checker::availability::of(&rows, 10),
        verdicts: Vec::new(),
        failures_by_code: Default::default(),
        ledger_entries: 20,
        ledger_indeterminate: 0,
        max_dispatch_lag_ms: 0.1,
        warnings: Vec::new(),
        ..Default::default()
    };
    let log = format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n",
        crate::report::markers::BEGIN_MARKER,
        crate::report::markers::marker_timeline(&rows).trim_end(),
        crate::report::markers::END_MARKER,
        crate::report::markers::SUMMARY_BEGIN,
        serde_json::to_string(&summary).unwrap(),
        crate::report::markers::SUMMARY_END
    );
    let logged = driver(Kube::new(answering("logs", log), &assets()));
    let passed = steps::collect(&logged, &plan, &load).await.unwrap();
    assert!(
        !passed,
        "second 1 is an outage inside baseline, whose budget is 0 s"
    );
    let scenarios = std::fs::read_to_string(dir.join("scenarios.json")).unwrap();
    assert!(
        scenarios.contains("\"longest_outage_seconds\": 1"),
        "{scenarios}"
    );
    assert!(dir.join("report.html").exists() && dir.join("timeline.png").exists());
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("baseline"));
}

#[tokio::test]
async fn all_keeps_the_clusters_state_when_up_fails_and_always_deletes_the_cluster() {
    let dir = vfps_testkit::scratch_dir("kind-all");
    let no_cluster = |program: &str, args: &[&str]| {
        (program == "kind" && args.first() == Some(&"create")).then(|| {
            Err(anyhow::anyhow!(
                "ERROR: failed to create cluster: node(s) not ready"
            ))
        })
    };
    let d = driver(Kube::new(
        Overriding(FakeKubectl::new(), no_cluster),
        &assets(),
    ));
    let drive = crate::driver::DriveArgs {
        scenarios: Some("baseline".into()),
    };
    let (plan, knobs) = steps::plan(&drive, Target::Kind, None).unwrap();
    let e = steps::all(&d, &plan, &knobs, &load_config(&dir))
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("failed to create cluster"),
        "{e:#}"
    );
    assert!(dir.join("pods.txt").exists() && dir.join("events.txt").exists());
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("failed to create cluster"));
    let cmds = d.kube.runner.0.model().commands.clone();
    assert_eq!(
        cmds.last().map(String::as_str),
        Some("kind delete cluster --name vfps-ha"),
        "down runs last, whatever happened"
    );
    assert!(
        !cmds.iter().any(|c| c.contains("loadgen")),
        "no load without a cluster"
    );
}

#[tokio::test]
async fn a_job_that_never_starts_says_what_its_pod_is_waiting_for() {
    let pull_back_off = |_: &str, args: &[&str]| match args {
        ["logs", ..] => Some(Ok(String::new())),
        ["get", "job", ..] => Some(Ok(r#"{"status": {}}"#.into())),
        ["get", "pods", "-n", "vfps-loadgen", ..] => Some(Ok(serde_json::json!({"items": [{
            "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
                "reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"ghcr.io/miracum/vfps/stress-test:ci\""
            }}}]}
        }]})
        .to_string())),
        _ => None,
    };
    let mut k = Kube::new(Overriding(FakeKubectl::new(), pull_back_off), &assets());
    k.poll = Duration::from_millis(5);
    let e = job::wait_load_start(&k, Duration::from_millis(50))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("ImagePullBackOff") && e.contains("stress-test:ci"),
        "{e}"
    );
}

#[tokio::test]
async fn a_released_vfps_is_tested_with_the_checkouts_load_generator() {
    let k = kube();
    let args = KindArgs {
        image_tag: "1.2.3".into(),
        stress_test_tag: Some("ci".into()),
        ..kind_args()
    };
    install::up(&k, &args, None).await.unwrap();
    let cmds = k.runner.model().commands.clone();
    let saved: Vec<&String> = cmds
        .iter()
        .filter(|c| c.starts_with("docker image save"))
        .collect();
    assert!(
        saved
            .iter()
            .any(|c| c.ends_with("ghcr.io/miracum/vfps:1.2.3"))
            && saved
                .iter()
                .any(|c| c.ends_with("ghcr.io/miracum/vfps/stress-test:ci")),
        "{saved:#?}"
    );
    assert!(cmds.iter().any(|c| c.contains("image.tag=1.2.3")));
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 1)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let job = job::render_job(
        &std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap(),
        &plan,
        &load_config(&std::env::temp_dir()),
        args.stress_test_tag(),
    )
    .unwrap();
    assert!(
        job.contains("image: ghcr.io/miracum/vfps/stress-test:ci"),
        "{job}"
    );
}

#[tokio::test]
async fn a_load_generator_that_dies_ends_the_scenarios_at_once() {
    let dies = |_: &str, args: &[&str]| match args {
        ["logs", ..] => Some(Ok(format!(
            "----LOAD WINDOW START unix={:.3}----\nthread 'main' panicked at generator\n",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        ))),
        ["get", "job", ..] => Some(Ok(
            r#"{"status": {"conditions": [{"type": "Failed", "status": "True"}]}}"#.into(),
        )),
        _ => None,
    };
    let mut k = Kube::new(Overriding(FakeKubectl::new(), dies), &assets());
    k.poll = Duration::from_millis(5);
    objects::install(&k).await;
    let dir = vfps_testkit::scratch_dir("kind-dies");
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 60)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let started = std::time::Instant::now();
    let e = driver(k)
        .scenarios(&plan, &knobs(), &load_config(&dir))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not after the 60 s window"
    );
    assert!(
        e.contains("failed during the scenarios") && e.contains("panicked"),
        "{e}"
    );
    let timeline = std::fs::read_to_string(dir.join("chaos-timeline.csv")).unwrap();
    assert!(
        timeline.contains("the load generator Job failed"),
        "{timeline}"
    );
}
