//! A load run, phase by phase: [`init`], [`load`], [`settle`], [`verify`],
//! [`assert`] and [`report`]. [`standalone`] (`vfps-chaos load`) runs them all;
//! [`under_chaos`] runs all but the report, which a platform driver writes once,
//! with the scenarios' verdicts; [`check`] (`vfps-chaos check RUN_DIR`) re-runs
//! verify, assert and report from a saved run directory.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use vfps_client::{Client, Endpoints, Outcome, RetryPolicy};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::{
    checker::{self, Budgets},
    config::{Credentials, LoadConfig, Service},
    history::{self, Calls, CallsReport, Entry, Ledger, Leftovers, Row, Timeline},
    mix::Mix,
    report::{self, markers, Summary},
    workload::{
        generator::{self, Schedule},
        jobs::{Jobs, Submitted},
        Mixed,
    },
};

mod judge;
mod observe;

pub use judge::{assert, report, Evidence};
pub use observe::verify;
use observe::{
    mii_in, ui_probe, verify_erasures, verify_jobs, verify_privacy, verify_ui, ERASURES_FILE,
    PRIVACY_FILE,
};

/// How long verification follows the run's CSV jobs (and their
/// de-pseudonymizing twins) to their end.
const JOB_VERIFY_DEADLINE: Duration = Duration::from_secs(300);

/// What a run remembers about itself, for `check`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub address: String,
    pub namespace: String,
    pub rate_per_second: u32,
    pub max_outage_seconds: u64,
    pub max_unavailable_seconds: f64,
    pub seed: u64,
    pub max_dispatch_lag_ms: f64,
    pub failures_by_code: std::collections::BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    /// `RESILIENCE_MIX`, as run.
    #[serde(default)]
    pub mix: String,
    /// Wall-clock start of the load window (Unix seconds).
    #[serde(default)]
    pub load_start_unix: f64,
    /// Acknowledged Creates the ledger recorded (reservoir or not).
    #[serde(default)]
    pub ledger_ok_seen: u64,
    /// Acknowledged lines written to `ledger.jsonl` (absent in runs saved by
    /// older harnesses).
    #[serde(default)]
    pub ledger_ok_written: Option<u64>,
    /// Entries (distinct slots) the ledger kept (absent in runs saved by older
    /// harnesses).
    #[serde(default)]
    pub ledger_kept: Option<u64>,
    /// Rows of each CSV job run beside the load (0: none).
    #[serde(default)]
    pub job_rows: u64,
    /// `RESILIENCE_HTTP_ADDRESS`, as run.
    #[serde(default)]
    pub http_address: Option<String>,
    /// Where the browser probe ran, if it did (its steps: `ui-steps.jsonl`).
    #[serde(default)]
    pub ui_address: Option<String>,
    /// What the load window cost the machine, by part (absent where `/proc`
    /// could not be read, and in runs saved by older harnesses).
    #[serde(default)]
    pub cpu: Option<history::cpu::CpuCost>,
}

impl RunInfo {
    fn budgets(&self) -> Budgets {
        Budgets {
            max_outage_seconds: self.max_outage_seconds,
            max_unavailable_seconds: self.max_unavailable_seconds,
        }
    }
}

/// Deadline of one verification call: long enough for the verification policy.
const VERIFY_DEADLINE: Duration = Duration::from_secs(120);

/// What `init` prepares for the load.
pub struct Prepared {
    pub endpoints: Endpoints,
    pub client: Client,
    pub seed: u64,
    pub warnings: Vec<String>,
}

