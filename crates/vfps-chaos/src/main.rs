//! `vfps-chaos load` and `vfps-chaos check RUN_DIR`.
//!
//! Exit codes: 0 every property held, 1 a property failed (or could not be
//! decided), 2 the harness itself failed (bad configuration, nothing reachable).

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use vfps_chaos::{config::LoadConfig, run};

#[derive(Parser)]
#[command(name = "vfps-chaos", version, about = "The vfps resilience harness")]
struct Cli {
    /// Where `all` and `down` act: `local` (namespaces, Patroni, etcd on this machine).
    #[arg(long, global = true, default_value = "local")]
    platform: String,
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
        local: vfps_chaos::local_run::LocalArgs,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Stand the HA topology up to steady state and leave it running.
    Up {
        #[command(flatten)]
        local: vfps_chaos::local_run::LocalArgs,
    },
    /// Run the scenarios under one continuous load window, then verify.
    Scenarios {
        #[command(flatten)]
        local: vfps_chaos::local_run::LocalArgs,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Collect state and logs, attribute failures per scenario, write the report.
    Collect {
        #[command(flatten)]
        local: vfps_chaos::local_run::LocalArgs,
        #[command(flatten)]
        config: LoadConfig,
    },
    /// Remove every process, namespace, rule and directory a local run created.
    Down {
        #[arg(long, env = "VFPS_CHAOS_BASE", default_value = "/tmp/vfps-chaos-local")]
        base: PathBuf,
    },
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
    if cli.platform != "local" {
        eprintln!(
            "vfps-chaos: --platform {:?} is not available here (only local)",
            cli.platform
        );
        return ExitCode::from(2);
    }
    let result: Result<bool, String> = runtime.block_on(async {
        match cli.command {
            Command::Load { config, quiet } => run::load(&config, !quiet)
                .await
                .map(|s| s.passed)
                .map_err(|e| e.0),
            Command::Check {
                run_dir,
                address,
                verify_concurrency,
            } => run::check(&run_dir, address.as_deref(), verify_concurrency, true)
                .await
                .map(|s| s.passed)
                .map_err(|e| e.0),
            Command::All { local, config } => vfps_chaos::local_run::all(&local, &config)
                .await
                .map_err(|e| e.0),
            Command::Up { local } => vfps_chaos::local_run::up(&local)
                .await
                .map(|_| true)
                .map_err(|e| e.0),
            Command::Scenarios { local, config } => {
                vfps_chaos::local_run::scenarios(&local, &config)
                    .await
                    .map_err(|e| e.0)
            }
            Command::Collect { local, config } => vfps_chaos::local_run::collect(&local, &config)
                .await
                .map_err(|e| e.0),
            Command::Down { base } => match vfps_chaos::platform::local::require_root() {
                Err(e) => Err(e.to_string()),
                Ok(()) => {
                    vfps_chaos::platform::local::down(&base).await;
                    Ok(true)
                }
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
