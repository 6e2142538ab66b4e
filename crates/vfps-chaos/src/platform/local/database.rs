//! The database: etcd (Patroni's DCS) in the control plane, a Patroni member per
//! zone running PostgreSQL in its pod, and the application's role, database and
//! migrations.

use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use super::{
    connection_string, db_ip,
    network::{pid_file, read_pid, write_pid},
    patroni::{patroni_config, patroni_launcher, patroni_tool, write_patroni_launcher},
    tokens_dir, write_secret, zone_of, DatabaseProfile, Local, APP_PASSWORD, POSTGRES, ZONES,
};
use crate::platform::net::{alive, cmd, http_get, kill, signal, stop_process, stopped, wait_for};

/// One member of the Patroni cluster, from its REST API.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub name: String,
    pub role: String,
    pub state: String,
    #[serde(default)]
    pub lag: Option<serde_json::Value>,
    /// The timeline PostgreSQL runs on (a promotion starts a new one).
    #[serde(default)]
    pub timeline: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ClusterView {
    members: Vec<Member>,
}

/// How long a standby may be "running" without streaming from the primary
/// before a heal reinitialises it.
pub const STUCK_STANDBY: Duration = Duration::from_secs(30);

impl Local {
    /// A Patroni member per zone, then a healthy cluster.
    pub(super) async fn start_database(&self) -> anyhow::Result<()> {
        for z in ZONES {
            self.write_patroni_config(z, "").await?;
            self.start_db(z).await?;
        }
        self.wait_db_healthy(Duration::from_secs(90)).await
    }

    /// Writes a member's Patroni configuration (with `bootstrap_method`, YAML
    /// under `bootstrap:`, when it is to bootstrap other than by initdb),
    /// archiving under the cluster name in use.
    pub(super) async fn write_patroni_config(
        &self,
        zone: &str,
        bootstrap_method: &str,
    ) -> anyhow::Result<()> {
        self.write_patroni_config_archiving(zone, bootstrap_method, &self.backup_cluster())
            .await
    }

    /// [`Local::write_patroni_config`], archiving under `cluster` (a restore's
    /// new name, before the restore has succeeded and made it the one in use).
    /// The file holds the superuser's password: `postgres`'s alone (0600).
    pub(super) async fn write_patroni_config_archiving(
        &self,
        zone: &str,
        bootstrap_method: &str,
        cluster: &str,
    ) -> anyhow::Result<()> {
        let base = &self.opts.base;
        let dir = base.join(format!("db-{zone}"));
        std::fs::create_dir_all(dir.join("log"))?;
        write_patroni_launcher(base)?;
        write_secret(
            &dir.join("patroni.yml"),
            patroni_config(
                base,
                zone,
                self.opts.profile,
                &self.archive_parameters(zone, cluster)?,
                bootstrap_method,
            )
            .as_bytes(),
        )?;
        cmd(
            "chown",
            &["-R", "postgres:postgres", &dir.display().to_string()],
        )
        .await?;
        Ok(())
    }

    /// The application role and database, then the migrations.
    pub(super) async fn create_app_database(&self) -> anyhow::Result<()> {
        let opts = &self.opts;
        // The application role and database (non-superuser owner), then the
        // migrations "Job" — after the standbys stream, as strict sync requires.
        let leader = self.leader().await?.context("no leader after bootstrap")?;
        let zone = leader.name.trim_start_matches("db-").to_owned();
        let within = Duration::from_secs(60);
        self.psql(
            &zone,
            "postgres",
            &format!("CREATE ROLE vfps LOGIN PASSWORD '{APP_PASSWORD}'"),
            within,
        )
        .await?;
        self.psql(&zone, "postgres", "CREATE DATABASE vfps OWNER vfps", within)
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
        self.create_tokens().await
    }

