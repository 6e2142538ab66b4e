//! `vfps-chaos load` and `vfps-chaos check RUN_DIR`.
//!
//! Exit codes: 0 every property held, 1 a property failed (or could not be
//! decided), 2 the harness itself failed (bad configuration, nothing reachable).

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use vfps_chaos::{
    config::LoadConfig,
    drive::{self, DriveArgs},
    kind_run::{self, KindArgs},
    local_run::{self, LocalArgs},
    platform::{
        kind::{Kube, Shell},
        Target,
    },
    run::{self, HarnessError},
};

#[derive(Parser)]
#[command(name = "vfps-chaos", version, about = "The vfps resilience harness")]
struct Cli {
    /// Where all, up, scenarios, collect, down and render act: `local` (network
    /// namespaces, Patroni, etcd on this machine) or `kind` (kind, CloudNativePG,
    /// Chaos Mesh, through kubectl).
    #[arg(long, global = true, value_enum, default_value = "local")]
    platform: Target,
    #[command(subcommand)]
    command: Command,
}

/// Every setting of a platform run.
#[derive(clap::Args)]
struct Platform {
    #[command(flatten)]
    drive: DriveArgs,
    #[command(flatten)]
    local: LocalArgs,
    #[command(flatten)]
    kind: KindArgs,
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
    /// Re-run verification and the assertions from a saved run directory.
    Check {
        run_dir: PathBuf,
        /// Endpoints to verify against (default: those the run used).
        #[arg(long, env = "VFPS_GRPC_ADDRESS")]
        address: Option<String>,
        #[arg(long, env = "RESILIENCE_VERIFY_CONCURRENCY", default_value_t = 16)]
        verify_concurrency: usize,
    },
    /// up, scenarios, collect, down (down runs even when a step failed).
    All {
        #[command(flatten)]
        platform: Platform,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Stand the HA topology up to steady state and leave it running.
    Up {
        #[command(flatten)]
        platform: Platform,
    },
    /// Run the scenarios under one continuous load window, then verify.
    Scenarios {
        #[command(flatten)]
        platform: Platform,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Collect state and logs, attribute failures per scenario, write the report.
    Collect {
        #[command(flatten)]
        platform: Platform,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Remove what `up` created (local: processes, namespaces, rules, directories;
    /// kind: the cluster).
    Down {
        #[command(flatten)]
        platform: Platform,
    },
    /// kind: write the manifests the driver applies, with this run's settings, to
    /// a directory (for validation without a cluster); prints the load window.
    Render {
        #[command(flatten)]
        platform: Platform,
        #[command(flatten)]
        config: LoadConfig,
        /// Directory to write into.
        #[arg(long)]
        out: PathBuf,
    },
}

async fn local(command: Command) -> Result<bool, HarnessError> {
    match command {
        Command::All { platform, config } => {
            local_run::all(&platform.drive, &platform.local, &config).await
        }
        Command::Up { platform } => local_run::up(&platform.local).await.map(|_| true),
        Command::Scenarios { platform, config } => {
            local_run::scenarios(&platform.drive, &platform.local, &config).await
        }
        Command::Collect { platform, config } => {
            local_run::collect(&platform.drive, &platform.local, &config).await
        }
        Command::Down { platform } => {
            vfps_chaos::platform::local::require_root().map_err(|e| HarnessError(e.to_string()))?;
            vfps_chaos::platform::local::down(&platform.local.base).await;
            Ok(true)
        }
        _ => Err(HarnessError(
            "render writes the Kubernetes manifests: use --platform kind".into(),
        )),
    }
}

async fn kind(command: Command) -> Result<bool, HarnessError> {
    let kube = |p: &Platform| Kube::new(Shell, &p.kind.assets);
    match command {
        Command::All { platform, config } => {
            kind_run::all(
                &kube(&platform),
                &platform.drive,
                &platform.kind,
                &config,
                kind_run::inotify_limits(),
            )
            .await
        }
        Command::Up { platform } => {
            kind_run::up(&kube(&platform), &platform.kind, kind_run::inotify_limits())
                .await
                .map(|()| true)
        }
        Command::Scenarios { platform, config } => {
            let planned = drive::plan(&platform.drive, Target::Kind)?;
            kind_run::scenarios(&kube(&platform), &planned, &platform.kind, &config).await
        }
        Command::Collect { platform, config } => {
            let (plan, _) = drive::plan(&platform.drive, Target::Kind)?;
            kind_run::collect(&kube(&platform), &plan, &config).await
        }
        Command::Down { platform } => kind_run::down(&kube(&platform), &platform.kind)
            .await
            .map(|()| true),
        Command::Render {
            platform,
            config,
            out,
        } => kind_run::render(&platform.drive, &platform.kind, &config, &out).map(|()| true),
        Command::Load { .. } | Command::Check { .. } => unreachable!("handled before"),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
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
    let result: Result<bool, HarnessError> = runtime.block_on(async {
        match cli.command {
            Command::Load { config, quiet } => run::load(&config, !quiet).await.map(|s| s.passed),
            Command::Check {
                run_dir,
                address,
                verify_concurrency,
            } => run::check(&run_dir, address.as_deref(), verify_concurrency, true)
                .await
                .map(|s| s.passed),
            command => match cli.platform {
                Target::Local => local(command).await,
                Target::Kind => kind(command).await,
            },
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("vfps-chaos: harness failure: {e}");
            ExitCode::from(2)
        }
    }
}
