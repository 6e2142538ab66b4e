//! `vfps-chaos --platform kind`: up, scenarios, collect, down on a kind cluster
//! with CloudNativePG and Chaos Mesh; `render` writes the manifests the driver
//! applies, for offline validation.
//!
//! The load runs in the cluster (the `stress-test` image as a Job, reaching the
//! replicas through the headless Service); the scenarios run here. The Job prints
//! the wall-clock instant its load window began, and the driver puts every chaos
//! event on that clock, so failures are attributed per scenario as on the local
//! platform (kind nodes share this machine's clock).

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;

use crate::{
    config::LoadConfig,
    drive::{self, DriveArgs},
    nemesis::{self, Knobs, Recorder},
    platform::{
        kind::{self, Kube, Runner, LOADGEN_JOB, LOADGEN_NAMESPACE, NAMESPACE},
        Target,
    },
    report,
    run::{harness, HarnessError},
    scenario::Plan,
};

/// Settings of a kind run beyond the load's.
#[derive(Debug, Clone, clap::Args)]
pub struct KindArgs {
    /// Name of the kind cluster.
    #[arg(long, env = "CLUSTER_NAME", default_value = "vfps-ha")]
    pub cluster_name: String,
    /// Tag of the vfps image under test (`ghcr.io/miracum/vfps`).
    #[arg(long, env = "IMAGE_TAG", default_value = "ci")]
    pub image_tag: String,
    /// Tag of the load generator image (`ghcr.io/miracum/vfps/stress-test`); default:
    /// the vfps image's. A released vfps is tested with the checkout's generator,
    /// which speaks this driver's protocol (the load window's start marker).
    #[arg(long, env = "STRESS_TEST_TAG")]
    pub stress_test_tag: Option<String>,
    /// The Kubernetes chaos assets (kind-config, cnpg-cluster, values, Job, chaos/).
    #[arg(long, env = "VFPS_CHAOS_ASSETS", default_value = "tests/chaos/ha")]
    pub assets: PathBuf,
    /// The Helm chart of vfps.
    #[arg(long, env = "VFPS_CHART", default_value = "charts/vfps")]
    pub chart: PathBuf,
}

impl KindArgs {
    pub fn stress_test_tag(&self) -> &str {
        self.stress_test_tag.as_deref().unwrap_or(&self.image_tag)
    }
}

pub const IMAGE: &str = "ghcr.io/miracum/vfps";
pub const STRESS_TEST_IMAGE: &str = "ghcr.io/miracum/vfps/stress-test";
/// Beyond load + settle: verification of every ledger entry, and slack.
const JOB_DEADLINE_MARGIN_SECONDS: u64 = 900;

fn k8s(e: anyhow::Error) -> HarnessError {
    harness(format!("{e:#}"))
}

