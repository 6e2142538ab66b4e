//! `vfps-chaos backup …`: the operator's commands on any host that runs
//! PostgreSQL — what a restore would use, a base backup, the restore itself.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use super::{
    restore::{restore, Instance},
    Bucket, RestoreTo,
};

/// The bucket and the cluster's name in it; the key from the environment
/// (never a flag: it would show in the process list).
#[derive(Args, Debug)]
pub struct BucketArgs {
    /// The S3 endpoint (path-style), e.g. http://10.213.0.31:3900.
    #[arg(long, env = "VFPS_BACKUP_ENDPOINT")]
    endpoint: String,
    #[arg(long, env = "VFPS_BACKUP_BUCKET")]
    bucket: String,
    /// The cluster's name in the bucket (barman's server name).
    #[arg(long, env = "VFPS_BACKUP_CLUSTER")]
    cluster: String,
    #[arg(long, env = "VFPS_BACKUP_REGION", default_value = "garage")]
    region: String,
}

impl BucketArgs {
    fn bucket(self) -> anyhow::Result<Bucket> {
        let key = |name: &str| {
            std::env::var(name).with_context(|| format!("{name} is not set (the bucket's key)"))
        };
        Ok(Bucket {
            endpoint: self.endpoint,
            bucket: self.bucket,
            region: self.region,
            cluster: self.cluster,
            access_key: key("AWS_ACCESS_KEY_ID")?,
            secret_key: key("AWS_SECRET_ACCESS_KEY")?,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum BackupCommand {
    /// Which base backup a restore to --to would use, and how far the
    /// archive reaches; or why a restore would be refused.
    Plan {
        #[command(flatten)]
        bucket: BucketArgs,
        #[arg(long, default_value = "latest")]
        to: RestoreTo,
    },
    /// Take a base backup of the server at --host/--port (run it where the
    /// server's data directory is readable).
    BaseBackup {
        #[command(flatten)]
        bucket: BucketArgs,
        /// A socket directory or an address.
        #[arg(long)]
        host: String,
        #[arg(long, default_value_t = 5432)]
        port: u16,
        #[arg(long, default_value = "postgres")]
        user: String,
    },
    /// Delete the base backups (and the WAL only they need) the retention no
    /// longer keeps: a recovery window (30d, 4w, 3m) or a number of base
    /// backups (3). Run it on a schedule, as CloudNativePG's retentionPolicy does.
    Prune {
        #[command(flatten)]
        bucket: BucketArgs,
        #[arg(long)]
        retention: super::Retention,
    },
    /// Restore a fresh instance from the bucket alone into an empty
    /// --data-dir, recover it to --to, promote it; then, with --vfps-bin,
    /// open the restore hold (`vfps restore hold`).
    Restore {
        #[command(flatten)]
        bucket: BucketArgs,
        /// `latest`, or a UTC time such as 2026-12-05T09:30:00Z.
        #[arg(long)]
        to: RestoreTo,
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 5432)]
        port: u16,
        /// listen_addresses of the restored instance ('' for sockets only).
        #[arg(long, default_value = "")]
        listen: String,
        #[arg(long)]
        socket_dir: PathBuf,
        /// Where the restore_command's S3 credentials are written.
        #[arg(long)]
        credentials_dir: PathBuf,
        /// PostgreSQL's binaries (default: the newest under /usr/lib/postgresql).
        #[arg(long)]
        bindir: Option<PathBuf>,
        #[arg(long, default_value = "postgres")]
        run_as: String,
        #[arg(long, default_value = "600", value_parser = parse_seconds)]
        recovery_timeout: Duration,
        /// The vfps binary whose `restore hold` is run against
        /// $ConnectionStrings__PostgreSQL after promotion.
        #[arg(long)]
        vfps_bin: Option<PathBuf>,
    },
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("{s:?} is not a whole number of seconds"))
}

impl BackupCommand {
    /// Runs the command; what it found on stdout.
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            Self::Plan { bucket, to } => {
                let plan = bucket.bucket()?.plan(to).await?;
                println!(
                    "restore would use base backup {} of cluster {} and replay WAL up to segment {} \
                     (the end of the archive; recovery stops at the target); clusters looked at: {}",
                    plan.backup_id,
                    plan.cluster,
                    plan.last_wal,
                    plan.chain.join(" ← ")
                );
            }
            Self::Prune { bucket, retention } => {
                let bucket = bucket.bucket()?;
                bucket.prune(retention).await?;
                println!(
                    "pruned to {retention:?}: {} base backups kept",
                    bucket.backups().await?.len()
                );
            }
            Self::BaseBackup {
                bucket,
                host,
                port,
                user,
            } => {
                let id = bucket.bucket()?.base_backup(&host, port, &user).await?;
                println!("base backup {id} done");
            }
            Self::Restore {
                bucket,
                to,
                data_dir,
                port,
                listen,
                socket_dir,
                credentials_dir,
                bindir,
                run_as,
                recovery_timeout,
                vfps_bin,
            } => {
                let bucket = bucket.bucket()?;
                let instance = Instance {
                    data_dir,
                    socket_dir,
                    port,
                    listen,
                    bindir: bindir.unwrap_or_else(super::restore::pg_bindir),
                    run_as: Some(run_as),
                    recovery_timeout,
                };
                let restored = restore(&bucket, to, &instance, &credentials_dir).await?;
                println!(
                    "restored from base backup {} of cluster {} (archive read up to {}) in {:.1} s; promoted",
                    restored.plan.backup_id,
                    restored.plan.cluster,
                    restored.plan.last_wal,
                    restored.took.as_secs_f64()
                );
                if let Some(vfps) = vfps_bin {
                    let conn = std::env::var("ConnectionStrings__PostgreSQL").context(
                        "ConnectionStrings__PostgreSQL is not set (the restored database, for vfps restore hold)",
                    )?;
                    hold(&vfps, to, &conn).await?;
                }
            }
        }
        Ok(())
    }
}

/// `vfps restore hold --to …` against the restored database.
pub async fn hold(vfps: &std::path::Path, to: RestoreTo, connection: &str) -> anyhow::Result<()> {
    let to = to.to_string();
    let out = tokio::process::Command::new(vfps)
        .args(["restore", "hold", "--to", &to])
        .env("ConnectionStrings__PostgreSQL", connection)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", vfps.display()))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        bail!(
            "vfps restore hold failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `vfps restore confirm` against the restored database: it checks the
/// database again and lifts the hold, or refuses naming what failed.
pub async fn confirm(vfps: &std::path::Path, connection: &str) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(vfps)
        .args(["restore", "confirm"])
        .env("ConnectionStrings__PostgreSQL", connection)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", vfps.display()))?;
    if !out.status.success() {
        bail!(
            "vfps restore confirm failed: {} {}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
