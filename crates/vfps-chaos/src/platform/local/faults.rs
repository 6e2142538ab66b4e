//! Faults on the local platform: zones are nodes, the supervisor restarts
//! killed replicas, Patroni fails over, nftables cuts (drops, not resets), and
//! signals stop and resume processes.

use std::time::Duration;

use anyhow::{bail, Context};

use super::{
    app_ip, cuts, db_ip,
    probe::{self, Connect},
    zone_of, Local, ZONES,
};
use crate::{
    nemesis::{Faults, Instance, Knobs, Pod, Recorder, RunningJob, Victim, WalPosition},
    platform::net::{cmd, wait_for},
    scenario::ScenarioName,
};

/// The zone of an object store node (`vfps-s3-<z>`).
fn objects_zone(name: &str) -> anyhow::Result<&str> {
    match name.strip_prefix("vfps-s3-") {
        Some(z) if ZONES.contains(&z) => Ok(z),
        _ => bail!("{name:?} is not a local object store node"),
    }
}

fn instance(name: &str) -> Instance {
    Instance {
        name: name.to_owned(),
        incarnation: name.to_owned(),
    }
}

impl Local {
    /// Cuts every vfps pod off from every database pod.
    pub async fn partition(&self) -> anyhow::Result<()> {
        let dbs = ZONES.map(db_ip);
        for z in ZONES {
            cuts::apply(&format!("vfps-app-{z}"), cuts::PARTITION, &dbs).await?;
        }
        Ok(())
    }

    /// Removes the partition; fails if any of it is left.
    pub async fn heal_partition(&self) -> anyhow::Result<()> {
        for z in ZONES {
            cuts::remove(&format!("vfps-app-{z}"), cuts::PARTITION).await?;
        }
        Ok(())
    }

    /// Removes every cut and resumes every stopped process of the pods: after
    /// the scenarios, whatever happened to them (a scenario that stopped half
    /// way must not leave a primary paused).
    pub async fn heal_everything(&self) -> anyhow::Result<()> {
        let cut = cuts::remove_all().await;
        for ns in cuts::pods() {
            if let Ok(out) = cmd("ip", &["netns", "pids", &ns]).await {
                for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                    // A process that is not stopped, or only partly, ignores it.
                    if crate::platform::net::alive(pid) {
                        let _ = crate::platform::net::signal(pid, "CONT").await;
                    }
                }
            }
        }
        cut
    }

    /// Whether any cut is in place (for tests and after a run).
    pub async fn partitioned(&self) -> bool {
        !cuts::remaining().await.is_empty()
    }
}

