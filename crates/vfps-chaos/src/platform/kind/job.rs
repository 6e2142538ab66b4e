//! The load generator as a Kubernetes Job (the `stress-test` image running
//! `vfps-chaos load`): its manifest with this run's settings, its log, whether it
//! finished, and the wall-clock instant its load window began — the clock every
//! chaos event is put on (kind nodes share this machine's clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::{assets::render, Kube, Runner, LOADGEN_JOB, LOADGEN_NAMESPACE};
use crate::{
    config::LoadConfig,
    report::markers,
    scenario::{Scenario, ScenarioPlan},
};

/// Beyond load + settle: verification of every ledger entry, and slack.
pub const JOB_DEADLINE_MARGIN_SECONDS: u64 = 900;

/// Rows of each CSV job when the plan faults the jobs or their store and
/// `RESILIENCE_JOB_ROWS` is not set: as on the local platform, a job runs
/// long enough to be met by the fault, and the run's jobs do not fill the
/// database.
pub const DEFAULT_JOB_ROWS: u64 = 50_000;

/// Rows of each CSV job the load submits: the configured number, else
/// [`DEFAULT_JOB_ROWS`] when a scenario faults the jobs or their object
/// store (without jobs it would prove nothing about them), else none.
pub fn job_rows(plan: &ScenarioPlan, load: &LoadConfig) -> u64 {
    let faults_jobs = plan.scenarios.iter().any(|s| {
        matches!(
            s.scenario,
            Scenario::JobRunnerKill | Scenario::JobRunnerPause | Scenario::ObjectsNodeKill
        )
    });
    match load.workload.job_rows {
        0 if faults_jobs => DEFAULT_JOB_ROWS,
        rows => rows,
    }
}

