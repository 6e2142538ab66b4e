//! `vfps serve` (the default), `vfps migrate`, `vfps tokens …`, `vfps restore …`,
//! `vfps jobs …` and `vfps pseudonyms …`.

use std::{process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use vfps_server::{
    config::{parse_duration, Flags, Settings, StoreConfig, Tracing},
    startup::{open_store, Application},
    telemetry, tokens,
};
use vfps_store::postgres::PgStore;

/// How long exiting waits for the last spans to reach the collector.
const TRACING_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(name = "vfps", version, about = "The vfps pseudonymization service")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: Flags,
}

#[derive(Subcommand)]
enum Command {
    /// Serve gRPC (:8081), REST and FHIR (:8080) and metrics (:8082). The default.
    Serve,
    /// Apply database migrations and exit.
    Migrate {
        /// Keep retrying while the database is unreachable for up to this long (e.g. 60s).
        #[arg(long, value_parser = parse_wait, default_value = "0s")]
        wait: Duration,
        /// Change nothing: succeed once the schema is at this binary's version
        /// (with --wait, wait for that; an init container waiting for the Job).
        #[arg(long)]
        check: bool,
    },
    /// Create, list and revoke access tokens, directly in the database: the
    /// operator's way to make the first admin token. It needs the database's
    /// credentials and grants anything asked, unchecked; through the API or the
    /// admin UI a caller grants only rights it holds itself.
    Tokens {
        #[command(subcommand)]
        action: TokensAction,
    },
    /// After a restore of the database: hold new originals until an operator
    /// confirms, check the restored database, confirm (PostgreSQL only).
    Restore {
        #[command(subcommand)]
        action: vfps_server::restore_cli::RestoreAction,
    },
    /// Pseudonymize CSV files and follow the jobs, through a running vfps.
    Jobs {
        #[command(subcommand)]
        action: vfps_server::jobs_cli::JobsAction,
    },
    /// Erase an original's entry, through a running vfps.
    Pseudonyms {
        #[command(subcommand)]
        action: vfps_server::pseudonyms_cli::PseudonymsAction,
    },
    /// The key source that seals originals at rest (`VFPS_KEYS`).
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
}

#[derive(Subcommand)]
enum KeysAction {
    /// Write a new key file (mode 0600; an existing file is never
    /// overwritten), or make the key on a PKCS#11 token (AES-256, never
    /// extractable; an existing one is never replaced), and print its key
    /// id. Keep a key file apart from the database and its backups, and
    /// back it up: losing it loses every sealed original (docs/privacy.md).
    Init {
        /// Where: a file path, e.g. /etc/vfps/keys (VFPS_KEYS=file:<it>
        /// then), or a pkcs11: URI (VFPS_KEYS=<it> then).
        path: String,
    },
    #[command(flatten)]
    Versions(vfps_server::keys_cli::KeysCommand),
}

#[derive(Subcommand)]
enum TokensAction {
    /// Create a token; prints its secret on stdout, once (it is stored only as a hash).
    Create {
        /// service-account (vfps_sat_…) or personal (vfps_pat_…).
        #[arg(long, default_value = "service-account")]
        kind: String,
        /// Whose or what the token is, for the list.
        #[arg(long)]
        name: String,
        /// May create and delete namespaces and manage tokens.
        #[arg(long)]
        admin: bool,
        /// A permission grant, e.g. research=write,reverse-lookup or *=read; repeatable.
        #[arg(long = "grant", value_name = "NAMESPACE=PERMISSIONS")]
        grants: Vec<String>,
        /// Lifetime, e.g. 2160h (90 days); without it the token lives until revoked.
        #[arg(long, value_parser = parse_wait)]
        expires_in: Option<Duration>,
    },
    /// List tokens as JSON (never a secret or its hash).
    List,
    /// Revoke a token by its id; it stops working within VFPS_TOKEN_CACHE_DURATION.
    Revoke { id: String },
}