/// The variables of `loadgen-job.yaml`: the load window is the plan's, the
/// deadline is load + settle + margin.
pub fn job_variables(
    plan: &Plan,
    load: &LoadConfig,
    stress_test_tag: &str,
) -> Vec<(String, String)> {
    let load_seconds = plan.load_seconds();
    let deadline = load_seconds + load.settle_seconds + JOB_DEADLINE_MARGIN_SECONDS;
    [
        ("STRESS_TEST_TAG", stress_test_tag.to_owned()),
        ("LOADGEN_DEADLINE_SECONDS", deadline.to_string()),
        ("RESILIENCE_LOAD_SECONDS", load_seconds.to_string()),
        (
            "RESILIENCE_RATE_PER_SECOND",
            load.rate_per_second.to_string(),
        ),
        ("RESILIENCE_SETTLE_SECONDS", load.settle_seconds.to_string()),
        (
            "RESILIENCE_CALL_DEADLINE_SECONDS",
            load.call_deadline_seconds.to_string(),
        ),
        ("RESILIENCE_MAX_IN_FLIGHT", load.max_in_flight.to_string()),
        (
            "RESILIENCE_MAX_OUTAGE_SECONDS",
            load.max_outage_seconds.to_string(),
        ),
        (
            "RESILIENCE_MAX_UNAVAILABLE_SECONDS",
            load.max_unavailable_seconds.to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

pub fn render_job(
    template: &str,
    plan: &Plan,
    load: &LoadConfig,
    stress_test_tag: &str,
) -> Result<String, HarnessError> {
    let vars = job_variables(plan, load, stress_test_tag);
    kind::render(template, |k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
    .map_err(|e| harness(format!("loadgen-job.yaml: {e}")))
}

fn read_limit(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/fs/inotify/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `up`: the cluster, the operators, the images, the database, vfps — to a
/// steady state (3 ready instances, a completed rollout) before any chaos.
pub async fn up<R: Runner>(
    kube: &Kube<R>,
    args: &KindArgs,
    limits: Option<(u64, u64)>,
) -> Result<(), HarnessError> {
    if let Some(problem) = limits.and_then(|(i, w)| kind::inotify_problem(i, w)) {
        return Err(HarnessError(problem));
    }
    let started = std::time::Instant::now();
    let step = |what: &str| eprintln!("up: {what} ({:.0} s)", started.elapsed().as_secs_f64());
    let config = args.assets.join("kind-config.yaml").display().to_string();
    let existing = kube.run("kind", &["get", "clusters"]).await.map_err(k8s)?;
    if existing.lines().any(|l| l.trim() == args.cluster_name) {
        step("the kind cluster exists; reusing it");
    } else {
        kube.run(
            "kind",
            &[
                "create",
                "cluster",
                "--name",
                &args.cluster_name,
                "--config",
                &config,
                "--wait",
                "120s",
            ],
        )
        .await
        .map_err(k8s)?;
        step("kind cluster created (1 control-plane, 3 zone-labelled workers)");
    }
    let images = [
        format!("{IMAGE}:{}", args.image_tag),
        format!("{STRESS_TEST_IMAGE}:{}", args.stress_test_tag()),
    ];
    let mut load = vec!["load", "docker-image", "--name", &args.cluster_name];
    load.extend(images.iter().map(String::as_str));
    kube.run("kind", &load).await.map_err(k8s)?;
    step("images loaded");
    for (name, url) in [
        ("cnpg", "https://cloudnative-pg.github.io/charts"),
        ("chaos-mesh", "https://charts.chaos-mesh.org"),
    ] {
        kube.run("helm", &["repo", "add", "--force-update", name, url])
            .await
            .map_err(k8s)?;
    }
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "cnpg",
            "cnpg/cloudnative-pg",
            "-n",
            "cnpg-system",
            "--create-namespace",
            "--wait",
        ],
    )
    .await
    .map_err(k8s)?;
    step("CloudNativePG installed");
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "chaos-mesh",
            "chaos-mesh/chaos-mesh",
            "-n",
            "chaos-mesh",
            "--create-namespace",
            "--wait",
            "--set",
            "dashboard.create=false",
            "--set",
            "chaosDaemon.runtime=containerd",
            "--set",
            "chaosDaemon.socketPath=/run/containerd/containerd.sock",
        ],
    )
    .await
    .map_err(k8s)?;
    step("Chaos Mesh installed");
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
    ))
    .await
    .map_err(k8s)?;
    kube.apply(&kube.asset("cnpg-cluster.yaml").map_err(k8s)?)
        .await
        .map_err(k8s)?;
    kube.wait_db_healthy(Duration::from_secs(900))
        .await
        .map_err(k8s)?;
    step("CloudNativePG: 3 ready instances");
    let values = args
        .assets
        .join("vfps-ha-values.yaml")
        .display()
        .to_string();
    let chart = args.chart.display().to_string();
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "vfps",
            &chart,
            "-n",
            NAMESPACE,
            "-f",
            &values,
            "--set",
            &format!("image.tag={}", args.image_tag),
            "--wait",
            "--timeout",
            "10m",
        ],
    )
    .await
    .map_err(k8s)?;
    kube.kubectl(&[
        "rollout",
        "status",
        &format!("deployment/{}", kind::DEPLOYMENT),
        "-n",
        NAMESPACE,
        "--timeout=300s",
    ])
    .await
    .map_err(k8s)?;
    kube.wait_replicas_ready(Duration::from_secs(300))
        .await
        .map_err(k8s)?;
    step("steady state: 3 ready database instances, vfps rolled out");
    Ok(())
}

