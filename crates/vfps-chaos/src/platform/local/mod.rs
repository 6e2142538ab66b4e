//! The local platform: the HA topology of DESIGN §1 on one Linux machine.
//!
//! Pods are network namespaces on a bridge, nodes are zones a, b, c: each zone has
//! a database pod (`vfps-db-<z>`: Patroni + PostgreSQL) and a vfps pod
//! (`vfps-app-<z>`), and an object store node (`vfps-s3-<z>`: Garage, for CSV
//! jobs). The control plane (etcd, the generator, this driver) stays in
//! the root namespace on the bridge address. Addresses are in 10.213.0.0/24, used
//! only inside these namespaces. Every process started is recorded by PID, so
//! `down` works after a crash.
//!
//! # Layout
//! - this file: addresses, [`Options`], [`Local`] and its `up`.
//! - [`network`]: pods as network namespaces on a bridge, the PID registry,
//!   `down`.
//! - [`database`]: etcd, Patroni and PostgreSQL, the application database.
//! - [`replicas`]: the vfps replicas and their supervisor (the local ReplicaSet).
//! - [`objects`]: the object store (Garage, three nodes, one per zone).
//! - [`front`]: the web UI's front door — the identity provider and the load
//!   balancer before the replicas.
//! - [`faults`]: the shared scenarios' faults on this platform.
//! - [`cuts`]: network cuts (nftables in a pod's namespace).
//! - [`probe`]: behavioural proofs — TCP connects from inside a pod, WAL positions.
//! - [`evidence`]: the HA manager's view and every log, into the run directory.
//! - [`driver`]: `vfps-chaos local …`, the driver steps.
//! - [`summary`]: what `up` made and how to reach it, on stdout.
//! - [`restore`]: `local restore`, put back as it was when it fails.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::bail;

use super::net::cmd;

pub mod at_rest;
pub mod backups;
pub mod cuts;
pub mod database;
pub mod drill;
pub mod driver;
pub mod erased_rows;
pub mod evidence;
pub mod faults;
pub mod front;
pub mod network;
pub mod objects;
pub mod patroni;
pub mod probe;
pub mod replicas;
pub mod restore;
pub mod summary;

pub use network::down;

/// Where the topology's state lives unless `--base` says otherwise.
pub const DEFAULT_BASE: &str = "/tmp/vfps-chaos-local";

pub const ZONES: [&str; 3] = ["a", "b", "c"];
pub(crate) const BRIDGE: &str = "vfpsbr0";
pub(crate) const CONTROL_PLANE: &str = "10.213.0.1";
pub(crate) const ETCD: &str = "10.213.0.1:2379";
pub(crate) const APP_PASSWORD: &str = "vfps-local-password";
/// The user PostgreSQL and Patroni run as (PostgreSQL refuses root).
pub(crate) const POSTGRES: &str = "postgres";

pub fn db_ip(zone: &str) -> String {
    format!("10.213.0.1{}", zone_index(zone) + 1)
}
pub fn app_ip(zone: &str) -> String {
    format!("10.213.0.2{}", zone_index(zone) + 1)
}
fn zone_index(zone: &str) -> usize {
    ZONES.iter().position(|z| *z == zone).unwrap_or(0)
}

pub fn s3_ip(zone: &str) -> String {
    format!("10.213.0.3{}", zone_index(zone) + 1)
}

/// The zone of a database instance (`db-b`) or a replica (`vfps-app-b`).
pub(crate) fn zone_of(name: &str) -> anyhow::Result<&str> {
    let zone = name
        .strip_prefix("db-")
        .or_else(|| name.strip_prefix("vfps-app-"))
        .unwrap_or(name);
    if !ZONES.contains(&zone) {
        bail!("{name:?} is not a local pod (zones: {})", ZONES.join(", "));
    }
    Ok(zone)
}

pub fn tokens_dir(base: &Path) -> PathBuf {
    base.join("tokens")
}

/// Writes a secret readable by its owner only (0600, whatever it was).
pub(crate) fn write_secret(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if path.exists() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?
        .write_all(contents)
}