/// The variables of `loadgen-job.yaml`: the load window is the plan's, the
/// deadline is load + settle + margin.
pub fn job_variables(
    plan: &ScenarioPlan,
    load: &LoadConfig,
    stress_test_tag: &str,
) -> Vec<(String, String)> {
    let load_seconds = plan.load_seconds();
    let deadline = load_seconds + load.verification.settle_seconds + JOB_DEADLINE_MARGIN_SECONDS;
    [
        ("STRESS_TEST_TAG", stress_test_tag.to_owned()),
        ("LOADGEN_DEADLINE_SECONDS", deadline.to_string()),
        ("RESILIENCE_LOAD_SECONDS", load_seconds.to_string()),
        (
            "RESILIENCE_RATE_PER_SECOND",
            load.workload.rate_per_second.to_string(),
        ),
        (
            "RESILIENCE_SETTLE_SECONDS",
            load.verification.settle_seconds.to_string(),
        ),
        (
            "RESILIENCE_CALL_DEADLINE_SECONDS",
            load.workload.call_deadline_seconds.to_string(),
        ),
        (
            "RESILIENCE_MAX_IN_FLIGHT",
            load.workload.max_in_flight.to_string(),
        ),
        (
            "RESILIENCE_MAX_OUTAGE_SECONDS",
            load.limits.max_outage_seconds.to_string(),
        ),
        (
            "RESILIENCE_MAX_UNAVAILABLE_SECONDS",
            load.limits.max_unavailable_seconds.to_string(),
        ),
        // The local platform's mix: the MII side (P8) added when left out.
        (
            "RESILIENCE_MIX",
            crate::mix::with_platform_mii(&load.workload.mix),
        ),
        // The jobs' files go to Garage through presigned URLs naming its
        // Service (s3.serviceUrl), not through vfps; the Job's HTTP address
        // (in the template) is for the FHIR calls.
        ("RESILIENCE_JOB_ROWS", job_rows(plan, load).to_string()),
        // P10's probe, on unless set off.
        (
            "RESILIENCE_PRIVACY_PROBE",
            load.workload.privacy_probe.unwrap_or(true).to_string(),
        ),
        // The seed the plan's fault schedule was drawn from: one seed replays both.
        (
            "RESILIENCE_SEED",
            plan.seed
                .or(load.workload.seed)
                .unwrap_or_default()
                .to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

pub fn render_job(
    template: &str,
    plan: &ScenarioPlan,
    load: &LoadConfig,
    stress_test_tag: &str,
) -> anyhow::Result<String> {
    let vars = job_variables(plan, load, stress_test_tag);
    render(template, |k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
    .map_err(|e| anyhow::anyhow!("loadgen-job.yaml: {e}"))
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A Job the driver starts and reads: the load generator, the restore
/// drill's client, `vfps restore` (platform/kind/drill.rs). Its pods carry
/// the label `app.kubernetes.io/name` = its name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobRef<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
}

/// The load generator Job.
pub(crate) const LOADGEN: JobRef<'static> = JobRef {
    name: LOADGEN_JOB,
    namespace: LOADGEN_NAMESPACE,
};

/// The load generator's log, or an empty string when there is none (yet).
pub(crate) async fn job_log<R: Runner>(kube: &Kube<R>) -> String {
    log_of(kube, LOADGEN).await
}

/// A Job's log, or an empty string when there is none (yet).
pub(crate) async fn log_of<R: Runner>(kube: &Kube<R>, job: JobRef<'_>) -> String {
    kube.kubectl(&["logs", &format!("job/{}", job.name), "-n", job.namespace])
        .await
        .unwrap_or_default()
}

/// Whether the load generator finished: `Some(true)` succeeded, `Some(false)` failed.
pub(crate) async fn job_finished<R: Runner>(kube: &Kube<R>) -> anyhow::Result<Option<bool>> {
    finished_of(kube, LOADGEN).await
}

/// Whether a Job finished: `Some(true)` succeeded, `Some(false)` failed.
pub(crate) async fn finished_of<R: Runner>(
    kube: &Kube<R>,
    job: JobRef<'_>,
) -> anyhow::Result<Option<bool>> {
    let out = kube
        .kubectl(&["get", "job", job.name, "-n", job.namespace, "-o", "json"])
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

/// Why a Job's pod is not running, as Kubernetes says it (e.g. `ImagePullBackOff`).
pub(crate) async fn pod_state_of<R: Runner>(kube: &Kube<R>, job: JobRef<'_>) -> String {
    let Ok(out) = kube
        .kubectl(&[
            "get",
            "pods",
            "-n",
            job.namespace,
            "-l",
            &format!("app.kubernetes.io/name={}", job.name),
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

/// Waits for the load generator's load window to begin; returns its wall-clock start.
pub async fn wait_load_start<R: Runner>(kube: &Kube<R>, timeout: Duration) -> anyhow::Result<f64> {
    wait_start_of(kube, LOADGEN, timeout).await
}

/// Waits for a Job's load window to begin (its start marker); returns its
/// wall-clock start.
pub(crate) async fn wait_start_of<R: Runner>(
    kube: &Kube<R>,
    job: JobRef<'_>,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let log = log_of(kube, job).await;
        if let Some(t) = markers::extract_load_start(&log) {
            return Ok(t);
        }
        if finished_of(kube, job).await.ok().flatten().is_some() {
            anyhow::bail!(
                "{} ended before its load window began:\n{}",
                job.name,
                tail(&log, 20)
            );
        }
        if tokio::time::Instant::now() >= until {
            anyhow::bail!(
                "{} did not start its load window within {timeout:?} (its pod: {})",
                job.name,
                pod_state_of(kube, job).await
            );
        }
        tokio::time::sleep(kube.poll).await;
    }
}

/// Waits until a Job has finished; its log, or an error with the log's tail
/// when it failed or did not finish within `timeout`.
pub(crate) async fn wait_finished_of<R: Runner>(
    kube: &Kube<R>,
    job: JobRef<'_>,
    timeout: Duration,
) -> anyhow::Result<String> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        match finished_of(kube, job).await {
            Ok(Some(true)) => return Ok(log_of(kube, job).await),
            Ok(Some(false)) => anyhow::bail!(
                "the Job {} failed:\n{}",
                job.name,
                tail(&log_of(kube, job).await, 20)
            ),
            Ok(None) | Err(_) if tokio::time::Instant::now() < until => {
                tokio::time::sleep(kube.poll).await;
            }
            Ok(None) | Err(_) => anyhow::bail!(
                "the Job {} did not finish within {timeout:?} (its pod: {}):\n{}",
                job.name,
                pod_state_of(kube, job).await,
                tail(&log_of(kube, job).await, 20)
            ),
        }
    }
}

/// How often the load generator's progress is echoed while the driver waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Runs `work`, echoing the load generator's latest progress line (`load t=…`,
/// `settle`, `verify …`) every [`PROGRESS_EVERY`]: the Job runs for many minutes.
pub(crate) async fn with_progress<R: Runner, T>(
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

pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
