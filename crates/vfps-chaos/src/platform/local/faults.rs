//! Faults on the local platform: the partition (nftables in the vfps pods,
//! drops, not resets), and the shared scenarios' faults — zones are nodes, the
//! supervisor restarts killed replicas, Patroni fails over.

use std::time::Duration;

use anyhow::{bail, Context};

use super::{db_ip, Local, ZONES};
use crate::{
    nemesis::{Faults, Instance, Knobs, Recorder, Victim},
    platform::net::{cmd, cmd_quiet, wait_for},
    scenario::ScenarioName,
};

/// Name of the nftables table the partition fault adds in the vfps pods.
const PARTITION_TABLE: &str = "vfps_chaos";

impl Local {
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
