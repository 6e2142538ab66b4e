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
    checker::{self, Budgets, History, Observation},
    config::LoadConfig,
    history::{self, Entry, Ledger, Row, Status, Timeline},
    report::{self, markers, Summary},
    verify,
    workload::generator::{self, CreateCall, Schedule},
};

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
    let address = &cfg.service.address;
    let endpoints = Endpoints::parse(address)
        .await
        .with_context(|| format!("VFPS_GRPC_ADDRESS={address:?}"))?;
    let client = Client::new(endpoints.clone(), RetryPolicy::default());
    let created = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: cfg.service.namespace.clone(),
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                description: "created by vfps-chaos".into(),
                ..Default::default()
            },
            cfg.workload.call_deadline().max(Duration::from_secs(10)),
        )
        .await;
    if !created.is_ok() {
        bail!(
            "cannot create namespace {:?} at {address}: {:?} — nothing to test against",
            cfg.service.namespace,
            created.code()
        );
    }
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

/// What the load window left.
pub struct Loaded {
    pub info: RunInfo,
    pub rows: Vec<Row>,
    pub ledger: Vec<Entry>,
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
    let schedule = Schedule {
        namespace: cfg.service.namespace.clone(),
        rate_per_second: cfg.workload.rate_per_second,
        seconds: cfg.workload.load_seconds,
        deadline: cfg.workload.call_deadline(),
        max_in_flight: cfg.workload.max_in_flight as usize,
        seed: prepared.seed,
    };
    let call = Arc::new(CreateCall {
        client: prepared.client.clone(),
        namespace: cfg.service.namespace.clone(),
    });
    markers::emit_load_start(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    );
    if let Some(tx) = on_start {
        // The driver may have given up waiting; the load goes on regardless.
        let _ = tx.send(tokio::time::Instant::now());
    }
    let totals = generator::run(&schedule, call, timeline.clone(), ledger.clone(), progress).await;
    let rows = timeline.rows();

    let mut warnings = prepared.warnings;
    let shed: u64 = rows.iter().map(|r| r.shed).sum();
    let failed: u64 = rows.iter().map(|r| r.failed).sum();
    if shed > 0 && shed >= failed {
        let w = format!(
            "shedding ({shed}) outweighs real failures ({failed}): RESILIENCE_MAX_IN_FLIGHT={} must exceed rate × deadline = {:.0}",
            cfg.workload.max_in_flight,
            cfg.workload.in_flight_needed()
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }
    markers::emit_timeline(&rows).context("cannot print the timeline")?;
    report::write_timeline(dir, &rows)?;
    let info = RunInfo {
        address: cfg.service.address.clone(),
        namespace: cfg.service.namespace.clone(),
        rate_per_second: cfg.workload.rate_per_second,
        max_outage_seconds: cfg.limits.max_outage_seconds,
        max_unavailable_seconds: cfg.limits.max_unavailable_seconds,
        seed: prepared.seed,
        max_dispatch_lag_ms: totals.max_dispatch_lag_micros as f64 / 1000.0,
        failures_by_code: totals.failures_by_code,
        warnings,
    };
    report::write_file(dir, "run.json", serde_json::to_string_pretty(&info)?)?;
    Ok(Loaded {
        info,
        rows,
        ledger: ledger.entries(),
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

/// Verify: re-Create every ledger original and Get every pseudonym, with the
/// verification retry policy.
pub async fn verify(
    endpoints: &Endpoints,
    namespace: &str,
    ledger: &[Entry],
    concurrency: usize,
    progress: bool,
) -> Vec<Observation> {
    let verifier = Client::new(endpoints.clone(), RetryPolicy::verification());
    verify::observe(
        &verifier,
        namespace,
        ledger,
        concurrency,
        VERIFY_DEADLINE,
        progress,
    )
    .await
}

/// Assert: every checker over the history, into the run's summary.
pub fn assert(
    info: &RunInfo,
    rows: &[Row],
    ledger: &[Entry],
    observations: &[Observation],
) -> Summary {
    let history = History::new(
        rows,
        info.rate_per_second,
        info.budgets(),
        ledger,
        observations,
    );
    let verdicts = checker::compose(&history, checker::LOAD_CHECKS);
    Summary {
        passed: verdicts.iter().all(checker::Verdict::passed),
        seed: info.seed,
        rate_per_second: info.rate_per_second,
        availability: history.availability,
        verdicts,
        failures_by_code: info.failures_by_code.clone(),
        ledger_entries: ledger.len(),
        ledger_indeterminate: ledger
            .iter()
            .filter(|e| e.status == Status::Indeterminate)
            .count(),
        max_dispatch_lag_ms: info.max_dispatch_lag_ms,
        warnings: info.warnings.clone(),
    }
}

/// Report: the summary into the run directory (once) and on stdout between
/// markers, the verdicts on stderr.
pub fn report(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    report::write(dir, summary)?;
    markers::emit_summary(summary).context("cannot print the summary")?;
    report::print_verdicts(summary);
    Ok(())
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
    let observations = verify(
        &endpoints,
        &cfg.service.namespace,
        &loaded.ledger,
        cfg.verification.verify_concurrency as usize,
        progress,
    )
    .await;
    Ok(assert(
        &loaded.info,
        &loaded.rows,
        &loaded.ledger,
        &observations,
    ))
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
    concurrency: usize,
    progress: bool,
) -> anyhow::Result<Summary> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let info: RunInfo = serde_json::from_str(&read("run.json")?).context("run.json")?;
    let rows = history::parse_timeline(&read("load-timeline.csv")?)?;
    let ledger = history::load_ledger(&dir.join("ledger.jsonl"))?;
    let address = address.unwrap_or(&info.address);
    let endpoints = Endpoints::parse(address)
        .await
        .with_context(|| format!("{address:?}"))?;
    // Refuse to verify against nothing: an unreachable service would read as "unknown".
    let probe = Client::new(endpoints.clone(), RetryPolicy::default());
    if let Outcome::Fail(code) = probe
        .get(&info.namespace, "vfps-chaos-probe", Duration::from_secs(10))
        .await
    {
        if code != tonic::Code::NotFound {
            bail!("cannot reach vfps at {address}: {code:?}");
        }
    }
    let observations = verify(&endpoints, &info.namespace, &ledger, concurrency, progress).await;
    let summary = assert(&info, &rows, &ledger, &observations);
    report(dir, &summary)?;
    Ok(summary)
}