/// The Job's log, or an empty string when there is none (yet).
async fn job_log<R: Runner>(kube: &Kube<R>) -> String {
    kube.kubectl(&[
        "logs",
        &format!("job/{LOADGEN_JOB}"),
        "-n",
        LOADGEN_NAMESPACE,
    ])
    .await
    .unwrap_or_default()
}

/// Whether the Job finished: `Some(true)` succeeded, `Some(false)` failed.
async fn job_finished<R: Runner>(kube: &Kube<R>) -> anyhow::Result<Option<bool>> {
    let out = kube
        .kubectl(&[
            "get",
            "job",
            LOADGEN_JOB,
            "-n",
            LOADGEN_NAMESPACE,
            "-o",
            "json",
        ])
        .await?;
    let job: serde_json::Value = serde_json::from_str(&out).context("the Job is not JSON")?;
    let conditions = job["status"]["conditions"].as_array().cloned();
    let has = |t: &str| {
        conditions
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    Ok(if has("Complete") {
        Some(true)
    } else if has("Failed") {
        Some(false)
    } else {
        None
    })
}

/// Why the Job's pod is not running, as Kubernetes says it (e.g. `ImagePullBackOff`).
async fn job_pod_state<R: Runner>(kube: &Kube<R>) -> String {
    let Ok(out) = kube
        .kubectl(&[
            "get",
            "pods",
            "-n",
            LOADGEN_NAMESPACE,
            "-l",
            "app.kubernetes.io/name=vfps-loadgen",
            "-o",
            "json",
        ])
        .await
    else {
        return "unknown".into();
    };
    let pods: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let states: Vec<String> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let waiting = &p["status"]["containerStatuses"][0]["state"]["waiting"];
            match waiting["reason"].as_str() {
                Some(reason) => format!(
                    "{reason}: {}",
                    waiting["message"].as_str().unwrap_or_default()
                ),
                None => p["status"]["phase"]
                    .as_str()
                    .unwrap_or("unknown")
                    .to_owned(),
            }
        })
        .collect();
    if states.is_empty() {
        "no pod".into()
    } else {
        states.join("; ")
    }
}

/// Waits for the Job's load window to begin; returns its wall-clock start.
pub(crate) async fn wait_load_start<R: Runner>(
    kube: &Kube<R>,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let log = job_log(kube).await;
        if let Some(t) = report::extract_load_start(&log) {
            return Ok(t);
        }
        if job_finished(kube).await.ok().flatten().is_some() {
            anyhow::bail!(
                "the load generator ended before its load window began:\n{}",
                tail(&log, 20)
            );
        }
        if tokio::time::Instant::now() >= until {
            anyhow::bail!(
                "the load generator did not start its load window within {timeout:?} (its pod: {})",
                job_pod_state(kube).await
            );
        }
        tokio::time::sleep(kube.poll).await;
    }
}

