//! The local platform: the HA topology of DESIGN §1 on one Linux machine.
//!
//! Pods are network namespaces on a bridge, nodes are zones a, b, c: each zone has
//! a database pod (`vfps-db-<z>`: Patroni + PostgreSQL) and a vfps pod
//! (`vfps-app-<z>`). The control plane (etcd, the generator, this driver) stays in
//! the root namespace on the bridge address. Addresses are in 10.213.0.0/24, used
//! only inside these namespaces. Every process started is recorded by PID under
//! the base directory, so `down` works after a crash.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::net::{alive, cmd, cmd_quiet, http_get, signal, wait_for};
use crate::nemesis::{Instance, Knobs, Recorder, Victim};

pub const ZONES: [&str; 3] = ["a", "b", "c"];
const BRIDGE: &str = "vfpsbr0";
const CONTROL_PLANE: &str = "10.213.0.1";
const ETCD: &str = "10.213.0.1:2379";
const APP_PASSWORD: &str = "vfps-local-password";
/// Runs the rest of a command line as `postgres` (PostgreSQL refuses root); it
/// execs, so the process keeps its PID.
const AS_POSTGRES: [&str; 6] = [
    "setpriv",
    "--reuid",
    "postgres",
    "--regid",
    "postgres",
    "--init-groups",
];
/// Name of the nftables table the partition fault adds in the vfps pods.
const PARTITION_TABLE: &str = "vfps_chaos";

pub fn db_ip(zone: &str) -> String {
    format!("10.213.0.1{}", zone_index(zone) + 1)
}
pub fn app_ip(zone: &str) -> String {
    format!("10.213.0.2{}", zone_index(zone) + 1)
}
fn zone_index(zone: &str) -> usize {
    ZONES.iter().position(|z| *z == zone).unwrap_or(0)
}

/// The gRPC endpoints of the three replicas (the local headless Service).
pub fn grpc_endpoints() -> String {
    ZONES
        .map(|z| format!("http://{}:8081", app_ip(z)))
        .join(",")
}

/// The `-rw` Service: every database host, read-write sessions only, and timeouts
/// short enough that a blackholed host costs well under a second per attempt.
pub fn connection_string() -> String {
    let hosts = ZONES.map(db_ip).join(",");
    format!(
        "Host={hosts};Port=5432;Database=vfps;Username=vfps;Password={APP_PASSWORD};\
         Target Session Attributes=read-write;Timeout=0.5;Command Timeout=10;Keepalive=2;Maximum Pool Size=20"
    )
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
}

/// One member of the Patroni cluster, from its REST API.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub name: String,
    pub role: String,
    pub state: String,
    #[serde(default)]
    pub lag: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct ClusterView {
    members: Vec<Member>,
}

/// The running topology. All state lives in processes and files under the base
/// directory, so `up`, `scenarios`, `collect` and `down` can be separate commands.
pub struct Local {
    pub opts: Options,
}

fn pid_file(name: &str) -> PathBuf {
    pids_dir().join(format!("{name}.pid"))
}

