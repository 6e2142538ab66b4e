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
    sync::Arc,
    time::Duration,
};

use anyhow::{bail, Context};
use serde::Deserialize;
use tokio::sync::Mutex;

use super::net::{alive, cmd, cmd_quiet, http_get, signal, wait_for};

pub const ZONES: [&str; 3] = ["a", "b", "c"];
const BRIDGE: &str = "vfpsbr0";
const CONTROL_PLANE: &str = "10.213.0.1";
const ETCD: &str = "10.213.0.1:2379";
const APP_PASSWORD: &str = "vfps-local-password";
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

/// State of one supervised replica.
struct Replica {
    zone: &'static str,
    pid: Option<u32>,
    /// Kept down (node drained) until resumed.
    paused: bool,
    /// Restart without back-off at the next exit (rolling restart).
    restart_now: bool,
    starts: u32,
}

/// The running topology.
pub struct Local {
    pub opts: Options,
    replicas: Arc<Mutex<Vec<Replica>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
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
    // Everything inside our pods (Patroni, every PostgreSQL process, vfps),
    // found by namespace, so nothing survives even after a crash lost its PIDs.
    for ns in namespaces() {
        if let Ok(out) = cmd("ip", &["netns", "pids", &ns]).await {
            for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                let _ = signal(pid, "KILL").await;
            }
        }
    }
    // The control plane (etcd) by its recorded PID.
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

        let local = Local {
            opts: opts.clone(),
            replicas: Arc::new(Mutex::new(
                ZONES
                    .map(|zone| Replica {
                        zone,
                        pid: None,
                        paused: false,
                        restart_now: false,
                        starts: 0,
                    })
                    .into(),
            )),
            stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        };
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

        for i in 0..ZONES.len() {
            local.supervise(i);
        }
        local.wait_replicas_ready(Duration::from_secs(60)).await?;
        events("3 replicas ready");
        Ok(local)
    }

    async fn psql(&self, socket: &str, sql: &str) -> anyhow::Result<String> {
        let bin = pg_bindir().join("psql").display().to_string();
        cmd(
            "setpriv",
            &[
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--init-groups",
                &bin,
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
            ],
        )
        .await
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
            .args([
                "setpriv",
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--init-groups",
            ])
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

    /// Starts the supervisor loop of replica `index` (the local ReplicaSet).
    fn supervise(&self, index: usize) {
        let (replicas, stopping, opts) = (
            self.replicas.clone(),
            self.stopping.clone(),
            self.opts.clone(),
        );
        tokio::spawn(async move {
            loop {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let zone = {
                    let r = replicas.lock().await;
                    if r[index].paused {
                        drop(r);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    r[index].zone
                };
                let child = spawn_replica(&opts, zone);
                let mut child = match child {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(zone, error = %e, "cannot start replica");
                        tokio::time::sleep(opts.restart_backoff).await;
                        continue;
                    }
                };
                let pid = child.id().unwrap_or_default();
                let _ = write_pid(&format!("vfps-{zone}"), pid);
                {
                    let mut r = replicas.lock().await;
                    r[index].pid = Some(pid);
                    r[index].starts += 1;
                }
                let _ = child.wait().await;
                let now = {
                    let mut r = replicas.lock().await;
                    r[index].pid = None;
                    std::mem::take(&mut r[index].restart_now)
                };
                if !now {
                    tokio::time::sleep(opts.restart_backoff).await;
                }
            }
        });
    }

    pub async fn replica_pid(&self, zone: &str) -> Option<u32> {
        self.replicas
            .lock()
            .await
            .iter()
            .find(|r| r.zone == zone)
            .and_then(|r| r.pid)
    }

    pub async fn replica_starts(&self, zone: &str) -> u32 {
        self.replicas
            .lock()
            .await
            .iter()
            .find(|r| r.zone == zone)
            .map_or(0, |r| r.starts)
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
        let pid = {
            let mut r = self.replicas.lock().await;
            let rep = r
                .iter_mut()
                .find(|r| r.zone == zone)
                .context("no such replica")?;
            rep.paused = keep_down;
            rep.restart_now = !keep_down;
            rep.pid
                .with_context(|| format!("replica {zone} is not running"))?
        };
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
        if let Some(r) = self
            .replicas
            .lock()
            .await
            .iter_mut()
            .find(|r| r.zone == zone)
        {
            r.paused = false;
        }
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

    /// Stops supervision and tears everything down.
    pub async fn shutdown(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
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

fn spawn_replica(opts: &Options, zone: &str) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(opts.base.join(format!("vfps-{zone}.log")))?;
    let child = tokio::process::Command::new("ip")
        .args(["netns", "exec", &format!("vfps-app-{zone}")])
        .arg(&opts.vfps_bin)
        .args(["serve", "--listen-address", "0.0.0.0"])
        .env("ConnectionStrings__PostgreSQL", connection_string())
        .env("VFPS_SHUTDOWN_PRE_STOP_DELAY", "1s")
        .env(
            "VFPS_SHUTDOWN_TIMEOUT",
            format!("{}s", opts.grace_period.as_secs().saturating_sub(2).max(1)),
        )
        .env("Pseudonymization__Caching__Namespaces__IsEnabled", "true")
        .env("VFPS_LOG_JSON", "true")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok(child)
}