fn parse_wait(raw: &str) -> Result<Duration, String> {
    parse_duration(raw).ok_or_else(|| format!("{raw:?} is not a duration such as 30s or 2m"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut tokens = None;
    let mut restore = None;
    let mut keys = None;
    let flags = cli.flags;
    let (wait, migrate_only, check_only) = match cli.command {
        Some(Command::Jobs { action }) => {
            return client("jobs", vfps_server::jobs_cli::run(action))
        }
        Some(Command::Pseudonyms { action }) => {
            return client("pseudonyms", vfps_server::pseudonyms_cli::run(action))
        }
        Some(Command::Keys {
            action: KeysAction::Init { path },
        }) => {
            // `file:PATH` as VFPS_KEYS spells it is taken too.
            let path = path.strip_prefix("file:").unwrap_or(&path).to_owned();
            if path.starts_with("aws-kms:") {
                eprintln!(
                    "vfps keys: an AWS KMS key is made in KMS (aws kms create-key), not by vfps; \
                     set VFPS_KEYS=aws-kms:<its ARN>"
                );
                return ExitCode::from(2);
            }
            let made = match path.strip_prefix("pkcs11:") {
                Some(rest) => vfps_keys::pkcs11::Pkcs11Uri::parse(rest)
                    .map_err(vfps_core::Error::invalid_argument)
                    .and_then(|uri| uri.init())
                    .map(|id| {
                        (
                            id,
                            "made key",
                            "on the token; set VFPS_KEYS to the URI".to_owned(),
                        )
                    }),
                None => vfps_keys::source::FileKey::init(std::path::Path::new(&path)).map(|id| {
                    let at = format!("to {path}; set VFPS_KEYS=file:{path}");
                    (id, "wrote key", at)
                }),
            };
            return match made {
                Ok((id, did, at)) => {
                    println!("{id}");
                    eprintln!("vfps keys: {did} {id} {at} on every replica");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("vfps keys: {}", e.message);
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Keys {
            action: KeysAction::Versions(command),
        }) => {
            keys = Some(command);
            (Duration::ZERO, false, false)
        }
        None | Some(Command::Serve) => (Duration::ZERO, false, false),
        Some(Command::Migrate { wait, check }) => (wait, true, check),
        Some(Command::Tokens { action }) => {
            tokens = Some(action);
            (Duration::ZERO, false, false)
        }
        Some(Command::Restore { action }) => {
            restore = Some(action);
            (Duration::ZERO, false, false)
        }
    };
    let (settings, notes) = match Settings::load(std::env::vars(), &flags) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vfps: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vfps: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Only `serve` answers calls worth tracing.
    let serving = tokens.is_none() && restore.is_none() && keys.is_none() && !migrate_only;
    let tracing_settings = if serving {
        settings.tracing.clone()
    } else {
        Tracing::default()
    };
    // Inside the runtime: the trace exporter's channel runs on it.
    let telemetry =
        match runtime.block_on(async { telemetry::init(&settings.telemetry, &tracing_settings) }) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("vfps: {e:#}");
                return ExitCode::FAILURE;
            }
        };
    for note in notes {
        tracing::info!("{note}");
    }
    let result = runtime.block_on(async move {
        if let Some(action) = tokens {
            manage_tokens(&settings, action).await
        } else if let Some(command) = keys {
            let store = command_store(&settings).await?;
            vfps_server::keys_cli::run(&settings, store, command).await
        } else if let Some(action) = restore {
            match &settings.store {
                StoreConfig::Postgres(options) => {
                    vfps_server::restore_cli::run(&PgStore::new(options)?, action).await
                }
                StoreConfig::Sqlite(_) => Err(anyhow::anyhow!(
                    "`vfps restore` is for PostgreSQL; this configuration uses SQLite"
                )),
            }
        } else if migrate_only && check_only {
            check_migrations(&settings, wait).await
        } else if migrate_only {
            migrate(&settings, wait).await
        } else {
            serve(settings).await
        }
    });
    // The runtime still runs the exporter's channel; this thread is not one of its workers.
    telemetry.shutdown(TRACING_SHUTDOWN_TIMEOUT);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Said once: in the log, or as a plain line when the log would
            // not show it (RUST_LOG=off).
            if tracing::enabled!(tracing::Level::ERROR) {
                tracing::error!("{e:#}");
            } else {
                eprintln!("vfps: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs a client command (`vfps jobs …`, `vfps pseudonyms …`) to its end: no
/// server settings are read.
fn client(name: &str, command: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vfps: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vfps {name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The store `serve` would use, its schema migrated first: for `vfps
/// tokens …` and `vfps keys …`.
async fn command_store(
    settings: &Settings,
) -> anyhow::Result<std::sync::Arc<dyn vfps_store::Store>> {
    Ok(match &settings.store {
        StoreConfig::Postgres(options) => {
            let store = PgStore::new(options)?;
            store.migrate().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            std::sync::Arc::new(store) as std::sync::Arc<dyn vfps_store::Store>
        }
        StoreConfig::Sqlite(_) => open_store(settings).await?,
    })
}

/// `vfps tokens …`.
async fn manage_tokens(settings: &Settings, action: TokensAction) -> anyhow::Result<()> {
    let store = command_store(settings).await?;
    match action {
        TokensAction::Create {
            kind,
            name,
            admin,
            grants,
            expires_in,
        } => {
            let new = tokens::NewToken::parse(&kind, &name, admin, &grants, expires_in)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let (record, secret) = tokens::create(store.as_ref(), new)
                .await
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            eprintln!("{}", tokens::to_json(&record));
            eprintln!("the secret below is shown only now; store it safely:");
            println!("{}", secret.expose());
        }
        TokensAction::List => {
            let all = store
                .list_tokens()
                .await
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let json: Vec<_> = all.iter().map(tokens::to_json).collect();
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        TokensAction::Revoke { id } => {
            let found = tokens::revoke(store.as_ref(), &id)
                .await
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            if !found {
                anyhow::bail!("no access token has id {id:?}");
            }
            eprintln!("revoked {id}");
        }
    }
    Ok(())
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let app = Application::build(settings).await?;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let why = wait_for_signal().await;
        tracing::info!(signal = why, "received signal");
        token.cancel();
    });
    app.run(shutdown).await
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Succeeds once nothing is pending, waiting up to `wait` (database down or
/// migrations not yet applied by the Job).
async fn check_migrations(settings: &Settings, wait: Duration) -> anyhow::Result<()> {
    let StoreConfig::Postgres(options) = &settings.store else {
        anyhow::bail!("migrate --check needs PostgreSQL (ConnectionStrings__PostgreSQL); SQLite migrates at start-up");
    };
    let store = PgStore::new(options)?;
    let give_up = tokio::time::Instant::now() + wait;
    loop {
        let why = match store.pending_migrations().await {
            Ok(p) if p.is_empty() => {
                tracing::info!("database schema is up to date");
                return Ok(());
            }
            Ok(p) => format!("migrations {p:?} are not applied yet"),
            Err(e) if e.is_transient() => e.message,
            Err(e) => anyhow::bail!("cannot check migrations: {e}"),
        };
        if tokio::time::Instant::now() >= give_up {
            anyhow::bail!("schema not ready: {why}");
        }
        tracing::info!(reason = %why, "waiting for migrations");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Migrates, retrying an unreachable database for up to `wait`.
async fn migrate(settings: &Settings, wait: Duration) -> anyhow::Result<()> {
    let StoreConfig::Postgres(options) = &settings.store else {
        open_store(settings).await?;
        tracing::info!("SQLite database migrated");
        return Ok(());
    };
    let store = PgStore::new(options)?;
    let give_up = tokio::time::Instant::now() + wait;
    loop {
        match store.migrate().await {
            Ok(report) => {
                tracing::info!(
                    applied = ?report.applied,
                    already_applied = ?report.already_applied,
                    adopted_upstream = report.adopted_upstream,
                    "migrations done"
                );
                return Ok(());
            }
            Err(e) if e.is_transient() && tokio::time::Instant::now() < give_up => {
                tracing::info!(error = %e, "database not reachable yet; waiting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => anyhow::bail!("migration failed: {e}"),
        }
    }
}
