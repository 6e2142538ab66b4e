//! `vfps-chaos`: a thin dispatcher. `load`, `check` and `capacity` act on any
//! vfps; `local …` and `kind …` are the platform steps, each platform with its
//! own flags.
//!
//! Exit codes, mapped here and nowhere else: 0 every property held, 1 a property
//! failed (or could not be decided), 2 the harness itself failed (bad
//! configuration, nothing reachable, a step that could not run). For
//! `capacity`: 0 a knee was found (or every planned step held), 1 even the
//! first step broke (no knee), 2 as above. For `backup`: 0 done, 1 refused
//! (the bucket cannot give what was asked: empty, another cluster's, a WAL
//! gap), 2 the tool failed.

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};
use vfps_chaos::{
    capacity::{self, CapacityConfig},
    config::LoadConfig,
    driver::{self, DriveArgs, Driver},
    platform::{
        kind::{
            driver::{render, KindDriver},
            install::inotify_limits,
            KindArgs, Kube, Shell,
        },
        local::driver::{LocalArgs, LocalDriver},
    },
    run,
    target::Target,
};

#[derive(Parser)]
#[command(name = "vfps-chaos", version, about = "The vfps resilience harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive a running vfps with open-model load, then verify P1–P4.
    Load {
        #[command(flatten)]
        config: LoadConfig,
        /// No live progress lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// The restore drill's client inside a Kubernetes cluster (the kind
    /// driver's `db-restore-drill` Job): a Create load in a namespace of its
    /// own, then — once the restored service refuses a new original — every
    /// ledger entry read back, then new originals offered until the restore is
    /// confirmed. Prints a report naming no original and no pseudonym. The
    /// drill's settings come from the environment (`RESTORE_*`,
    /// `DURATION_DB_RESTORE_DRILL`).
    DrillClient {
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Ramp the offered rate against a running vfps in steps until p99
    /// exceeds its target or calls fail; report the knee (the highest rate
    /// that held).
    Capacity {
        #[command(flatten)]
        config: CapacityConfig,
        /// No progress lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Re-run verification and the assertions from a saved run directory.
    Check {
        run_dir: PathBuf,
        /// Endpoints to verify against (default: those the run used).
        #[arg(long, env = "VFPS_GRPC_ADDRESS")]
        address: Option<String>,
        #[arg(long, env = "RESILIENCE_VERIFY_CONCURRENCY", default_value_t = 16)]
        verify_concurrency: usize,
        #[command(flatten)]
        credentials: vfps_chaos::config::Credentials,
    },
    /// Continuous backup to S3 and point-in-time restore (docs/backup.md):
    /// plan, base-backup, restore.
    Backup {
        #[command(subcommand)]
        command: vfps_chaos::backup::cli::BackupCommand,
    },
    /// The HA topology on this machine: network namespaces, Patroni, etcd.
    Local {
        #[command(subcommand)]
        step: LocalStep,
    },
    /// The HA topology on kind: CloudNativePG, Chaos Mesh, the Helm chart.
    Kind {
        #[command(subcommand)]
        step: KindStep,
    },
}

/// The steps of a platform run, with the platform's own flags `P`.
#[derive(Subcommand)]
enum Step<P: Args> {
    /// up, scenarios, collect, down (down runs even when a step failed).
    All {
        #[command(flatten)]
        platform: P,
        #[command(flatten)]
        drive: DriveArgs,
        #[command(flatten)]
        load: LoadConfig,
    },
    /// Stand the HA topology up to steady state and leave it running.
    Up {
        #[command(flatten)]
        platform: P,
        /// Where the topology's state is written if `up` fails.
        #[arg(long, env = "RESILIENCE_OUTPUT_DIR", default_value_os_t = vfps_chaos::config::default_output_dir())]
        output_dir: PathBuf,
    },
    /// Run the scenarios under one continuous load window, then verify.
    Scenarios {
        #[command(flatten)]
        platform: P,
        #[command(flatten)]
        drive: DriveArgs,
        #[command(flatten)]
        load: LoadConfig,
    },
    /// Collect state and logs, attribute failures per scenario, write the report.
    Collect {
        #[command(flatten)]
        platform: P,
        #[command(flatten)]
        drive: DriveArgs,
        #[command(flatten)]
        load: LoadConfig,
    },
    /// Remove what `up` created (local: processes, namespaces, rules,
    /// directories; kind: the cluster).
    Down {
        #[command(flatten)]
        platform: P,
    },
}

#[derive(Subcommand)]
enum LocalStep {
    #[command(flatten)]
    Step(Box<Step<LocalArgs>>),
    /// Restore the running topology's database cluster in place from its
    /// backup bucket alone (docs/backup.md): every member and its storage
    /// destroyed, a fresh cluster recovered to --to, the restore hold written,
    /// the vfps replicas restarted. Needs a topology `up` with --backup.
    Restore {
        #[command(flatten)]
        platform: LocalArgs,
        /// `latest`, or a UTC time such as 2026-12-05T09:30:00Z.
        #[arg(long)]
        to: vfps_chaos::backup::RestoreTo,
    },
}

#[derive(Subcommand)]
enum KindStep {
    #[command(flatten)]
    Step(Step<KindArgs>),
    /// Restore the kind cluster's database in place from its backup bucket
    /// alone (docs/backup.md): vfps stopped, the CloudNativePG Cluster and its
    /// volumes deleted, a new Cluster recovered to --to, `vfps restore hold`
    /// run as a Job, vfps started again on the held database.
    Restore {
        #[command(flatten)]
        platform: KindArgs,
        /// `latest`, or a UTC time such as 2026-12-05T09:30:00Z.
        #[arg(long)]
        to: vfps_chaos::backup::RestoreTo,
        /// A completed base backup's id (a Backup's status.backupId): needed
        /// for `--to backup-only`, and lets a Cluster whose status does not
        /// show its first recoverability point yet be restored.
        #[arg(long)]
        backup_id: Option<String>,
    },
    /// Write the manifests the driver applies, with this run's settings, to a
    /// directory (for validation without a cluster); prints the load window.
    Render {
        #[command(flatten)]
        platform: KindArgs,
        #[command(flatten)]
        drive: DriveArgs,
        #[command(flatten)]
        load: LoadConfig,
        /// Directory to write into.
        #[arg(long)]
        out: PathBuf,
    },
}

impl<P: Args> Step<P> {
    fn platform(&self) -> &P {
        match self {
            Step::All { platform, .. }
            | Step::Up { platform, .. }
            | Step::Scenarios { platform, .. }
            | Step::Collect { platform, .. }
            | Step::Down { platform } => platform,
        }
    }

    async fn run<D: Driver>(self, d: &D, target: Target) -> anyhow::Result<bool> {
        match self {
            Step::All {
                drive, mut load, ..
            } => {
                let seed = driver::fix_seed(&mut load);
                let (plan, knobs) = driver::plan(&drive, target, Some(seed))?;
                driver::all(d, &plan, &knobs, &load).await
            }
            Step::Up { output_dir, .. } => driver::up(d, &output_dir).await.map(|()| true),
            Step::Scenarios {
                drive, mut load, ..
            } => {
                let seed = driver::fix_seed(&mut load);
                let (plan, knobs) = driver::plan(&drive, target, Some(seed))?;
                d.scenarios(&plan, &knobs, &load).await
            }
            Step::Collect { drive, load, .. } => {
                let (plan, _) = driver::plan(&drive, target, load.workload.seed)?;
                driver::collect(d, &plan, &load).await
            }
            Step::Down { .. } => d.down().await.map(|()| true),
        }
    }
}

fn kind_driver(args: &KindArgs) -> KindDriver<Shell> {
    KindDriver {
        kube: Kube::new(Shell, &args.assets),
        args: args.clone(),
        inotify: inotify_limits(),
    }
}

async fn dispatch(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Load { config, quiet } => Ok(run::standalone(&config, !quiet).await?.passed),
        Command::DrillClient { config } => {
            let plan = vfps_chaos::scenario::drill::DrillPlan::from_env(&|k| std::env::var(k).ok())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            vfps_chaos::drill::in_cluster(&plan, &config).await?;
            Ok(true)
        }
        Command::Capacity { config, quiet } => Ok(capacity::sweep(&config, !quiet)
            .await?
            .knee_per_second
            .is_some()),
        Command::Check {
            run_dir,
            address,
            verify_concurrency,
            credentials,
        } => Ok(run::check(
            &run_dir,
            address.as_deref(),
            credentials.bearer()?.as_deref(),
            verify_concurrency,
            true,
        )
        .await?
        .passed),
        // A restore the bucket cannot give is a refusal (exit 1), not a
        // failure of the tool (exit 2): the same rule for every restore
        // command.
        Command::Backup { command } => refused_or(command.run().await),
        Command::Local {
            step: LocalStep::Step(step),
        } => {
            let d = LocalDriver::new(step.platform());
            step.run(&d, Target::Local).await
        }
        Command::Local {
            step: LocalStep::Restore { platform, to },
        } => refused_or(LocalDriver::new(&platform).restore(to).await),
        Command::Kind {
            step: KindStep::Step(step),
        } => {
            let d = kind_driver(step.platform());
            step.run(&d, Target::Kind).await
        }
        Command::Kind {
            step:
                KindStep::Restore {
                    platform,
                    to,
                    backup_id,
                },
        } => {
            let d = kind_driver(&platform);
            let restored = d
                .kube
                .restore(to, backup_id.as_deref(), &platform.image_tag, &|what| {
                    eprintln!("restore: {what}")
                })
                .await;
            refused_or(restored.map(|r| {
                println!(
                    "restored {:?} in {:.1} s; the new Cluster archives as {:?}. New originals are refused until `vfps restore confirm` (docs/backup.md).",
                    r.source,
                    r.took.as_secs_f64(),
                    r.new_server
                );
            }))
        }
        Command::Kind {
            step:
                KindStep::Render {
                    platform,
                    drive,
                    load,
                    out,
                },
        } => render(&drive, &platform, &load, &out).map(|()| true),
    }
}

/// A restore command's outcome: done (exit 0), refused before anything
/// was touched (exit 1, `refused: …` on stderr), or failed (exit 2).
fn refused_or(outcome: anyhow::Result<()>) -> anyhow::Result<bool> {
    match outcome {
        Ok(()) => Ok(true),
        Err(e) if e.downcast_ref::<vfps_chaos::backup::Refusal>().is_some() => {
            eprintln!("vfps-chaos: refused: {e:#}");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The earlier form `vfps-chaos [--platform local|kind] <step> …` (local by
/// default), still accepted: rewritten to `vfps-chaos <platform> <step> …`.
fn with_platform_first(mut args: Vec<OsString>) -> Vec<OsString> {
    const STEPS: [&str; 6] = ["all", "up", "scenarios", "collect", "down", "render"];
    let mut platform = None;
    if let Some(i) = args.iter().position(|a| a == "--platform") {
        if i + 1 < args.len() {
            platform = Some(args.remove(i + 1));
            args.remove(i);
        }
    } else if let Some(i) = args
        .iter()
        .position(|a| a.to_str().is_some_and(|s| s.starts_with("--platform=")))
    {
        let value = args.remove(i);
        platform = value
            .to_str()
            .and_then(|s| s.strip_prefix("--platform="))
            .map(OsString::from);
    }
    let first_is_step = args
        .get(1)
        .and_then(|a| a.to_str())
        .is_some_and(|a| STEPS.contains(&a));
    if first_is_step || platform.is_some() {
        args.insert(1, platform.unwrap_or_else(|| "local".into()));
    }
    args
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(with_platform_first(std::env::args_os().collect())) {
        Ok(c) => c,
        Err(e) => {
            // Printing help or the usage error; nothing else can be done if
            // stderr is gone.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    if tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .is_err()
    {
        eprintln!("vfps-chaos: logging could not be set up; continuing without it");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vfps-chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("vfps-chaos: harness failure: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_earlier_platform_flag_is_still_understood() {
        for (old, new) in [
            (
                "c --platform kind down --cluster-name x",
                "c kind down --cluster-name x",
            ),
            ("c down --platform=kind", "c kind down"),
            ("c all", "c local all"),
            ("c --platform local all", "c local all"),
            ("c load --rate-per-second 5", "c load --rate-per-second 5"),
            ("c kind render --out d", "c kind render --out d"),
        ] {
            assert_eq!(with_platform_first(args(old)), args(new), "{old}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
