//! `vfps-chaos --platform local`: up, scenarios under continuous load (the
//! generator in this process, on the chaos driver's clock), collect, down.

use std::{path::PathBuf, time::Duration};

use crate::{
    config::LoadConfig,
    drive::{self, DriveArgs},
    nemesis::{self, Recorder},
    platform::{
        local::{self, Local, Options},
        Target,
    },
    run::{self, harness, HarnessError},
    scenario::Plan,
};

/// Settings of a local run beyond the load's.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
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

/// The load settings of a local run: the local endpoints and the plan's window.
fn load_config(load: &LoadConfig, plan: &Plan) -> LoadConfig {
    let mut cfg = load.clone();
    cfg.address = local::grpc_endpoints();
    cfg.load_seconds = plan.load_seconds();
    cfg
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

/// `scenarios`: every planned scenario under one continuous load window, then
/// settle and verify. Returns whether the load's own verdicts held.
pub async fn scenarios(
    drive: &DriveArgs,
    args: &LocalArgs,
    load: &LoadConfig,
) -> Result<bool, HarnessError> {
    let (plan, knobs) = drive::plan(drive, Target::Local)?;
    let local = Local::attach(options(args)).map_err(|e| harness(format!("{e:#}")))?;
    let cfg = load_config(load, &plan);
    let dir = cfg.output_dir.clone();
    drive::write_plan(&dir, &plan)?;
    if let Ok(steady) = std::fs::read_to_string(args.base.join("steady-state-seconds.txt")) {
        let _ = std::fs::write(dir.join("steady-state-seconds.txt"), steady);
    }
    eprintln!(
        "{} scenarios: load window {} s (sum of durations + {} s margin)",
        plan.scenarios.len(),
        cfg.load_seconds,
        plan.margin_seconds
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
    drive::write_chaos(&dir, &events, &chaos_result, finished)?;
    Ok(summary?.passed)
}

/// `collect`: the HA manager's state, every log, the per-scenario verdicts, the
/// report; the final verdict of the run.
pub async fn collect(
    drive: &DriveArgs,
    args: &LocalArgs,
    load: &LoadConfig,
) -> Result<bool, HarnessError> {
    let (plan, _) = drive::plan(drive, Target::Local)?;
    let cfg = load_config(load, &plan);
    let dir = cfg.output_dir.clone();
    if let Ok(local) = Local::attach(options(args)) {
        local.snapshot_cluster(&dir, "after").await;
        local.collect_logs(&dir);
    }
    drive::finish(&dir, &plan, cfg.rate_per_second, cfg.load_seconds)
}

/// `all` = up, scenarios, collect, down; down runs even when a step failed.
pub async fn all(
    drive: &DriveArgs,
    args: &LocalArgs,
    load: &LoadConfig,
) -> Result<bool, HarnessError> {
    drive::plan(drive, Target::Local)?;
    let local = up(args).await?;
    let result = match scenarios(drive, args, load).await {
        Ok(_) => collect(drive, args, load).await,
        Err(e) => {
            // Keep what evidence there is.
            let _ = collect(drive, args, load).await;
            Err(e)
        }
    };
    local.shutdown().await;
    result
}
