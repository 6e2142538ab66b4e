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

fn options(args: &LocalArgs) -> Options {
    Options {
        base: args.base.clone(),
        vfps_bin: vfps_bin(args),
        restart_backoff: Duration::from_secs(1),
        grace_period: Duration::from_secs(15),
    }
}

fn plan(args: &LocalArgs) -> Result<(Plan, Knobs), HarnessError> {
    let plan = Plan::from_env(&args.scenarios, |k| std::env::var(k).ok()).map_err(HarnessError)?;
    let knobs = Knobs::from_env(|k| std::env::var(k).ok()).map_err(HarnessError)?;
    Ok((plan, knobs))
}

/// The load settings of a local run: the local endpoints and the plan's window.
fn load_config(load: &LoadConfig, plan: &Plan) -> LoadConfig {
    let mut cfg = load.clone();
    cfg.address = local::grpc_endpoints();
    cfg.load_seconds = plan.load_seconds();
    cfg
}

fn harness(e: impl std::fmt::Display) -> HarnessError {
    HarnessError(e.to_string())
}

/// `up`: the topology to steady state (a stale previous run is removed first).
pub async fn up(args: &LocalArgs) -> Result<Local, HarnessError> {
    local::require_root().map_err(|e| harness(format!("{e:#}")))?;
    let opts = options(args);
    if !opts.vfps_bin.exists() {
        return Err(harness(format!(
            "vfps binary {} not found (build it, or set VFPS_BIN)",
            opts.vfps_bin.display()
        )));
    }
    let started = std::time::Instant::now();
    let up = Local::up(opts, &|e| {
        eprintln!("up: {e} ({:.1} s)", started.elapsed().as_secs_f64())
    })
    .await;
    match up {
        Ok(l) => {
            let steady = started.elapsed().as_secs_f64();
            eprintln!("steady state after {steady:.1} s");
            let _ = std::fs::write(
                args.base.join("steady-state-seconds.txt"),
                format!("{steady:.1}\n"),
            );
            Ok(l)
        }
        Err(e) => {
            local::down(&args.base).await;
            Err(harness(format!("up failed: {e:#}")))
        }
    }
}

/// What `scenarios` leaves for `collect`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ChaosOutcome {
    failovers: u32,
    finished_seconds: f64,
    error: Option<String>,
}

/// `scenarios`: every planned scenario under one continuous load window, then
/// settle and verify. Returns whether the load's own verdicts held.
pub async fn scenarios(args: &LocalArgs, load: &LoadConfig) -> Result<bool, HarnessError> {
    let (plan, knobs) = plan(args)?;
    let local = Local::attach(options(args)).map_err(|e| harness(format!("{e:#}")))?;
    let cfg = load_config(load, &plan);
    let dir = cfg.output_dir.clone();
    std::fs::create_dir_all(&dir).map_err(harness)?;
    std::fs::write(
        dir.join("plan.json"),
        serde_json::to_string_pretty(&plan).map_err(harness)?,
    )
    .map_err(harness)?;
    if let Ok(steady) = std::fs::read_to_string(args.base.join("steady-state-seconds.txt")) {
        let _ = std::fs::write(dir.join("steady-state-seconds.txt"), steady);
    }
    eprintln!(
        "scenarios {}: load window {} s (sum of durations + {} s margin)",
        args.scenarios, cfg.load_seconds, plan.margin_seconds
    );
    local
        .wait_db_healthy(Duration::from_secs(60))
        .await
        .map_err(|e| harness(format!("{e:#}")))?;
    local
        .wait_replicas_ready(Duration::from_secs(60))
        .await
        .map_err(|e| harness(format!("{e:#}")))?;
    local.snapshot_cluster(&dir, "before").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let load_run = run::load_with(&cfg, true, Some(tx));
    let chaos = async {
        let Ok(start) = rx.await else {
            return (
                Err(anyhow::anyhow!("the load never started")),
                Vec::new(),
                0.0,
            );
        };
        let rec = Recorder::new(start);
        let r = nemesis::run(&local, &plan, &knobs, &rec).await;
        let finished = rec.elapsed().as_secs_f64();
        (r, rec.events().await, finished)
    };
    let (summary, (chaos_result, events, finished)) = tokio::join!(load_run, chaos);
    // A partition must never outlive the run.
    if local.partitioned().await {
        let _ = local.heal_partition().await;
    }
    std::fs::write(dir.join("chaos-timeline.csv"), scenario::chaos_csv(&events))
        .map_err(harness)?;
    let outcome = ChaosOutcome {
        failovers: *chaos_result.as_ref().unwrap_or(&0),
        finished_seconds: finished,
        error: chaos_result.err().map(|e| format!("{e:#}")),
    };
    std::fs::write(
        dir.join("chaos.json"),
        serde_json::to_string_pretty(&outcome).map_err(harness)?,
    )
    .map_err(harness)?;
    Ok(summary?.passed)
}

