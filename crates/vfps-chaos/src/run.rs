//! The phases of a run: init, load, settle, verify, report, assert — and `check`,
//! which re-runs verify and assert from a saved run directory.

use std::{path::Path, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use vfps_client::{Client, Endpoints, Outcome, RetryPolicy};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::{
    checker::{self, Validity},
    config::LoadConfig,
    generator::{self, CreateCall, Plan},
    history::{self, Ledger, Status, Timeline},
    report::{self, Summary},
    verify,
};

/// The harness itself failed (exit 2): bad configuration, nothing reachable.
#[derive(Debug)]
pub struct HarnessError(pub String);

impl std::error::Error for HarnessError {}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Any error, as a harness failure.
pub fn harness(e: impl std::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

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

/// Deadline of one verification call: long enough for the verification policy.
const VERIFY_DEADLINE: Duration = Duration::from_secs(120);

/// `vfps-chaos load`. Returns the summary (its `passed` decides exit 0 or 1).
pub async fn load(cfg: &LoadConfig, progress: bool) -> Result<Summary, HarnessError> {
    load_with(cfg, progress, None).await
}

/// Like [`load`]; `on_start` is told the instant the load window begins (after
/// Init), so a chaos driver can share the generator's clock.
pub async fn load_with(
    cfg: &LoadConfig,
    progress: bool,
    on_start: Option<tokio::sync::oneshot::Sender<tokio::time::Instant>>,
) -> Result<Summary, HarnessError> {
    cfg.validate().map_err(HarnessError)?;
    std::fs::create_dir_all(&cfg.output_dir)
        .map_err(|e| harness(format!("cannot create {}: {e}", cfg.output_dir.display())))?;
    let seed = cfg.seed.unwrap_or_else(rand::random);
    tracing::info!(
        seed,
        rate = cfg.rate_per_second,
        seconds = cfg.load_seconds,
        "load run starting"
    );
    let endpoints = Endpoints::parse(&cfg.address)
        .await
        .map_err(|e| harness(format!("VFPS_GRPC_ADDRESS={:?}: {e}", cfg.address)))?;
    let client = Client::new(endpoints.clone(), RetryPolicy::default());

    // Init.
    let init = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: cfg.namespace.clone(),
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                description: "created by vfps-chaos".into(),
                ..Default::default()
            },
            cfg.call_deadline().max(Duration::from_secs(10)),
        )
        .await;
    if !init.is_ok() {
        return Err(harness(format!(
            "cannot create namespace {:?} at {}: {:?} — nothing to test against",
            cfg.namespace,
            cfg.address,
            init.code()
        )));
    }

    let mut warnings = Vec::new();
    if f64::from(cfg.max_in_flight) <= cfg.in_flight_needed() {
        let w = format!(
            "RESILIENCE_MAX_IN_FLIGHT={} does not exceed rate × deadline = {:.0}: a stall will be shed instead of measured",
            cfg.max_in_flight,
            cfg.in_flight_needed()
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }

    // Load.
    let ledger = Arc::new(
        Ledger::create(&cfg.output_dir.join("ledger.jsonl"), cfg.ledger_capacity)
            .map_err(|e| harness(format!("cannot write the ledger: {e}")))?,
    );
    let timeline = Arc::new(Timeline::new(cfg.load_seconds));
    let plan = Plan {
        namespace: cfg.namespace.clone(),
        rate_per_second: cfg.rate_per_second,
        seconds: cfg.load_seconds,
        deadline: cfg.call_deadline(),
        max_in_flight: cfg.max_in_flight as usize,
        seed,
    };
    let call = Arc::new(CreateCall {
        client: client.clone(),
        namespace: cfg.namespace.clone(),
    });
    report::emit_load_start(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    );
    if let Some(tx) = on_start {
        let _ = tx.send(tokio::time::Instant::now());
    }
    let totals = generator::run(&plan, call, timeline.clone(), ledger.clone(), progress).await;
    let rows = timeline.rows();

    let shed: u64 = rows.iter().map(|r| r.shed).sum();
    let failed: u64 = rows.iter().map(|r| r.failed).sum();
    if shed > 0 && shed >= failed {
        let w = format!(
            "shedding ({shed}) outweighs real failures ({failed}): RESILIENCE_MAX_IN_FLIGHT={} must exceed rate × deadline = {:.0}",
            cfg.max_in_flight,
            cfg.in_flight_needed()
        );
        eprintln!("WARNING: {w}");
        warnings.push(w);
    }

    // Report the timeline before anything can fail.
    report::emit_timeline(&rows, &cfg.output_dir)
        .map_err(|e| harness(format!("cannot write the timeline: {e}")))?;
    let info = RunInfo {
        address: cfg.address.clone(),
        namespace: cfg.namespace.clone(),
        rate_per_second: cfg.rate_per_second,
        max_outage_seconds: cfg.max_outage_seconds,
        max_unavailable_seconds: cfg.max_unavailable_seconds,
        seed,
        max_dispatch_lag_ms: totals.max_dispatch_lag_micros as f64 / 1000.0,
        failures_by_code: totals.failures_by_code,
        warnings,
    };
    std::fs::write(
        cfg.output_dir.join("run.json"),
        serde_json::to_string_pretty(&info).map_err(harness)?,
    )
    .map_err(harness)?;

    // Settle.
    if cfg.settle_seconds > 0 {
        if progress {
            eprintln!("settle {} s", cfg.settle_seconds);
        }
        tokio::time::sleep(Duration::from_secs(cfg.settle_seconds)).await;
    }

    verify_and_assert(
        &cfg.output_dir,
        &info,
        &endpoints,
        ledger.entries(),
        rows,
        cfg.verify_concurrency as usize,
        progress,
    )
    .await
}

/// Verify, check, write the reports.
async fn verify_and_assert(
    dir: &Path,
    info: &RunInfo,
    endpoints: &Endpoints,
    entries: Vec<history::Entry>,
    rows: Vec<history::Row>,
    concurrency: usize,
    progress: bool,
) -> Result<Summary, HarnessError> {
    let verifier = Client::new(endpoints.clone(), RetryPolicy::verification());
    let observations = verify::observe(
        &verifier,
        &info.namespace,
        &entries,
        concurrency,
        VERIFY_DEADLINE,
        progress,
    )
    .await;
    let availability = checker::availability(&rows, info.rate_per_second);
    let mut verdicts = checker::p1(
        &availability,
        info.max_outage_seconds,
        info.max_unavailable_seconds,
    );
    verdicts.extend(checker::properties(&entries, &observations));
    verdicts.extend(checker::guards(&availability, entries.len()));
    let passed = verdicts.iter().all(|v| v.validity == Validity::Valid);
    let summary = Summary {
        passed,
        seed: info.seed,
        rate_per_second: info.rate_per_second,
        availability,
        verdicts,
        failures_by_code: info.failures_by_code.clone(),
        ledger_entries: entries.len(),
        ledger_indeterminate: entries
            .iter()
            .filter(|e| e.status == Status::Indeterminate)
            .count(),
        max_dispatch_lag_ms: info.max_dispatch_lag_ms,
        warnings: info.warnings.clone(),
    };
    report::write(dir, &summary).map_err(|e| harness(format!("cannot write the report: {e}")))?;
    report::emit_summary(&summary)
        .map_err(|e| harness(format!("cannot print the summary: {e}")))?;
    for v in &summary.verdicts {
        eprintln!(
            "{:<32} {:<8} {}",
            v.property,
            format!("{:?}", v.validity).to_lowercase(),
            v.summary
        );
        for e in v.evidence.iter().take(10) {
            eprintln!("    {e}");
        }
    }
    eprintln!("{}", if passed { "PASS" } else { "FAIL" });
    Ok(summary)
}

/// `vfps-chaos check RUN_DIR`: verify and assert again from the saved ledger and
/// timeline; `address` overrides the recorded endpoints.
pub async fn check(
    dir: &Path,
    address: Option<&str>,
    concurrency: usize,
    progress: bool,
) -> Result<Summary, HarnessError> {
    let info: RunInfo = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run.json"))
            .map_err(|e| harness(format!("{}: {e}", dir.join("run.json").display())))?,
    )
    .map_err(|e| harness(format!("run.json: {e}")))?;
    let rows = history::parse_timeline(
        &std::fs::read_to_string(dir.join("load-timeline.csv"))
            .map_err(|e| harness(format!("load-timeline.csv: {e}")))?,
    )
    .map_err(harness)?;
    let entries = history::load_ledger(&dir.join("ledger.jsonl")).map_err(harness)?;
    let address = address.unwrap_or(&info.address);
    let endpoints = Endpoints::parse(address)
        .await
        .map_err(|e| harness(format!("{address:?}: {e}")))?;
    // Refuse to verify against nothing: an unreachable service would read as "unknown".
    let probe = Client::new(endpoints.clone(), RetryPolicy::default());
    if let Outcome::Fail(code) = probe
        .get(&info.namespace, "vfps-chaos-probe", Duration::from_secs(10))
        .await
    {
        if code != tonic::Code::NotFound {
            return Err(harness(format!("cannot reach vfps at {address}: {code:?}")));
        }
    }
    verify_and_assert(dir, &info, &endpoints, entries, rows, concurrency, progress).await
}