/// How often the load generator's progress is echoed while the driver waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Runs `work`, echoing the load generator's latest progress line (`load t=…`,
/// `settle`, `verify …`) every [`PROGRESS_EVERY`]: the Job runs for many minutes.
async fn with_progress<R: Runner, T>(
    kube: &Kube<R>,
    work: impl std::future::Future<Output = T>,
) -> T {
    let progress = async {
        loop {
            tokio::time::sleep(PROGRESS_EVERY).await;
            let log = job_log(kube).await;
            if let Some(line) = log.lines().rev().find(|l| {
                l.starts_with("load t=") || l.starts_with("settle") || l.starts_with("verify")
            }) {
                eprintln!("loadgen: {line}");
            }
        }
    };
    tokio::select! {
        out = work => out,
        () = progress => unreachable!("the progress loop never ends"),
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `scenarios`: the load Job, then every planned scenario on the Job's clock;
/// waits for the Job's verification. Returns whether the Job passed.
pub async fn scenarios<R: Runner>(
    kube: &Kube<R>,
    (plan, knobs): &(Plan, Knobs),
    args: &KindArgs,
    load: &LoadConfig,
) -> Result<bool, HarnessError> {
    load.validate().map_err(HarnessError)?;
    let dir = load.output_dir.clone();
    drive::write_plan(&dir, plan)?;
    eprintln!(
        "{} scenarios: load window {} s (sum of durations + {} s margin)",
        plan.scenarios.len(),
        plan.load_seconds(),
        plan.margin_seconds
    );
    // Preconditions: a healthy cluster before the first fault.
    kube.wait_db_healthy(kube.heal_timeout).await.map_err(k8s)?;
    kube.wait_replicas_ready(kube.heal_timeout)
        .await
        .map_err(k8s)?;
    let job = render_job(
        &kube.asset("loadgen-job.yaml").map_err(k8s)?,
        plan,
        load,
        args.stress_test_tag(),
    )?;
    std::fs::write(dir.join("loadgen-job.yaml"), &job).map_err(harness)?;
    kube.kubectl(&[
        "delete",
        "job",
        LOADGEN_JOB,
        "-n",
        LOADGEN_NAMESPACE,
        "--ignore-not-found",
        "--wait=true",
    ])
    .await
    .map_err(k8s)?;
    kube.apply(&job).await.map_err(k8s)?;
    let started_unix = wait_load_start(kube, Duration::from_secs(600))
        .await
        .map_err(k8s)?;
    let behind = Duration::from_secs_f64((unix_now() - started_unix).max(0.0));
    let origin = tokio::time::Instant::now()
        .checked_sub(behind)
        .unwrap_or_else(tokio::time::Instant::now);
    eprintln!("load window began {:.1} s ago", behind.as_secs_f64());
    let rec = Recorder::new(origin);
    // A load generator that dies ends the run: chaos without load proves nothing.
    let generator_failed = async {
        loop {
            tokio::time::sleep(kube.poll).await;
            if let Ok(Some(false)) = job_finished(kube).await {
                break;
            }
        }
    };
    let result = tokio::select! {
        r = with_progress(kube, nemesis::run(kube, plan, knobs, &rec)) => r,
        () = generator_failed => {
            rec.event("harness", "the load generator Job failed").await;
            Err(anyhow::anyhow!(
                "the load generator Job failed during the scenarios:\n{}",
                tail(&job_log(kube).await, 20)
            ))
        }
    };
    // A partition or a schedule must never outlive the run.
    if result.is_err() {
        cleanup_chaos(kube).await;
    }
    drive::write_chaos(
        &dir,
        &rec.events().await,
        &result,
        rec.elapsed().as_secs_f64(),
    )?;
    let finish_timeout = Duration::from_secs(
        plan.load_seconds() + load.settle_seconds + JOB_DEADLINE_MARGIN_SECONDS,
    );
    let until = tokio::time::Instant::now() + finish_timeout;
    let passed = with_progress(kube, async {
        loop {
            match job_finished(kube).await {
                Ok(Some(ok)) => break ok,
                Ok(None) | Err(_) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(kube.poll).await;
                }
                Ok(None) | Err(_) => {
                    eprintln!("the load generator Job did not finish within {finish_timeout:?}");
                    break false;
                }
            }
        }
    })
    .await;
    std::fs::write(dir.join("resilience.log"), job_log(kube).await).map_err(harness)?;
    if let Err(e) = result {
        return Err(harness(format!("{e:#}")));
    }
    Ok(passed)
}

/// Removes every chaos object the scenarios may have left.
async fn cleanup_chaos<R: Runner>(kube: &Kube<R>) {
    for asset in [
        "chaos/vfps-pod-kill.yaml",
        "chaos/cnpg-primary-kill.yaml",
        "chaos/db-network-partition.yaml",
    ] {
        if let Ok(m) = kube.asset(asset) {
            let _ = kube.delete(&m).await;
        }
    }
    let _ = nemesis::Platform::heal_partition(kube).await;
}

/// Best-effort capture of one command's output into the run directory.
async fn capture<R: Runner>(kube: &Kube<R>, dir: &Path, file: &str, args: &[&str]) {
    let text = kube
        .kubectl(args)
        .await
        .unwrap_or_else(|e| format!("{e:#}"));
    let _ = std::fs::write(dir.join(file), text);
}

/// The cluster's state and logs into the run directory, best effort: pods,
/// events, the CNPG status, instance and vfps logs, chaos objects, a cluster dump.
pub async fn capture_state<R: Runner>(kube: &Kube<R>, dir: &Path) {
    for (file, args) in [
        ("pods.txt", vec!["get", "pods", "-A", "-o", "wide"]),
        (
            "events.txt",
            vec!["get", "events", "-A", "--sort-by=.lastTimestamp"],
        ),
        (
            "cnpg-cluster.yaml",
            vec![
                "get",
                "cluster",
                kind::CNPG_CLUSTER,
                "-n",
                NAMESPACE,
                "-o",
                "yaml",
            ],
        ),
        (
            "cnpg-instances.log",
            vec![
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                "cnpg.io/cluster=vfps-db",
                "--all-containers",
                "--prefix",
                "--tail=-1",
            ],
        ),
        (
            "vfps-api.log",
            vec![
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                "app.kubernetes.io/name=vfps",
                "--all-containers",
                "--prefix",
                "--tail=-1",
            ],
        ),
        (
            "chaos-objects.yaml",
            vec![
                "get",
                "schedules,podchaos,networkchaos",
                "-n",
                NAMESPACE,
                "-o",
                "yaml",
            ],
        ),
    ] {
        capture(kube, dir, file, &args).await;
    }
    let dump = dir.join("cluster-dump").display().to_string();
    let _ = kube
        .kubectl(&[
            "cluster-info",
            "dump",
            "--all-namespaces",
            &format!("--output-directory={dump}"),
        ])
        .await;
    // With the cnpg kubectl plugin installed: its support bundle, the first thing
    // to open after a P2 or P3 violation.
    let report = dir.join("cnpg-report.zip").display().to_string();
    let _ = kube
        .kubectl(&[
            "cnpg",
            "report",
            "cluster",
            kind::CNPG_CLUSTER,
            "-n",
            NAMESPACE,
            "-f",
            &report,
        ])
        .await;
}

/// `collect`: the Job's log and what it reported (a missing timeline fails the
/// run), the cluster's state and logs, per-scenario verdicts, the report.
pub async fn collect<R: Runner>(
    kube: &Kube<R>,
    plan: &Plan,
    load: &LoadConfig,
) -> Result<bool, HarnessError> {
    let dir = load.output_dir.clone();
    std::fs::create_dir_all(&dir).map_err(harness)?;
    let mut log = job_log(kube).await;
    if log.is_empty() {
        log = std::fs::read_to_string(dir.join("resilience.log")).unwrap_or_default();
    }
    std::fs::write(dir.join("resilience.log"), &log).map_err(harness)?;
    capture_state(kube, &dir).await;
    let Some(timeline) = report::extract_timeline(&log) else {
        let why =
            "no timeline between the markers in resilience.log: the load generator did not report";
        let _ = std::fs::write(dir.join("failures.txt"), format!("{why}\n"));
        return Err(HarnessError(why.into()));
    };
    std::fs::write(dir.join("load-timeline.csv"), timeline).map_err(harness)?;
    let summary = match report::extract_summary(&log) {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(HarnessError(e)),
        None => {
            let why =
                "no summary in resilience.log: the load generator did not finish verification";
            let _ = std::fs::write(dir.join("failures.txt"), format!("{why}\n"));
            return Err(HarnessError(why.into()));
        }
    };
    report::write(&dir, &summary).map_err(harness)?;
    if !dir.join("chaos.json").exists() {
        return Err(HarnessError(
            "no chaos.json: `scenarios` did not run for this run directory".into(),
        ));
    }
    drive::finish(&dir, plan, summary.rate_per_second, plan.load_seconds())
}

/// `down`: deletes the kind cluster.
pub async fn down<R: Runner>(kube: &Kube<R>, args: &KindArgs) -> Result<(), HarnessError> {
    kube.run("kind", &["delete", "cluster", "--name", &args.cluster_name])
        .await
        .map(|_| ())
        .map_err(k8s)
}

/// `all` = up, scenarios, collect, down; down runs whatever happened.
pub async fn all<R: Runner>(
    kube: &Kube<R>,
    drive_args: &DriveArgs,
    args: &KindArgs,
    load: &LoadConfig,
    inotify: Option<(u64, u64)>,
) -> Result<bool, HarnessError> {
    let planned = drive::plan(drive_args, Target::Kind)?;
    let result = async {
        if let Err(e) = up(kube, args, inotify).await {
            // What the cluster looked like when it did not come up.
            let _ = std::fs::create_dir_all(&load.output_dir);
            capture_state(kube, &load.output_dir).await;
            return Err(e);
        }
        match scenarios(kube, &planned, args, load).await {
            Ok(_) => collect(kube, &planned.0, load).await,
            Err(e) => {
                let _ = collect(kube, &planned.0, load).await;
                Err(e)
            }
        }
    }
    .await;
    if let Err(e) = down(kube, args).await {
        eprintln!("down: {e}");
    }
    if let Err(e) = &result {
        // The report issue of a red scheduled run quotes failures.txt.
        use std::io::Write;
        let _ = std::fs::create_dir_all(&load.output_dir);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(load.output_dir.join("failures.txt"))
        {
            let _ = writeln!(f, "harness failure: {e}");
        }
    }
    result
}

/// This machine's inotify limits (instances, watches).
pub fn inotify_limits() -> Option<(u64, u64)> {
    // Where there is no /proc/sys/fs/inotify (not Linux: Docker Desktop runs kind
    // in its own VM), there is nothing to check here.
    Some((
        read_limit("max_user_instances")?,
        read_limit("max_user_watches")?,
    ))
}

/// `render`: the manifests the driver applies, with this run's settings, for
/// validation without a cluster (`scripts/validate-k8s.sh`).
pub fn render(
    drive_args: &DriveArgs,
    args: &KindArgs,
    load: &LoadConfig,
    out: &Path,
) -> Result<(), HarnessError> {
    let (plan, knobs) = drive::plan(drive_args, Target::Kind)?;
    let read = |rel: &str| {
        let p = args.assets.join(rel);
        std::fs::read_to_string(&p).map_err(|e| harness(format!("{}: {e}", p.display())))
    };
    std::fs::create_dir_all(out).map_err(harness)?;
    let files = [
        (
            "loadgen-job.yaml",
            render_job(
                &read("loadgen-job.yaml")?,
                &plan,
                load,
                args.stress_test_tag(),
            )?,
        ),
        (
            "vfps-pod-kill.yaml",
            kind::pod_kill_schedule(&read("chaos/vfps-pod-kill.yaml")?, knobs.pod_kill_interval)
                .map_err(HarnessError)?,
        ),
        (
            "db-network-partition-burst.yaml",
            kind::partition_burst(
                &read("chaos/db-network-partition.yaml")?,
                knobs.partition_burst,
            )
            .map_err(HarnessError)?,
        ),
        (
            "plan.json",
            serde_json::to_string_pretty(&plan).map_err(harness)?,
        ),
    ];
    for (name, text) in files {
        std::fs::write(out.join(name), text).map_err(harness)?;
    }
    println!("{}", plan.load_seconds());
    Ok(())
}