    /// The access tokens of the run (authorization is on): the load's own
    /// service-account token, and the expired and read-only ones its `bad`
    /// calls must see refused. Each in a file only root may read.
    async fn create_tokens(&self) -> anyhow::Result<()> {
        let dir = tokens_dir(&self.opts.base);
        std::fs::create_dir_all(&dir)?;
        for token in crate::platform::access::ALL {
            let out = tokio::process::Command::new(&self.opts.vfps_bin)
                .args(["tokens", "create"])
                .args(token.args)
                .env("ConnectionStrings__PostgreSQL", connection_string())
                .env("RUST_LOG", "warn")
                .stdin(std::process::Stdio::null())
                .output()
                .await?;
            if !out.status.success() {
                bail!(
                    "vfps tokens create failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let secret = crate::platform::access::secret_of(&out.stdout)?;
            let path = dir.join(token.file);
            write_secret(&path, secret.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }

    /// Starts a database pod's Patroni (which starts PostgreSQL).
    pub async fn start_db(&self, zone: &str) -> anyhow::Result<()> {
        let dir = self.opts.base.join(format!("db-{zone}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("patroni.log"))?;
        // `ip netns exec` and `setpriv` exec, so the PID is Patroni's own.
        let child = super::super::run_as::command_in_netns(
            &format!("vfps-db-{zone}"),
            POSTGRES,
            &dir,
            patroni_tool("python3"),
        )
        .arg(patroni_launcher(&self.opts.base))
        .arg(dir.join("patroni.yml"))
        // Python's logging writes local time without a zone: UTC, so the
        // failover breakdown can read it beside PostgreSQL's.
        .env("TZ", "UTC")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start patroni (run scripts/install-deps.sh)")?;
        write_pid(&format!("patroni-{zone}"), child.id().unwrap_or_default())?;
        // The child is reaped by a task; it is stopped by PID.
        tokio::spawn(async move {
            let mut child = child;
            let _ = child.wait().await;
        });
        Ok(())
    }

    /// The pid of the instance's postmaster (its `postmaster.pid`), if it has
    /// one: a new one after every restart, a rewind's included.
    pub fn postmaster_pid(&self, zone: &str) -> Option<u32> {
        read_pid(
            &self
                .opts
                .base
                .join(format!("db-{zone}/data/postmaster.pid")),
        )
    }

    /// SIGKILLs a database pod: Patroni, the postmaster it does not parent,
    /// and every other process of the pod's network namespace (a postmaster
    /// whose data directory was renamed under it, by Patroni after a failed
    /// bootstrap or by a restore, is found by no pid file). Returns once all
    /// are gone.
    pub async fn kill_db(&self, zone: &str) -> anyhow::Result<()> {
        let patroni = read_pid(&pid_file(&format!("patroni-{zone}")));
        let mut pids: Vec<u32> = [patroni, self.postmaster_pid(zone)]
            .into_iter()
            .flatten()
            .filter(|p| alive(*p))
            .collect();
        pids.extend(self.db_pids(zone).await.unwrap_or_default());
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() {
            bail!("database pod {zone} has no running process to kill");
        }
        for pid in &pids {
            kill(*pid).await?;
        }
        // Every process of the pod, as a container kill does: the postmaster's
        // children outlive it for a moment, and a walsender among them would
        // still send WAL the moment a network cut is healed (an isolated
        // primary's writes reaching a standby after its "kill"). Until none is
        // left: one may have been forked while the others died.
        let mut all = pids;
        for _ in 0..5 {
            let left = self.db_pids(zone).await.unwrap_or_default();
            if left.is_empty() {
                break;
            }
            for pid in &left {
                kill(*pid).await?;
            }
            all.extend(left);
        }
        wait_for(
            &format!("database pod {zone} to die"),
            Duration::from_secs(10),
            || async { all.iter().all(|p| !alive(*p)) },
        )
        .await
    }

    /// Every process of a database pod (Patroni, the postmaster and its
    /// children), as its network namespace lists them.
    async fn db_pids(&self, zone: &str) -> anyhow::Result<Vec<u32>> {
        let out = cmd("ip", &["netns", "pids", &format!("vfps-db-{zone}")]).await?;
        Ok(out
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| alive(*p))
            .collect())
    }

    /// Whether the pod's Patroni answers its REST API.
    pub async fn patroni_answers(&self, zone: &str) -> bool {
        http_get(
            &format!("{}:8008", db_ip(zone)),
            "/liveness",
            Duration::from_millis(800),
        )
        .await
        .is_ok()
    }

    /// SIGSTOPs every process of a database pod, as a VM pause or a long stall
    /// would; proven by its REST API no longer answering. Returns when every
    /// thread was seen stopped: the fault's time (the proof after it waits a
    /// probe's timeout).
    pub async fn pause_db(&self, zone: &str) -> anyhow::Result<tokio::time::Instant> {
        let pids = self.db_pids(zone).await?;
        if pids.is_empty() {
            bail!("database pod {zone} has no process to pause");
        }
        // A process forked while the others were being stopped (a backend for
        // a new connection) would go on serving: stop until none runs.
        // Every thread of every process stopped (Patroni's threads included),
        // not just signalled.
        let mut stopped_at = tokio::time::Instant::now();
        for attempt in 0.. {
            let running: Vec<u32> = self
                .db_pids(zone)
                .await?
                .into_iter()
                .filter(|p| !stopped(*p))
                .collect();
            if running.is_empty() {
                stopped_at = tokio::time::Instant::now();
                break;
            }
            if attempt == 5 {
                bail!("db-{zone}: processes {running:?} kept running after SIGSTOP");
            }
            for pid in running {
                // A process may have exited since it was listed.
                let _ = stop_process(pid, Duration::from_secs(2)).await;
            }
        }
        wait_for(
            &format!("db-{zone}'s Patroni to stop answering"),
            Duration::from_secs(5),
            || async { !self.patroni_answers(zone).await },
        )
        .await?;
        Ok(stopped_at)
    }

    /// SIGCONTs every process of a database pod; proven by its REST API
    /// answering again.
    pub async fn resume_db(&self, zone: &str) -> anyhow::Result<()> {
        for pid in self.db_pids(zone).await? {
            // A process may have exited since it was listed.
            let _ = signal(pid, "CONT").await;
        }
        wait_for(
            &format!("db-{zone}'s Patroni to answer again"),
            Duration::from_secs(10),
            || self.patroni_answers(zone),
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

    /// Healthy: three members, one running leader, both standbys streaming and
    /// synchronous (asynchronous profile: streaming replicas).
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
        let leaders: Vec<&Member> = m
            .iter()
            .filter(|x| x.role == "leader" && x.state == "running")
            .collect();
        let members_say = m.len() == 3
            && leaders.len() == 1
            && match self.opts.profile {
                // Both standbys in the synchronous set: a fault then meets a
                // cluster where either standby may take over.
                DatabaseProfile::Safe => m
                    .iter()
                    .filter(|x| x.role != "leader")
                    .all(|x| x.role == "sync_standby"),
                DatabaseProfile::UnsafeAsync => true,
            }
            && m.iter().all(running);
        if !members_say {
            return false;
        }
        // Patroni calls a rejoining instance "running" before it knows whether
        // it must be rewound (and restarted): only the primary's own view of
        // who streams from it says the standbys are really back.
        let Ok(leader_zone) = zone_of(&leaders[0].name) else {
            return false;
        };
        let Ok(streaming) = self.streaming_standbys(leader_zone).await else {
            return false;
        };
        m.iter()
            .filter(|x| x.name != leaders[0].name)
            .all(|x| streaming.contains(&x.name))
    }

    /// The application names (Patroni: member names) of the standbys that
    /// stream from the instance in `zone`, as that instance sees them.
    pub async fn streaming_standbys(&self, zone: &str) -> anyhow::Result<Vec<String>> {
        let names = self
            .query_instance(
                zone,
                "SELECT string_agg(application_name, ',') FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .await?;
        Ok(names
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// Waits until [`Local::db_healthy`]. A standby that Patroni reports
    /// running but that has not streamed from the primary for
    /// [`STUCK_STANDBY`] is reinitialised (`patronictl reinit`), as an operator
    /// would: Patroni 3.0.4 can leave a rejoined instance unable to follow.
    /// On a timeout the error says which member is in which state.
    pub async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        let started = tokio::time::Instant::now();
        let mut reinitialised: Vec<String> = Vec::new();
        loop {
            if self.db_healthy().await {
                return Ok(());
            }
            if started.elapsed() >= STUCK_STANDBY {
                for name in self.stuck_standbys().await {
                    if !reinitialised.contains(&name) {
                        eprintln!(
                            "database: {name} has not streamed from the primary for {STUCK_STANDBY:?}; reinitialising it"
                        );
                        if let Err(e) = self.reinit(&name).await {
                            eprintln!("database: reinit of {name} failed: {e:#}");
                        }
                        reinitialised.push(name);
                    }
                }
            }
            if started.elapsed() >= timeout {
                bail!(
                    "timed out after {timeout:?} waiting for a healthy database cluster (leader and two streaming standbys): {}",
                    self.db_report().await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Standbys Patroni calls running that the running primary does not see
    /// streaming.
    async fn stuck_standbys(&self) -> Vec<String> {
        let Ok(members) = self.members().await else {
            return Vec::new();
        };
        let Some(leader) = members
            .iter()
            .find(|m| m.role == "leader" && m.state == "running")
        else {
            return Vec::new();
        };
        let Ok(zone) = zone_of(&leader.name) else {
            return Vec::new();
        };
        let Ok(streaming) = self.streaming_standbys(zone).await else {
            return Vec::new();
        };
        members
            .iter()
            .filter(|m| m.name != leader.name && !streaming.contains(&m.name))
            .filter(|m| m.state == "running" || m.state == "streaming")
            .map(|m| m.name.clone())
            .collect()
    }

    async fn reinit(&self, member: &str) -> anyhow::Result<()> {
        self.patronictl(&["reinit", "vfps", member, "--force"])
            .await
            .map(|_| ())
    }

    /// `patronictl` of the pinned installation, with the cluster's configuration.
    pub(super) async fn patronictl(&self, args: &[&str]) -> anyhow::Result<String> {
        let cfg = self
            .opts
            .base
            .join("db-a/patroni.yml")
            .display()
            .to_string();
        let ctl = patroni_tool("patronictl").display().to_string();
        let mut all = vec!["-c", cfg.as_str()];
        all.extend_from_slice(args);
        cmd(&ctl, &all).await
    }

    /// Each member's role, state and timeline, and who streams from the primary.
    async fn db_report(&self) -> String {
        let members = match self.members().await {
            Ok(m) => m,
            Err(e) => return format!("the cluster view cannot be read: {e:#}"),
        };
        let mut parts: Vec<String> = members
            .iter()
            .map(|m| {
                format!(
                    "{} {} {} timeline {}",
                    m.name,
                    m.role,
                    m.state,
                    m.timeline.map_or("?".into(), |t| t.to_string())
                )
            })
            .collect();
        if let Some(zone) = members
            .iter()
            .find(|m| m.role == "leader")
            .and_then(|l| zone_of(&l.name).ok())
        {
            parts.push(match self.streaming_standbys(zone).await {
                Ok(s) => format!("streaming from the primary: [{}]", s.join(", ")),
                Err(e) => format!("pg_stat_replication unreadable: {e:#}"),
            });
        }
        parts.join("; ")
    }
}

/// A member's configuration as `write_patroni_config` writes it, for tests.
#[cfg(test)]
pub(super) fn patroni_config_for_tests(
    local: &Local,
    zone: &str,
    bootstrap_method: &str,
) -> String {
    patroni_config(
        &local.opts.base,
        zone,
        local.opts.profile,
        &local
            .archive_parameters(zone, &local.backup_cluster())
            .unwrap_or_default(),
        bootstrap_method,
    )
}