/// The gRPC endpoints of the three replicas (the local headless Service).
pub fn grpc_endpoints() -> String {
    ZONES
        .map(|z| format!("http://{}:8081", app_ip(z)))
        .join(",")
}

/// The `-rw` Service: every database host, read-write sessions only; a host
/// that does not complete a connection within 2 s (a paused or blackholed one)
/// is tried last for the next 10 s (`Host Recheck Seconds`).
pub fn connection_string() -> String {
    let hosts = ZONES.map(db_ip).join(",");
    format!(
        "Host={hosts};Port=5432;Database=vfps;Username=vfps;Password={APP_PASSWORD};\
         Target Session Attributes=read-write;Timeout=2;Command Timeout=10;Keepalive=2;Maximum Pool Size=20"
    )
}

/// How the database replicates. `safe` is the production setting; `unsafe-async`
/// exists to show that the harness detects a known loss: everything is equal
/// except that a commit does not wait for a standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DatabaseProfile {
    /// Patroni synchronous mode, strict: a commit is acknowledged once a standby has it.
    #[default]
    Safe,
    /// Asynchronous replication: a failover may lose acknowledged commits.
    UnsafeAsync,
}

impl DatabaseProfile {
    pub fn name(self) -> &'static str {
        match self {
            DatabaseProfile::Safe => "safe",
            DatabaseProfile::UnsafeAsync => "unsafe-async",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [DatabaseProfile::Safe, DatabaseProfile::UnsafeAsync]
            .into_iter()
            .find(|p| p.name() == s.trim())
    }
}

/// Tunables of the topology.
#[derive(Debug, Clone)]
pub struct Options {
    pub base: PathBuf,
    pub vfps_bin: PathBuf,
    /// Time a killed replica stays down before the supervisor restarts it.
    pub restart_backoff: Duration,
    /// Graceful stop: SIGTERM, then this long before SIGKILL.
    pub grace_period: Duration,
    /// How the database replicates (`up` records it; later steps read it back).
    pub profile: DatabaseProfile,
    /// Stand up the web UI's identity provider and load balancer, and run
    /// the browser probe beside the load.
    pub ui: bool,
    /// The browser tests' folder: the provider's and the probe's scripts.
    pub ui_tests_dir: PathBuf,
    /// Continuous backup of the database to the object store's own backup
    /// bucket, with this archiving (`None`: no WAL archive, no base backup).
    pub backup: Option<crate::backup::Archiving>,
    /// Originals sealed at rest: `up` writes a key file and the replicas
    /// get `VFPS_KEYS` (later steps see the file).
    pub sealed: bool,
}

/// The file under the base directory that records the profile `up` built.
fn profile_file(opts: &Options) -> PathBuf {
    opts.base.join("database-profile.txt")
}

/// The file that records `up`'s archiving (`archive_timeout` in seconds),
/// for later steps (a restore's members archive as `up` made them).
fn archiving_file(opts: &Options) -> PathBuf {
    opts.base.join("archive-timeout-seconds.txt")
}

/// The running topology. All state lives in processes and files under the base
/// directory, so `up`, `scenarios`, `collect` and `down` can be separate commands.
pub struct Local {
    pub opts: Options,
}

/// Requires root (namespaces, nftables, running PostgreSQL as `postgres`).
pub fn require_root() -> anyhow::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        bail!("the local platform needs root (network namespaces, nftables); run it with sudo");
    }
    Ok(())
}

/// Every path the `postgres` user must use, checked as `postgres` before
/// anything is made: the base directory (handed to it by `up`), Patroni's
/// installation and PostgreSQL's binaries.
async fn postgres_can_reach(opts: &Options) -> anyhow::Result<()> {
    use super::run_as::{check, Access, Need};
    let patroni = patroni::patroni_tool("python3");
    let venv = patroni
        .parent()
        .and_then(|bin| bin.parent())
        .map(|d| d.join("pyvenv.cfg"))
        .unwrap_or_default();
    check(
        POSTGRES,
        &[
            Need {
                path: opts.base.clone(),
                access: Access::Reach,
                elsewhere: "set --base (VFPS_CHAOS_BASE) to a folder postgres can reach",
            },
            Need {
                path: patroni,
                access: Access::Execute,
                elsewhere: "install Patroni where postgres can reach it \
                            (VFPS_PATRONI_DIR=<folder> scripts/install-deps.sh)",
            },
            Need {
                path: venv,
                access: Access::Read,
                elsewhere: "install Patroni where postgres can reach it \
                            (VFPS_PATRONI_DIR=<folder> scripts/install-deps.sh)",
            },
            Need {
                path: patroni::pg_bindir().join("postgres"),
                access: Access::Execute,
                elsewhere: "reinstall PostgreSQL (apt-get install --reinstall postgresql-15)",
            },
        ],
    )
    .await
}