/// Init: settings checked, the run directory made, the service reached and the
/// run's namespace created.
pub async fn init(cfg: &LoadConfig) -> anyhow::Result<Prepared> {
    cfg.validate()?;
    std::fs::create_dir_all(cfg.dir())
        .with_context(|| format!("cannot create {}", cfg.dir().display()))?;
    let seed = cfg.workload.seed.unwrap_or_else(rand::random);
    tracing::info!(
        seed,
        rate = cfg.workload.rate_per_second,
        seconds = cfg.workload.load_seconds,
        "load run starting"
    );
    let (endpoints, client) = reach(
        &cfg.service,
        &cfg.credentials,
        RetryPolicy::default(),
        cfg.workload.call_deadline(),
    )
    .await?;
    let mut warnings = Vec::new();
    if f64::from(cfg.workload.max_in_flight) <= cfg.workload.in_flight_needed() {
        let w = format!(
            "RESILIENCE_MAX_IN_FLIGHT={} does not exceed rate × deadline = {:.0}: a stall will be shed instead of measured",
            cfg.workload.max_in_flight,
            cfg.workload.in_flight_needed()
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }
    Ok(Prepared {
        endpoints,
        client,
        seed,
        warnings,
    })
}

/// The service reached with the run's credentials and `policy`, and the
/// namespace to write in created if missing (within `deadline`, at least
/// 10 s): nothing to test against is a harness failure.
pub async fn reach(
    service: &Service,
    credentials: &Credentials,
    policy: RetryPolicy,
    deadline: Duration,
) -> anyhow::Result<(Endpoints, Client)> {
    let address = &service.address;
    let endpoints = Endpoints::parse(address)
        .await
        .with_context(|| format!("VFPS_GRPC_ADDRESS={address:?}"))?;
    let bearer = credentials.bearer()?;
    let client = Client::new(endpoints.clone(), policy)
        .with_bearer(bearer.as_deref())
        .context("RESILIENCE_BEARER_TOKEN")?;
    let created = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: service.namespace.clone(),
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                description: "created by vfps-chaos".into(),
                ..Default::default()
            },
            deadline.max(Duration::from_secs(10)),
        )
        .await;
    if !created.is_ok() {
        bail!(
            "cannot create namespace {:?} at {address}: {:?} — nothing to test against",
            service.namespace,
            created.code()
        );
    }
    Ok((endpoints, client))
}

/// What the load window left.
pub struct Loaded {
    pub info: RunInfo,
    pub rows: Vec<Row>,
    pub ledger: Vec<Entry>,
    pub calls: CallsReport,
    pub leftovers: Leftovers,
    /// The CSV jobs submitted during the window, and who follows them.
    pub jobs: Option<(Jobs, Vec<Submitted>)>,
    /// The browser probe's steps, when it ran.
    pub ui: Option<Vec<checker::ui::StepRecord>>,
    /// The MII interface's answers and erasures, when the mix had them.
    pub erasures: Option<history::erasures::ErasureHistory>,
    /// P10's probe and its early round, when it runs.
    pub privacy: Option<(
        crate::workload::privacy::Probe,
        crate::workload::privacy::Early,
    )>,
}

/// Dispatch lag beyond which the schedule was not kept and the summary says so.
pub(crate) const MAX_P99_DISPATCH_LAG: Duration = Duration::from_millis(1);

pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Load: the open-model window. `on_start` is told the instant it begins, so a
/// chaos driver can share the generator's clock. The timeline and `run.json`
/// are written before anything else can fail, so a failed run keeps its
/// evidence.
pub async fn load(
    cfg: &LoadConfig,
    prepared: Prepared,
    progress: bool,
    on_start: Option<tokio::sync::oneshot::Sender<tokio::time::Instant>>,
) -> anyhow::Result<Loaded> {
    let dir = cfg.dir();
    let ledger = Arc::new(
        Ledger::create(&dir.join("ledger.jsonl"), cfg.output.ledger_capacity)
            .context("cannot write the ledger")?,
    );
    let timeline = Arc::new(Timeline::new(cfg.workload.load_seconds));
    let calls = Arc::new(Calls::default());
    let mix = cfg.workload.mix()?;
    let schedule = Schedule {
        rate_per_second: cfg.workload.rate_per_second,
        seconds: cfg.workload.load_seconds,
        deadline: cfg.workload.call_deadline(),
        max_in_flight: cfg.workload.max_in_flight as usize,
        mix: mix.clone(),
    };
    let workload = Mixed::new(
        prepared.client.clone(),
        cfg.service.namespace.clone(),
        prepared.seed,
        ledger.clone(),
        calls.clone(),
        cfg.credentials.refused()?,
    );
    let erasure_log = match mii_in(&mix) {
        false => None,
        true => {
            crate::workload::mii::create_namespace(&prepared.client, &cfg.service.namespace)
                .await?;
            Some(Arc::new(history::erasures::ErasureLog::new(
                &crate::workload::mii::erasable_namespace(&cfg.service.namespace),
            )))
        }
    };
    let workload = match &erasure_log {
        None => workload,
        Some(log) => workload.with_mii(crate::workload::mii::Mii::new(
            &prepared.client,
            cfg.workload.http_address.as_deref(),
            &cfg.service.namespace,
            prepared.seed,
            log.clone(),
            calls.clone(),
        )?),
    };
    // P10's early round, before the window (it is not load).
    let privacy = match cfg.workload.privacy_probe {
        Some(true) => {
            let probe =
                crate::workload::privacy::Probe::for_run(cfg, &prepared.endpoints, prepared.seed)?;
            let early = probe.early().await;
            Some((probe, early))
        }
        _ => None,
    };
    let load_start_unix = unix_now();
    markers::emit_load_start(load_start_unix);
    if let Some(tx) = on_start {
        // The driver may have given up waiting; the load goes on regardless.
        let _ = tx.send(tokio::time::Instant::now());
    }
    let progress = progress.then(|| {
        let ledger = ledger.clone();
        Box::new(move || format!("ledger={}", ledger.len()))
            as Box<dyn Fn() -> String + Send + Sync>
    });
    let jobs = match cfg.workload.job_rows {
        0 => None,
        rows => Some(Jobs::new(
            prepared.client.clone(),
            cfg.workload.http_address.as_deref(),
            &cfg.service.namespace,
            prepared.seed,
            rows,
        )?),
    };
    let window_end = tokio::time::Instant::now() + Duration::from_secs(cfg.workload.load_seconds);
    let jobs_run = async {
        match &jobs {
            Some(j) => j.during(window_end).await,
            None => Vec::new(),
        }
    };
    let probe = ui_probe(cfg, prepared.seed)?;
    let ui_run = async {
        match &probe {
            Some(p) => Some(p.during(dir, window_end).await),
            None => None,
        }
    };
    let (totals, submitted, ui_steps, cpu) = tokio::join!(
        generator::run(&schedule, workload.clone(), timeline.clone(), progress),
        jobs_run,
        ui_run,
        history::cpu::over_window(window_end)
    );
    if let Some(cpu) = &cpu {
        for line in cpu.lines() {
            eprintln!("{line}");
        }
    }
    let ui_steps = ui_steps.transpose()?;
    if let Some(steps) = &ui_steps {
        let failed = steps.iter().filter(|s| !s.ok).count();
        eprintln!(
            "ui: the browser probe took {} steps, {failed} failed",
            steps.len()
        );
        let rows = crate::workload::ui::timeline(steps, load_start_unix, cfg.workload.load_seconds);
        report::write_file(dir, "ui-timeline.csv", history::ui::ui_timeline_csv(&rows))?;
    }
    ledger.flush();
    let rows = timeline.rows();
    let latency = timeline.latency_buckets();
    let calls = calls.report();
    let leftovers = workload.leftovers();
    let erasures = erasure_log.map(|log| log.history());
    if let Some(h) = &erasures {
        report::write_file(dir, ERASURES_FILE, serde_json::to_string(h)?)?;
        report::write_file(dir, report::erasure::FILE, report::erasure::timeline_csv(h))?;
    }

    let mut warnings = prepared.warnings;
    let failed: u64 = rows.iter().map(|r| r.failed).sum();
    if totals.shed > 0 && totals.shed >= failed {
        let w = format!(
            "shedding ({}) outweighs real failures ({failed}): RESILIENCE_MAX_IN_FLIGHT={} must exceed rate × deadline = {:.0}",
            totals.shed,
            cfg.workload.max_in_flight,
            cfg.workload.in_flight_needed()
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }
    let p99_lag = Duration::from_micros(totals.p99_dispatch_lag_micros);
    if p99_lag > MAX_P99_DISPATCH_LAG {
        let w = format!(
            "p99 dispatch lag {p99_lag:?} exceeds {MAX_P99_DISPATCH_LAG:?}: calls left later than scheduled (an overloaded generator)"
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }
    markers::emit_timeline(&rows).context("cannot print the timeline")?;
    report::write_timeline(dir, &rows)?;
    report::write_file(dir, "latency.csv", history::latency::csv(&latency))?;
    report::write_file(dir, "calls.json", serde_json::to_string_pretty(&calls)?)?;
    report::write_file(
        dir,
        "workload.json",
        serde_json::to_string_pretty(&leftovers)?,
    )?;
    // Calls not served only: a documented answer (INVALID_ARGUMENT to
    // invalid input, NOT_FOUND to a churn step) is not a failure.
    let mut failures_by_code = calls.failures.clone();
    if totals.shed > 0 {
        failures_by_code.insert("SHED".into(), totals.shed);
    }
    let info = RunInfo {
        address: cfg.service.address.clone(),
        namespace: cfg.service.namespace.clone(),
        rate_per_second: cfg.workload.rate_per_second,
        max_outage_seconds: cfg.limits.max_outage_seconds,
        max_unavailable_seconds: cfg.limits.max_unavailable_seconds,
        seed: prepared.seed,
        max_dispatch_lag_ms: totals.max_dispatch_lag_micros as f64 / 1000.0,
        failures_by_code,
        warnings,
        mix: mix.to_string(),
        load_start_unix,
        ledger_ok_seen: ledger.ok_seen(),
        ledger_ok_written: Some(ledger.ok_written()),
        ledger_kept: Some(ledger.len() as u64),
        job_rows: cfg.workload.job_rows,
        http_address: cfg.workload.http_address.clone(),
        ui_address: probe.as_ref().map(|p| p.address.clone()),
        cpu,
    };
    report::write_file(dir, "run.json", serde_json::to_string_pretty(&info)?)?;
    Ok(Loaded {
        info,
        rows,
        ledger: ledger.entries(),
        calls,
        leftovers,
        jobs: jobs.map(|j| (j, submitted)),
        ui: ui_steps,
        erasures,
        privacy,
    })
}

/// Settle: a quiet period before verification, so the service has recovered.
pub async fn settle(seconds: u64, progress: bool) {
    if seconds > 0 {
        if progress {
            eprintln!("settle {seconds} s");
        }
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
}

/// Every phase but the report: the load's own summary.
pub async fn under_chaos(
    cfg: &LoadConfig,
    progress: bool,
    on_start: Option<tokio::sync::oneshot::Sender<tokio::time::Instant>>,
) -> anyhow::Result<Summary> {
    let prepared = init(cfg).await?;
    let endpoints = prepared.endpoints.clone();
    let loaded = load(cfg, prepared, progress, on_start).await?;
    settle(cfg.verification.settle_seconds, progress).await;
    let bearer = cfg.credentials.bearer()?;
    let (observations, finals) = verify(
        &endpoints,
        bearer.as_deref(),
        &cfg.service.namespace,
        &loaded.ledger,
        &loaded.leftovers,
        cfg.verification.verify_concurrency as usize,
        progress,
    )
    .await?;
    let jobs = match loaded.jobs {
        Some((jobs, submitted)) => Some(verify_jobs(cfg.dir(), &jobs, submitted).await?),
        None => None,
    };
    let ui = match &loaded.ui {
        Some(steps) => {
            let client = Client::new(endpoints.clone(), RetryPolicy::default())
                .with_bearer(bearer.as_deref())?;
            Some(verify_ui(cfg.dir(), &client, &cfg.service.namespace, steps).await?)
        }
        None => None,
    };
    let erasures_seen = match &loaded.erasures {
        Some(h) => Some(
            verify_erasures(
                cfg.dir(),
                &endpoints,
                cfg.workload.http_address.as_deref(),
                bearer.as_deref(),
                h,
                cfg.verification.verify_concurrency as usize,
            )
            .await?,
        ),
        None => None,
    };
    let privacy = match loaded.privacy {
        Some((probe, early)) => Some(
            verify_privacy(
                cfg.dir(),
                probe,
                early,
                loaded.erasures.as_ref(),
                jobs.as_deref(),
            )
            .await?,
        ),
        None => None,
    };
    assert(Evidence {
        info: &loaded.info,
        rows: &loaded.rows,
        ledger: &loaded.ledger,
        observations: &observations,
        calls: &loaded.calls,
        finals: &finals,
        ledger_read: None,
        jobs: jobs.as_deref(),
        privacy: privacy.as_ref(),
        ui: loaded.ui.as_deref().zip(ui.as_deref()),
        erasures: loaded
            .erasures
            .as_ref()
            .map(|h| (h, erasures_seen.as_ref())),
    })
}

/// `vfps-chaos load`: every phase. The summary's `passed` decides exit 0 or 1.
pub async fn standalone(cfg: &LoadConfig, progress: bool) -> anyhow::Result<Summary> {
    let summary = under_chaos(cfg, progress, None).await?;
    report(cfg.dir(), &summary)?;
    Ok(summary)
}

/// `vfps-chaos check RUN_DIR`: verify, assert and report again from the saved
/// ledger and timeline; `address` overrides the recorded endpoints.
pub async fn check(
    dir: &Path,
    address: Option<&str>,
    bearer: Option<&str>,
    concurrency: usize,
    progress: bool,
) -> anyhow::Result<Summary> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let info: RunInfo = serde_json::from_str(&read("run.json")?).context("run.json")?;
    let rows = history::parse_timeline(&read("load-timeline.csv")?)?;
    let saved = history::load_ledger(&dir.join("ledger.jsonl"))?;
    let ledger = saved.entries;
    let calls: CallsReport = serde_json::from_str(&read("calls.json")?).context("calls.json")?;
    let leftovers: Leftovers =
        serde_json::from_str(&read("workload.json")?).context("workload.json")?;
    let address = address.unwrap_or(&info.address);
    let endpoints = Endpoints::parse(address)
        .await
        .with_context(|| format!("{address:?}"))?;
    // Refuse to verify against nothing: an unreachable service would read as "unknown".
    let probe = Client::new(endpoints.clone(), RetryPolicy::default()).with_bearer(bearer)?;
    if let Outcome::Fail(code) = probe
        .get(&info.namespace, "vfps-chaos-probe", Duration::from_secs(10))
        .await
    {
        if code != tonic::Code::NotFound {
            bail!("cannot reach vfps at {address}: {code:?}");
        }
    }
    let (observations, finals) = verify(
        &endpoints,
        bearer,
        &info.namespace,
        &ledger,
        &leftovers,
        concurrency,
        progress,
    )
    .await?;
    // The jobs the run submitted, looked at again.
    let jobs = match (info.job_rows, read("jobs.json")) {
        (0, _) | (_, Err(_)) => None,
        (rows, Ok(saved)) => {
            let saved: Vec<checker::jobs::JobObservation> =
                serde_json::from_str(&saved).context("jobs.json")?;
            let submitted = saved
                .into_iter()
                .map(|o| Submitted {
                    id: o.id,
                    index: o.index,
                    samples: o.samples,
                })
                .collect();
            let jobs = Jobs::new(
                probe.clone(),
                info.http_address.as_deref(),
                &info.namespace,
                info.seed,
                rows,
            )?;
            Some(verify_jobs(dir, &jobs, submitted).await?)
        }
    };
    // The browser probe's steps, its pseudonyms asked of the API again.
    let ui_steps = match (&info.ui_address, read(crate::workload::ui::STEPS_FILE)) {
        (Some(_), Ok(text)) => Some(crate::workload::ui::parse_steps(&text)?),
        (Some(_), Err(e)) => return Err(e),
        (None, _) => None,
    };
    let agreements = match &ui_steps {
        Some(steps) => Some(verify_ui(dir, &probe, &info.namespace, steps).await?),
        None => None,
    };
    let erasures: Option<history::erasures::ErasureHistory> = match read(ERASURES_FILE) {
        Ok(text) => Some(serde_json::from_str(&text).context(ERASURES_FILE)?),
        Err(_) if !mii_in(&Mix::parse(&info.mix)?) => None,
        Err(e) => return Err(e),
    };
    let erasures_seen = match &erasures {
        Some(h) => Some(
            verify_erasures(
                dir,
                &endpoints,
                info.http_address.as_deref(),
                bearer,
                h,
                concurrency,
            )
            .await?,
        ),
        None => None,
    };
    // P10's samples as the run took them.
    let privacy: Option<checker::privacy::Observed> = match read(PRIVACY_FILE) {
        Ok(text) => Some(serde_json::from_str(&text).context(PRIVACY_FILE)?),
        Err(_) => None,
    };
    let summary = assert(Evidence {
        info: &info,
        rows: &rows,
        ledger: &ledger,
        observations: &observations,
        calls: &calls,
        finals: &finals,
        ledger_read: Some((saved.ok_lines, ledger.len() as u64)),
        jobs: jobs.as_deref(),
        privacy: privacy.as_ref(),
        ui: ui_steps.as_deref().zip(agreements.as_deref()),
        erasures: erasures.as_ref().map(|h| (h, erasures_seen.as_ref())),
    })?;
    report(dir, &summary)?;
    Ok(summary)
}
