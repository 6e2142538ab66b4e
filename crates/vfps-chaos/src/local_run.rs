//! `vfps-chaos --platform local all`: up, scenarios under continuous load,
//! collect, down (down runs even when a step failed).

use std::{path::PathBuf, time::Duration};

use crate::{
    checker::Validity,
    config::LoadConfig,
    nemesis::{self, Knobs, Recorder},
    platform::local::{self, Local, Options},
    report, report_html,
    run::{self, HarnessError},
    scenario::{self, Plan},
};

/// Settings of a local run beyond the load's.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// Scenarios in order (comma-separated).
    #[arg(
        long,
        env = "SCENARIOS",
        default_value = "baseline,vfps-pod-kill,db-primary-kill,db-network-partition,rollout,drain"
    )]
    pub scenarios: String,
    /// Where the topology's state lives (recreated by `all`, removed by `down`).
    #[arg(long, env = "VFPS_CHAOS_BASE", default_value = "/tmp/vfps-chaos-local")]
    pub base: PathBuf,
    /// The vfps binary (default: next to this one).
    #[arg(long, env = "VFPS_BIN")]
    pub vfps_bin: Option<PathBuf>,
}

fn vfps_bin(args: &LocalArgs) -> PathBuf {
    args.vfps_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("vfps")))
            .unwrap_or_else(|| PathBuf::from("vfps"))
    })
}

/// Runs everything; returns whether every property and budget held.
pub async fn all(args: &LocalArgs, load: &LoadConfig) -> Result<bool, HarnessError> {
    let fail = |e: anyhow::Error| HarnessError(format!("{e:#}"));
    local::require_root().map_err(fail)?;
    let plan = Plan::from_env(&args.scenarios, |k| std::env::var(k).ok()).map_err(HarnessError)?;
    let knobs = Knobs::from_env(|k| std::env::var(k).ok()).map_err(HarnessError)?;
    let bin = vfps_bin(args);
    if !bin.exists() {
        return Err(HarnessError(format!(
            "vfps binary {} not found (build it, or set VFPS_BIN)",
            bin.display()
        )));
    }
    let mut cfg = load.clone();
    cfg.address = local::grpc_endpoints();
    cfg.load_seconds = plan.load_seconds();
    std::fs::create_dir_all(&cfg.output_dir).map_err(|e| HarnessError(e.to_string()))?;
    std::fs::write(
        cfg.output_dir.join("plan.json"),
        serde_json::to_string_pretty(&plan).unwrap_or_default(),
    )
    .map_err(|e| HarnessError(e.to_string()))?;
    eprintln!(
        "local run: scenarios {}, load window {} s (sum of durations + {} s margin)",
        args.scenarios, cfg.load_seconds, plan.margin_seconds
    );

    let opts = Options {
        base: args.base.clone(),
        vfps_bin: bin,
        restart_backoff: Duration::from_secs(1),
        grace_period: Duration::from_secs(15),
    };
    let started = std::time::Instant::now();
    let up = Local::up(opts, &|e| {
        eprintln!("up: {e} ({:.1} s)", started.elapsed().as_secs_f64())
    })
    .await;
    let local = match up {
        Ok(l) => l,
        Err(e) => {
            local::down(&args.base).await;
            return Err(HarnessError(format!("up failed: {e:#}")));
        }
    };
    let steady = started.elapsed();
    eprintln!("steady state after {:.1} s", steady.as_secs_f64());
    let result = scenarios_and_collect(&local, &plan, &knobs, &cfg, steady).await;
    local.shutdown().await;
    result
}

async fn scenarios_and_collect(
    local: &Local,
    plan: &Plan,
    knobs: &Knobs,
    cfg: &LoadConfig,
    steady: Duration,
) -> Result<bool, HarnessError> {
    let dir = cfg.output_dir.clone();
    local.snapshot_cluster(&dir, "before").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let load = run::load_with(cfg, true, Some(tx));
    let chaos = async {
        let Ok(start) = rx.await else {
            return (Err(anyhow::anyhow!("load never started")), None);
        };
        let rec = Recorder::new(start);
        let r = nemesis::run(local, plan, knobs, &rec).await;
        let finished = rec.elapsed();
        (r.map(|n| (n, finished)), Some(rec))
    };
    let (summary, (chaos_result, rec)) = tokio::join!(load, chaos);
    local.snapshot_cluster(&dir, "after").await;
    local.collect_logs(&dir);
    // A partition must never outlive the run.
    if local.partitioned().await {
        let _ = local.heal_partition().await;
    }
    let mut summary = summary?;
    let events = match &rec {
        Some(r) => r.events().await,
        None => Vec::new(),
    };
    let _ = std::fs::write(dir.join("chaos-timeline.csv"), scenario::chaos_csv(&events));
    let rows = crate::history::parse_timeline(
        &std::fs::read_to_string(dir.join("load-timeline.csv")).unwrap_or_default(),
    )
    .map_err(|e| HarnessError(e.to_string()))?;
    let windows = scenario::windows(&events);
    let per_scenario = scenario::attribute(&rows, &windows, plan, cfg.rate_per_second);
    let mut extra = Vec::new();
    for r in &per_scenario {
        eprintln!("{}", r.verdict.summary);
        extra.push(r.verdict.clone());
    }
    let window = Duration::from_secs(cfg.load_seconds);
    let chaos_ok = match &chaos_result {
        Ok((failovers, finished)) => {
            let fits = *finished <= window;
            extra.push(crate::checker::Verdict {
                property: "chaos-completed-within-window",
                validity: if fits {
                    Validity::Valid
                } else {
                    Validity::Invalid
                },
                summary: format!(
                    "chaos finished at {:.1} s of a {} s window; {failovers} failovers",
                    finished.as_secs_f64(),
                    cfg.load_seconds
                ),
                evidence: Vec::new(),
            });
            fits
        }
        Err(e) => {
            extra.push(crate::checker::Verdict {
                property: "chaos-completed-within-window",
                validity: Validity::Invalid,
                summary: format!("a scenario failed: {e:#}"),
                evidence: Vec::new(),
            });
            false
        }
    };
    summary.verdicts.extend(extra);
    summary.passed = summary.passed
        && chaos_ok
        && summary
            .verdicts
            .iter()
            .all(|v| v.validity == Validity::Valid);
    report::write(&dir, &summary).map_err(|e| HarnessError(e.to_string()))?;
    let _ = std::fs::write(
        dir.join("scenarios.json"),
        serde_json::to_string_pretty(&per_scenario).unwrap_or_default(),
    );
    let _ = std::fs::write(
        dir.join("report.html"),
        report_html::page(
            &rows,
            &windows,
            &per_scenario,
            &summary.verdicts,
            summary.passed,
        ),
    );
    let _ = std::fs::write(
        dir.join("steady-state-seconds.txt"),
        format!("{:.1}\n", steady.as_secs_f64()),
    );
    eprintln!(
        "run directory: {} ({})",
        dir.display(),
        if summary.passed { "PASS" } else { "FAIL" }
    );
    Ok(summary.passed)
}