fn write_pid(name: &str, pid: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(pids_dir())?;
    std::fs::write(pid_file(name), pid.to_string())?;
    Ok(())
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
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

/// Removes everything a previous run created: processes by recorded PID,
/// namespaces, the bridge, the base directory. Idempotent.
pub async fn down(base: &Path) {
    // Recorded PIDs first (replica supervisors, so nothing respawns; etcd).
    let registry = pids_dir();
    if let Ok(entries) = std::fs::read_dir(&registry) {
        for e in entries.flatten() {
            if let Some(pid) = read_pid(&e.path()) {
                if alive(pid) {
                    let _ = signal(pid, "KILL").await;
                }
            }
        }
    }
    // Everything inside our pods (Patroni, every PostgreSQL process, vfps),
    // found by namespace, so nothing survives even after a crash lost its PIDs.
    for ns in namespaces() {
        if let Ok(out) = cmd("ip", &["netns", "pids", &ns]).await {
            for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                let _ = signal(pid, "KILL").await;
            }
        }
    }
    let _ = wait_for("processes to exit", Duration::from_secs(10), || async {
        for ns in namespaces() {
            if cmd("ip", &["netns", "pids", &ns])
                .await
                .is_ok_and(|o| o.split_whitespace().next().is_some())
            {
                return false;
            }
        }
        std::fs::read_dir(pids_dir())
            .map(|es| {
                es.flatten()
                    .all(|e| read_pid(&e.path()).is_none_or(|p| !alive(p)))
            })
            .unwrap_or(true)
    })
    .await;
    for ns in namespaces() {
        cmd_quiet("ip", &["netns", "del", &ns]).await;
    }
    for z in ZONES {
        cmd_quiet("ip", &["link", "del", &format!("vfpsd{z}")]).await;
        cmd_quiet("ip", &["link", "del", &format!("vfpsa{z}")]).await;
    }
    cmd_quiet("ip", &["link", "del", BRIDGE]).await;
    let _ = std::fs::remove_dir_all(base);
    let _ = std::fs::remove_dir_all(registry);
}

fn namespaces() -> Vec<String> {
    ZONES
        .iter()
        .flat_map(|z| [format!("vfps-db-{z}"), format!("vfps-app-{z}")])
        .collect()
}

/// Where PIDs are recorded: one fixed place whatever the base directory, because
/// the network names are fixed too and a stale run must be found by the next one.
fn pids_dir() -> PathBuf {
    std::env::temp_dir().join("vfps-chaos-local-pids")
}