impl Local {
    /// `program` as `postgres`, in the base directory (which `up` hands to
    /// `postgres`), never in the caller's: [`super::run_as`].
    pub(crate) fn as_postgres(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> tokio::process::Command {
        super::run_as::command(POSTGRES, &self.opts.base, program)
    }

    /// Builds the topology to steady state: 3 database members (a leader, a
    /// synchronous standby, a replica, all running), 3 object store nodes
    /// and 3 ready replicas. A
    /// stale previous run is removed first. On failure, what was built is left
    /// for the evidence and for `down`.
    pub async fn up(opts: Options, events: &dyn Fn(&str)) -> anyhow::Result<Local> {
        require_root()?;
        if opts.ui {
            crate::checkout::require(&opts.ui_tests_dir, crate::checkout::UI_TESTS)?;
        }
        postgres_can_reach(&opts).await?;
        down(&opts.base).await;
        let base = &opts.base;
        std::fs::create_dir_all(base)?;
        std::fs::write(profile_file(&opts), opts.profile.name())?;
        if let Some(a) = opts.backup {
            std::fs::write(archiving_file(&opts), a.timeout.as_secs().to_string())?;
        }
        cmd("chown", &["postgres:postgres", &base.display().to_string()]).await?;
        network::create().await?;
        events("network ready");
        patroni::start_etcd(base).await?;
        events("etcd healthy");
        let local = Local { opts: opts.clone() };
        // Archiving starts with the database: its bucket must exist first.
        if opts.backup.is_some() {
            local.start_objects().await?;
            local.create_backup_bucket().await?;
            events("object store healthy (3 Garage nodes), backup bucket made");
        }
        local.start_database().await?;
        events("database cluster healthy");
        local.create_app_database().await?;
        events("migrations applied");
        if opts.backup.is_some() {
            let id = local.base_backup().await?;
            events(&format!(
                "base backup {id} in bucket {}",
                backups::BACKUP_BUCKET
            ));
        } else {
            local.start_objects().await?;
            events("object store healthy (3 Garage nodes)");
        }
        if opts.ui {
            local.start_front().await?;
            events("identity provider healthy, load balancer started");
        }
        local.start_replicas().await?;
        events("3 replicas ready");
        if opts.ui {
            local.wait_ingress(Duration::from_secs(30)).await?;
            events("the load balancer serves the UI");
        }
        Ok(local)
    }

    /// Attaches to a topology a previous `up` left running, with the database
    /// profile it was built with.
    pub fn attach(mut opts: Options) -> anyhow::Result<Local> {
        require_root()?;
        let etcd = network::read_pid(&network::pid_file("etcd"));
        if !opts.base.exists() || !etcd.is_some_and(super::net::alive) {
            bail!(
                "no running local topology under {} (run `up` first)",
                opts.base.display()
            );
        }
        if let Some(p) = std::fs::read_to_string(profile_file(&opts))
            .ok()
            .and_then(|s| DatabaseProfile::parse(&s))
        {
            opts.profile = p;
        }
        if let Some(seconds) = std::fs::read_to_string(archiving_file(&opts))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            opts.backup = Some(crate::backup::Archiving {
                timeout: Duration::from_secs(seconds),
            });
        }
        Ok(Local { opts })
    }

    /// Tears everything down.
    pub async fn shutdown(&self) {
        down(&self.opts.base).await;
    }

    /// Waits for the topology at steady state (before scenarios run on it).
    pub async fn wait_steady(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_db_healthy(timeout).await?;
        self.wait_replicas_ready(timeout).await
    }
}