/// The shared scenarios on the local platform: zones are nodes, the supervisor
/// restarts killed replicas, Patroni fails over, nftables partitions.
impl Faults for Local {
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
        replica: usize,
        _until: tokio::time::Instant,
    ) -> anyhow::Result<Option<Victim>> {
        let zone = ZONES[replica % ZONES.len()];
        self.kill_named_replica(&format!("vfps-app-{zone}"))
            .await
            .map(Some)
    }

    async fn kill_named_replica(&self, replica: &str) -> anyhow::Result<Victim> {
        let zone = zone_of(replica)?;
        let starts = self.replica_starts(zone).await;
        let pid = self.kill_replica(zone).await?;
        Ok(Victim {
            name: format!("{replica} (pid {pid})"),
            incarnation: format!("{zone}:{starts}"),
        })
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

    async fn rollout(
        &self,
        knobs: &Knobs,
        rec: &Recorder,
        scenario: &ScenarioName,
    ) -> anyhow::Result<()> {
        for zone in ZONES {
            let starts = self.replica_starts(zone).await;
            self.stop_replica(zone, false).await?;
            rec.fault(scenario, format!("stopped vfps-app-{zone} gracefully"))
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
            rec.heal(
                scenario,
                format!("vfps-app-{zone} ready for {:?}", knobs.min_ready),
            )
            .await;
        }
        Ok(())
    }

    async fn timeline(&self) -> anyhow::Result<Option<u64>> {
        Ok(self.leader().await?.and_then(|m| m.timeline))
    }

    async fn sync_standby(&self) -> anyhow::Result<Option<Instance>> {
        Ok(self
            .members()
            .await?
            .into_iter()
            .find(|m| m.role == "sync_standby" && (m.state == "streaming" || m.state == "running"))
            .map(|m| instance(&m.name)))
    }

    async fn kill_standby(&self, standby: &Instance) -> anyhow::Result<()> {
        self.kill_db(zone_of(&standby.name)?).await
    }

    async fn pause_instance(&self, i: &Instance) -> anyhow::Result<tokio::time::Instant> {
        self.pause_db(zone_of(&i.name)?).await
    }

    async fn resume_instance(&self, i: &Instance) -> anyhow::Result<()> {
        self.resume_db(zone_of(&i.name)?).await
    }

    /// Drops everything between the instance's pod and the other database
    /// pods; vfps and the control plane still reach it.
    async fn isolate_instance(&self, i: &Instance, _hold: Duration) -> anyhow::Result<()> {
        let zone = zone_of(&i.name)?;
        let others: Vec<String> = ZONES
            .iter()
            .filter(|z| **z != zone)
            .map(|z| db_ip(z))
            .collect();
        cuts::apply(&format!("vfps-db-{zone}"), cuts::ISOLATION, &others).await
    }

    async fn heal_isolation(&self, i: &Instance) -> anyhow::Result<()> {
        cuts::remove(&format!("vfps-db-{}", zone_of(&i.name)?), cuts::ISOLATION).await
    }

    /// Over each instance's Unix socket (no network cut reaches it); an
    /// instance that does not answer (paused, down) is left out.
    async fn wal_positions(&self) -> anyhow::Result<Vec<WalPosition>> {
        let mut out = Vec::new();
        for z in ZONES {
            let name = format!("db-{z}");
            if let Ok(Some(lsn)) = self.written_lsn(z).await {
                out.push(WalPosition {
                    name,
                    lsn,
                    primary: true,
                });
            } else if let Ok(Some(lsn)) = self.received_lsn(z).await {
                out.push(WalPosition {
                    name,
                    lsn,
                    primary: false,
                });
            }
        }
        Ok(out)
    }

    async fn connect(&self, from: Pod<'_>, to: Pod<'_>) -> anyhow::Result<Connect> {
        let ns = match from {
            Pod::Replica(r) => format!("vfps-app-{}", zone_of(r)?),
            Pod::Instance(i) => format!("vfps-db-{}", zone_of(&i.name)?),
        };
        let (addr, port) = match to {
            Pod::Replica(r) => (app_ip(zone_of(r)?), 8081),
            Pod::Instance(i) => (db_ip(zone_of(&i.name)?), 5432),
        };
        probe::connect_from(&ns, &addr, port).await
    }

    async fn replicas(&self) -> anyhow::Result<Vec<String>> {
        Ok(ZONES.map(|z| format!("vfps-app-{z}")).to_vec())
    }

    async fn replica_ready(&self, replica: &str) -> bool {
        match zone_of(replica) {
            Ok(z) => Local::replica_ready(self, z).await,
            Err(_) => false,
        }
    }

    async fn replica_answers(&self, replica: &str) -> bool {
        match zone_of(replica) {
            Ok(z) => Local::replica_answers(self, z).await,
            Err(_) => false,
        }
    }

    async fn pause_replica(&self, replica: &str) -> anyhow::Result<()> {
        self.freeze_replica(zone_of(replica)?).await.map(|_| ())
    }

    async fn resume_replica(&self, replica: &str) -> anyhow::Result<()> {
        self.thaw_replica(zone_of(replica)?).await.map(|_| ())
    }

    async fn cut_replica(&self, replica: &str, _hold: Duration) -> anyhow::Result<()> {
        let ns = format!("vfps-app-{}", zone_of(replica)?);
        cuts::apply(&ns, cuts::REPLICA_CUT, &ZONES.map(db_ip)).await
    }

    async fn heal_replica_cut(&self, replica: &str) -> anyhow::Result<()> {
        cuts::remove(
            &format!("vfps-app-{}", zone_of(replica)?),
            cuts::REPLICA_CUT,
        )
        .await
    }

    async fn delay_database(
        &self,
        _delay: Duration,
        _jitter: Duration,
        _hold: Duration,
    ) -> anyhow::Result<()> {
        bail!("the local platform cannot delay traffic: this kernel has no netem")
    }

    async fn heal_delay(&self) -> anyhow::Result<()> {
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
        self.uncordon_replica(node).await;
        started
    }

    async fn jobs_now(&self) -> anyhow::Result<Vec<RunningJob>> {
        let token = std::fs::read_to_string(
            super::tokens_dir(&self.opts.base).join(crate::platform::access::LOAD.file),
        )
        .context("the load's token")?;
        // Every replica asked at once, the first answer taken: one of them may
        // be the stopped holder of a job, which answers nothing.
        let endpoints = vfps_client::Endpoints::parse(&super::grpc_endpoints()).await?;
        let mut asks = Vec::new();
        for e in endpoints.each()? {
            let client = vfps_client::Client::new(e, vfps_client::RetryPolicy::default())
                .with_bearer(Some(&token))?;
            asks.push(Box::pin(async move {
                match client.list_jobs(Duration::from_secs(2)).await {
                    vfps_client::Outcome::Ok(jobs) => Ok(jobs),
                    other => Err(other.code()),
                }
            }));
        }
        match futures::future::select_ok(asks).await.map(|(jobs, _)| jobs) {
            Ok(jobs) => Ok(jobs
                .into_iter()
                .map(|j| RunningJob {
                    running: j.state == vfps_proto::v1::CsvJobState::Running as i32,
                    id: j.id,
                    runner: j.runner,
                    epoch: j.epoch,
                    rows: j.rows_processed,
                    bytes_done: j.bytes_processed,
                    bytes_total: j.total_bytes,
                })
                .collect()),
            Err(code) => bail!("CsvJobService/List answered {code:?} on every replica"),
        }
    }

    async fn objects_nodes(&self) -> anyhow::Result<Vec<String>> {
        Ok(ZONES.map(|z| format!("vfps-s3-{z}")).to_vec())
    }

    async fn kill_objects_node(&self, node: &str) -> anyhow::Result<()> {
        self.kill_objects_pod(objects_zone(node)?).await.map(drop)
    }

    async fn restore_objects_node(&self, node: &str) -> anyhow::Result<()> {
        let zone = objects_zone(node)?;
        self.start_objects_node(zone).await?;
        self.wait_objects_node(zone, Duration::from_secs(60)).await
    }

    async fn objects_node_answers(&self, node: &str) -> bool {
        match objects_zone(node) {
            Ok(z) => self.objects_pod_answers(z).await,
            Err(_) => false,
        }
    }
}