async fn add_pod(ns: &str, veth: &str, ip: &str) -> anyhow::Result<()> {
    cmd("ip", &["netns", "add", ns]).await?;
    cmd(
        "ip",
        &[
            "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ],
    )
    .await?;
    cmd("ip", &["link", "set", veth, "master", BRIDGE, "up"]).await?;
    cmd(
        "ip",
        &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
    )
    .await?;
    cmd("ip", &["-n", ns, "link", "set", "eth0", "up"]).await?;
    cmd("ip", &["-n", ns, "link", "set", "lo", "up"]).await?;
    Ok(())
}

fn patroni_config(base: &Path, zone: &str) -> String {
    let dir = base.join(format!("db-{zone}"));
    let ip = db_ip(zone);
    format!(
        r#"scope: vfps
name: db-{zone}
restapi:
  listen: {ip}:8008
  connect_address: {ip}:8008
etcd3:
  hosts: {ETCD}
bootstrap:
  dcs:
    ttl: 5
    loop_wait: 1
    retry_timeout: 2
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: false
      parameters:
        wal_retrieve_retry_interval: 500ms
        shared_buffers: 32MB
        max_connections: 200
        wal_log_hints: 'on'
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: md5
postgresql:
  listen: {ip}:5432
  connect_address: {ip}:5432
  data_dir: {dir}/data
  bin_dir: {bindir}
  pgpass: {dir}/pgpass
  authentication:
    superuser: {{username: postgres, password: local-superuser}}
    replication: {{username: replicator, password: local-replicator}}
    rewind: {{username: rewinder, password: local-rewinder}}
  parameters:
    unix_socket_directories: '{dir}'
    logging_collector: 'on'
    log_directory: '{dir}/log'
    log_filename: 'postgresql.log'
  pg_hba:
    - local all all trust
    - host replication replicator 10.213.0.0/24 md5
    - host all all 10.213.0.0/24 md5
"#,
        dir = dir.display(),
        bindir = pg_bindir().display(),
    )
}

fn pg_bindir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|es| {
            es.flatten()
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

impl Local {
    /// Builds the topology to steady state: 3 database members (a leader, a
    /// synchronous standby, a replica, all running) and 3 ready replicas.
    pub async fn up(opts: Options, events: &dyn Fn(&str)) -> anyhow::Result<Local> {
        require_root()?;
        down(&opts.base).await;
        let base = &opts.base;
        std::fs::create_dir_all(base)?;
        cmd("chown", &["postgres:postgres", &base.display().to_string()]).await?;

        cmd("ip", &["link", "add", BRIDGE, "type", "bridge"]).await?;
        cmd(
            "ip",
            &["addr", "add", &format!("{CONTROL_PLANE}/24"), "dev", BRIDGE],
        )
        .await?;
        cmd("ip", &["link", "set", BRIDGE, "up"]).await?;
        for z in ZONES {
            add_pod(&format!("vfps-db-{z}"), &format!("vfpsd{z}"), &db_ip(z)).await?;
            add_pod(&format!("vfps-app-{z}"), &format!("vfpsa{z}"), &app_ip(z)).await?;
        }
        events("network ready");

        let etcd_log = std::fs::File::create(base.join("etcd.log"))?;
        let etcd = tokio::process::Command::new("etcd")
            .args([
                "--name",
                "cp",
                "--data-dir",
                &base.join("etcd").display().to_string(),
            ])
            .args([
                "--listen-client-urls",
                &format!("http://{ETCD}"),
                "--advertise-client-urls",
                &format!("http://{ETCD}"),
            ])
            // Peers on the bridge address too: an etcd the distribution may have
            // started on localhost keeps its ports.
            .args([
                "--listen-peer-urls",
                "http://10.213.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://10.213.0.1:2380",
            ])
            .args([
                "--initial-cluster",
                "cp=http://10.213.0.1:2380",
                "--heartbeat-interval",
                "100",
                "--election-timeout",
                "1000",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(etcd_log.try_clone()?)
            .stderr(etcd_log)
            .spawn()
            .context("cannot start etcd (apt-get install etcd-server)")?;
        write_pid("etcd", etcd.id().unwrap_or_default())?;
        wait_for("etcd", Duration::from_secs(20), || async {
            http_get(ETCD, "/health", Duration::from_secs(1))
                .await
                .is_ok_and(|(s, b)| s == 200 && b.contains("true"))
        })
        .await?;
        events("etcd healthy");

        let local = Local { opts: opts.clone() };
        for z in ZONES {
            let dir = base.join(format!("db-{z}"));
            std::fs::create_dir_all(dir.join("log"))?;
            std::fs::write(dir.join("patroni.yml"), patroni_config(base, z))?;
            cmd(
                "chown",
                &["-R", "postgres:postgres", &dir.display().to_string()],
            )
            .await?;
            local.start_db(z).await?;
        }
        local.wait_db_healthy(Duration::from_secs(90)).await?;
        events("database cluster healthy");

        // The application role and database (non-superuser owner), then the
        // migrations "Job" — after the standbys stream, as strict sync requires.
        let leader = local.leader().await?.context("no leader after bootstrap")?;
        let zone = leader.name.trim_start_matches("db-").to_owned();
        let socket = base.join(format!("db-{zone}")).display().to_string();
        local
            .psql(
                &socket,
                &format!("CREATE ROLE vfps LOGIN PASSWORD '{APP_PASSWORD}'"),
            )
            .await?;
        local
            .psql(&socket, "CREATE DATABASE vfps OWNER vfps")
            .await?;
        let out = tokio::process::Command::new(&opts.vfps_bin)
            .args(["migrate", "--wait", "60s"])
            .env("ConnectionStrings__PostgreSQL", connection_string())
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "vfps migrate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        events("migrations applied");

        for z in ZONES {
            local.supervise(z)?;
        }
        local.wait_replicas_ready(Duration::from_secs(60)).await?;
        events("3 replicas ready");
        Ok(local)
    }

    async fn psql(&self, socket: &str, sql: &str) -> anyhow::Result<String> {
        let bin = pg_bindir().join("psql").display().to_string();
        let mut args = AS_POSTGRES[1..].to_vec();
        args.extend([
            bin.as_str(),
            "-X",
            "-q",
            "-A",
            "-t",
            "-h",
            socket,
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ]);
        cmd(AS_POSTGRES[0], &args).await
    }

    /// Starts a database pod's Patroni (which starts PostgreSQL).
    pub async fn start_db(&self, zone: &str) -> anyhow::Result<()> {
        let dir = self.opts.base.join(format!("db-{zone}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("patroni.log"))?;
        // `ip netns exec` and `setpriv` exec, so the PID is Patroni's own.
        let child = tokio::process::Command::new("ip")
            .args(["netns", "exec", &format!("vfps-db-{zone}")])
            .args(AS_POSTGRES)
            .args(["patroni", &dir.join("patroni.yml").display().to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start patroni (apt-get install patroni)")?;
        write_pid(&format!("patroni-{zone}"), child.id().unwrap_or_default())?;
        // The child is reaped by a task; it is stopped by PID.
        tokio::spawn(async move {
            let mut child = child;
            let _ = child.wait().await;
        });
        Ok(())
    }

    /// SIGKILLs a database pod: Patroni and the postmaster it does not parent.
    /// Returns once both are gone.
    pub async fn kill_db(&self, zone: &str) -> anyhow::Result<()> {
        let patroni = read_pid(&pid_file(&format!("patroni-{zone}")));
        let postmaster = read_pid(
            &self
                .opts
                .base
                .join(format!("db-{zone}/data/postmaster.pid")),
        );
        let pids: Vec<u32> = [patroni, postmaster]
            .into_iter()
            .flatten()
            .filter(|p| alive(*p))
            .collect();
        if pids.is_empty() {
            bail!("database pod {zone} has no running process to kill");
        }
        for pid in &pids {
            signal(*pid, "KILL").await?;
        }
        wait_for(
            &format!("database pod {zone} to die"),
            Duration::from_secs(10),
            || async { pids.iter().all(|p| !alive(*p)) },
        )
        .await
    }

    /// The cluster as Patroni's REST API reports it (any reachable member).
    pub async fn members(&self) -> anyhow::Result<Vec<Member>> {
        let mut last = None;
        for z in ZONES {
            match http_get(
                &format!("{}:8008", db_ip(z)),
                "/cluster",
                Duration::from_millis(800),
            )
            .await
            {
                Ok((200, body)) => return Ok(serde_json::from_str::<ClusterView>(&body)?.members),
                Ok((status, _)) => last = Some(anyhow::anyhow!("HTTP {status}")),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no Patroni member answered")))
    }

    pub async fn leader(&self) -> anyhow::Result<Option<Member>> {
        Ok(self
            .members()
            .await?
            .into_iter()
            .find(|m| m.role == "leader" && m.state == "running"))
    }

    /// Healthy: three members, one running leader, a streaming synchronous standby,
    /// and the third streaming too.
    /// Every member must answer its own REST API: the cluster view in etcd keeps
    /// a dead member until its TTL expires.
    pub async fn db_healthy(&self) -> bool {
        for z in ZONES {
            let live = http_get(
                &format!("{}:8008", db_ip(z)),
                "/liveness",
                Duration::from_millis(800),
            )
            .await;
            if !live.is_ok_and(|(s, _)| s == 200) {
                return false;
            }
        }
        let Ok(m) = self.members().await else {
            return false;
        };
        let running = |m: &Member| m.state == "running" || m.state == "streaming";
        m.len() == 3
            && m.iter()
                .filter(|x| x.role == "leader" && x.state == "running")
                .count()
                == 1
            && m.iter().any(|x| x.role == "sync_standby" && running(x))
            && m.iter().all(running)
    }

    pub async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            "a healthy database cluster (leader, sync standby, replica)",
            timeout,
            || self.db_healthy(),
        )
        .await
    }

    /// Attaches to a topology a previous `up` left running.
    pub fn attach(opts: Options) -> anyhow::Result<Local> {
        require_root()?;
        let etcd = read_pid(&pid_file("etcd"));
        if !opts.base.exists() || !etcd.is_some_and(alive) {
            bail!(
                "no running local topology under {} (run `up` first)",
                opts.base.display()
            );
        }
        Ok(Local { opts })
    }

    fn app_dir(&self, zone: &str) -> PathBuf {
        self.opts.base.join(format!("app-{zone}"))
    }

    /// Starts the supervisor of a replica (the local ReplicaSet): a shell loop
    /// that restarts vfps after a back-off, at once after a requested restart,
    /// and not while the replica's node is drained (`paused` file).
    fn supervise(&self, zone: &str) -> anyhow::Result<()> {
        let dir = self.app_dir(zone);
        std::fs::create_dir_all(&dir)?;
        let script = format!(
            r#"while :; do
  if [ -e "{dir}/paused" ]; then sleep 0.2; continue; fi
  echo start >> "{dir}/starts"
  ip netns exec vfps-app-{zone} "{bin}" serve --listen-address 0.0.0.0 >> "{log}" 2>&1
  if [ -e "{dir}/restart-now" ]; then rm -f "{dir}/restart-now"; else sleep {backoff}; fi
done"#,
            dir = dir.display(),
            bin = self.opts.vfps_bin.display(),
            log = self.opts.base.join(format!("vfps-{zone}.log")).display(),
            backoff = self.opts.restart_backoff.as_secs_f64(),
        );
        let child = tokio::process::Command::new("sh")
            .args(["-c", &script])
            .env("ConnectionStrings__PostgreSQL", connection_string())
            .env("VFPS_SHUTDOWN_PRE_STOP_DELAY", "1s")
            .env(
                "VFPS_SHUTDOWN_TIMEOUT",
                format!(
                    "{}s",
                    self.opts.grace_period.as_secs().saturating_sub(2).max(1)
                ),
            )
            .env("Pseudonymization__Caching__Namespaces__IsEnabled", "true")
            .env("VFPS_LOG_JSON", "true")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        write_pid(
            &format!("supervisor-{zone}"),
            child.id().unwrap_or_default(),
        )?;
        Ok(())
    }

    /// The running vfps process of a replica (the only process in its pod).
    pub async fn replica_pid(&self, zone: &str) -> Option<u32> {
        let out = cmd("ip", &["netns", "pids", &format!("vfps-app-{zone}")])
            .await
            .ok()?;
        out.split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                alive(*p)
                    && std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "vfps")
            })
    }

    /// How many times the supervisor has started the replica.
    pub async fn replica_starts(&self, zone: &str) -> u32 {
        std::fs::read_to_string(self.app_dir(zone).join("starts"))
            .map_or(0, |s| s.lines().count() as u32)
    }

    pub async fn replica_ready(&self, zone: &str) -> bool {
        http_get(
            &format!("{}:8080", app_ip(zone)),
            "/readyz",
            Duration::from_millis(800),
        )
        .await
        .is_ok_and(|(s, _)| s == 200)
    }

    pub async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for("3 ready replicas", timeout, || async {
            for z in ZONES {
                if !self.replica_ready(z).await {
                    return false;
                }
            }
            true
        })
        .await
    }

    /// SIGKILLs a replica; the supervisor restarts it after its back-off.
    pub async fn kill_replica(&self, zone: &str) -> anyhow::Result<u32> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        signal(pid, "KILL").await?;
        wait_for(
            &format!("replica {zone} to die"),
            Duration::from_secs(5),
            || async { !alive(pid) },
        )
        .await?;
        Ok(pid)
    }

    /// Graceful stop: SIGTERM, wait for exit within the grace period, else SIGKILL.
    /// With `keep_down` the supervisor leaves it stopped; otherwise it restarts at once.
    pub async fn stop_replica(&self, zone: &str, keep_down: bool) -> anyhow::Result<()> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        let flag = if keep_down { "paused" } else { "restart-now" };
        std::fs::write(self.app_dir(zone).join(flag), "")?;
        signal(pid, "TERM").await?;
        if wait_for("graceful exit", self.opts.grace_period, || async {
            !alive(pid)
        })
        .await
        .is_err()
        {
            tracing::warn!(
                zone,
                "replica did not exit within the grace period; killing it"
            );
            signal(pid, "KILL").await?;
        }
        Ok(())
    }

    pub async fn resume_replica(&self, zone: &str) {
        let _ = std::fs::remove_file(self.app_dir(zone).join("paused"));
    }

    /// Drops traffic from every vfps pod to every database pod (timeouts, not resets).
    pub async fn partition(&self) -> anyhow::Result<()> {
        let dbs = ZONES.map(db_ip).join(", ");
        for z in ZONES {
            let ns = format!("vfps-app-{z}");
            let rules = format!(
                "table inet {PARTITION_TABLE} {{ chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {dbs} }} drop; }}; }}"
            );
            cmd("ip", &["netns", "exec", &ns, "nft", &rules]).await?;
            let listed = cmd(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "nft",
                    "list",
                    "table",
                    "inet",
                    PARTITION_TABLE,
                ],
            )
            .await?;
            if !listed.contains("drop") {
                bail!("partition rule missing in {ns} after applying it");
            }
        }
        Ok(())
    }

    /// Removes the partition and proves it is gone.
    pub async fn heal_partition(&self) -> anyhow::Result<()> {
        for z in ZONES {
            let ns = format!("vfps-app-{z}");
            cmd_quiet(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "nft",
                    "delete",
                    "table",
                    "inet",
                    PARTITION_TABLE,
                ],
            )
            .await;
            if partition_table_present(&ns).await {
                bail!("partition table still present in {ns} after healing");
            }
        }
        Ok(())
    }

    /// Whether any partition rule is present (for tests and `down`).
    pub async fn partitioned(&self) -> bool {
        for z in ZONES {
            let ns = format!("vfps-app-{z}");
            if partition_table_present(&ns).await {
                return true;
            }
        }
        false
    }

    /// Collects the HA manager's view (list and history) into `dir` with a suffix.
    pub async fn snapshot_cluster(&self, dir: &Path, suffix: &str) {
        let cfg = self
            .opts
            .base
            .join("db-a/patroni.yml")
            .display()
            .to_string();
        for (what, args) in [("list", vec!["list"]), ("history", vec!["history"])] {
            let mut a = vec!["-c", cfg.as_str()];
            a.extend(args);
            let out = cmd("patronictl", &a)
                .await
                .unwrap_or_else(|e| format!("{e:#}"));
            let _ = std::fs::write(dir.join(format!("patroni-{what}-{suffix}.txt")), out);
        }
    }

    /// Copies every log into `dir`.
    pub fn collect_logs(&self, dir: &Path) {
        let logs = dir.join("logs");
        let _ = std::fs::create_dir_all(&logs);
        let _ = std::fs::copy(self.opts.base.join("etcd.log"), logs.join("etcd.log"));
        for z in ZONES {
            let d = self.opts.base.join(format!("db-{z}"));
            let _ = std::fs::copy(d.join("patroni.log"), logs.join(format!("patroni-{z}.log")));
            let _ = std::fs::copy(
                d.join("log/postgresql.log"),
                logs.join(format!("postgresql-{z}.log")),
            );
            let _ = std::fs::copy(
                self.opts.base.join(format!("vfps-{z}.log")),
                logs.join(format!("vfps-{z}.log")),
            );
        }
    }

    /// Tears everything down.
    pub async fn shutdown(&self) {
        down(&self.opts.base).await;
    }
}