/// `collect`: the HA manager's state, every log, the per-scenario verdicts, the
/// report; the final verdict of the run.
pub async fn collect(args: &LocalArgs, load: &LoadConfig) -> Result<bool, HarnessError> {
    let (plan, _) = plan(args)?;
    let cfg = load_config(load, &plan);
    let dir = cfg.output_dir.clone();
    if let Ok(local) = Local::attach(options(args)) {
        local.snapshot_cluster(&dir, "after").await;
        local.collect_logs(&dir);
    }
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|e| harness(format!("{}: {e}", dir.join(name).display())))
    };
    let mut summary: report::Summary =
        serde_json::from_str(&read("summary.json")?).map_err(harness)?;
    let outcome: ChaosOutcome = serde_json::from_str(&read("chaos.json")?).map_err(harness)?;
    let rows = crate::history::parse_timeline(&read("load-timeline.csv")?).map_err(harness)?;
    let events = scenario::parse_chaos_csv(&read("chaos-timeline.csv")?).map_err(harness)?;
    let windows = scenario::windows(&events);
    let per_scenario = scenario::attribute(&rows, &windows, &plan, cfg.rate_per_second);
    summary.verdicts.retain(|v| {
        v.property != "P1-scenario-outage" && v.property != "chaos-completed-within-window"
    });
    for r in &per_scenario {
        eprintln!("{}", r.verdict.summary);
        summary.verdicts.push(r.verdict.clone());
    }
    let fits = outcome.error.is_none() && outcome.finished_seconds <= cfg.load_seconds as f64;
    summary.verdicts.push(crate::checker::Verdict {
        property: "chaos-completed-within-window".into(),
        validity: if fits {
            Validity::Valid
        } else {
            Validity::Invalid
        },
        summary: match &outcome.error {
            Some(e) => format!("a scenario failed: {e}"),
            None => format!(
                "chaos finished at {:.1} s of a {} s window; {} failovers",
                outcome.finished_seconds, cfg.load_seconds, outcome.failovers
            ),
        },
        evidence: Vec::new(),
    });
    summary.passed = summary
        .verdicts
        .iter()
        .all(|v| v.validity == Validity::Valid);
    report::write(&dir, &summary).map_err(harness)?;
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
        dir.join("timeline.png"),
        report_html::plot_png(&rows, &windows),
    );
    eprintln!(
        "run directory: {} ({})",
        dir.display(),
        if summary.passed { "PASS" } else { "FAIL" }
    );
    Ok(summary.passed)
}

/// `all` = up, scenarios, collect, down; down runs even when a step failed.
pub async fn all(args: &LocalArgs, load: &LoadConfig) -> Result<bool, HarnessError> {
    plan(args)?;
    let local = up(args).await?;
    let result = match scenarios(args, load).await {
        Ok(_) => collect(args, load).await,
        Err(e) => {
            // Keep what evidence there is.
            let _ = collect(args, load).await;
            Err(e)
        }
    };
    local.shutdown().await;
    result
}