/// Whether the partition's nftables table exists in a pod's namespace.
async fn partition_table_present(ns: &str) -> bool {
    cmd(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "nft",
            "list",
            "table",
            "inet",
            PARTITION_TABLE,
        ],
    )
    .await
    .is_ok()
}

/// The shared scenarios on the local platform: zones are nodes, the supervisor
/// restarts killed replicas, Patroni fails over, nftables partitions.
impl crate::nemesis::Platform for Local {
    async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        Local::wait_db_healthy(self, timeout).await
    }

    async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        Local::wait_replicas_ready(self, timeout).await
    }

    fn heal_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn pod_kill_begin(&self, _interval: Duration) -> anyhow::Result<()> {
        Ok(())
    }

    fn paces_pod_kills(&self) -> bool {
        false
    }

    async fn pod_kill_next(
        &self,
        round: usize,
        _until: tokio::time::Instant,
    ) -> anyhow::Result<Option<Victim>> {
        let zone = ZONES[round % ZONES.len()];
        let starts = self.replica_starts(zone).await;
        let pid = self.kill_replica(zone).await?;
        Ok(Some(Victim {
            name: format!("vfps-app-{zone} (pid {pid})"),
            incarnation: format!("{zone}:{starts}"),
        }))
    }

    async fn wait_replaced(&self, victim: &Victim) -> anyhow::Result<()> {
        let (zone, starts) = victim
            .incarnation
            .split_once(':')
            .context("malformed local victim")?;
        let starts: u32 = starts.parse()?;
        wait_for(
            "the replica to be restarted and ready",
            Duration::from_secs(30),
            || async { self.replica_starts(zone).await > starts && self.replica_ready(zone).await },
        )
        .await?;
        Local::wait_replicas_ready(self, Duration::from_secs(30)).await
    }

    async fn pod_kill_end(&self) -> anyhow::Result<()> {
        Ok(())
    }

    async fn primary(&self) -> anyhow::Result<Option<Instance>> {
        Ok(self.leader().await?.map(|m| Instance {
            incarnation: m.name.clone(),
            name: m.name,
        }))
    }

    async fn kill_primary(&self, primary: &Instance) -> anyhow::Result<()> {
        self.kill_db(primary.name.trim_start_matches("db-")).await
    }

    async fn restore_instance(&self, instance: &Instance) -> anyhow::Result<()> {
        self.start_db(instance.name.trim_start_matches("db-")).await
    }

    async fn partition(&self, _burst: Duration) -> anyhow::Result<()> {
        Local::partition(self).await
    }

    async fn heal_partition(&self) -> anyhow::Result<()> {
        Local::heal_partition(self).await
    }

    async fn rollout(&self, knobs: &Knobs, rec: &Recorder, scenario: &str) -> anyhow::Result<()> {
        for zone in ZONES {
            let starts = self.replica_starts(zone).await;
            self.stop_replica(zone, false).await?;
            rec.event(scenario, format!("stopped vfps-app-{zone} gracefully"))
                .await;
            wait_for(
                "the new replica to be ready",
                Duration::from_secs(30),
                || async {
                    self.replica_starts(zone).await > starts && self.replica_ready(zone).await
                },
            )
            .await?;
            tokio::time::sleep(knobs.min_ready).await;
            rec.event(
                scenario,
                format!("vfps-app-{zone} ready for {:?}", knobs.min_ready),
            )
            .await;
        }
        Ok(())
    }

    /// Every database member must be healthy (never a second instance down).
    async fn drain_target(&self) -> anyhow::Result<String> {
        if !self.db_healthy().await {
            bail!(
                "disruption budget exhausted: a database instance is already down; refusing to drain"
            );
        }
        let leader = self.leader().await?.context("no primary")?;
        ZONES
            .into_iter()
            .find(|z| format!("db-{z}") != leader.name)
            .map(str::to_owned)
            .context("no node without the primary")
    }

    /// The node's vfps replica stops gracefully and stays down; its database
    /// member goes away.
    async fn drain(&self, node: &str) -> anyhow::Result<()> {
        self.stop_replica(node, true).await?;
        self.kill_db(node).await
    }

    async fn uncordon(&self, node: &str) -> anyhow::Result<()> {
        let started = self.start_db(node).await;
        self.resume_replica(node).await;
        started
    }
}
