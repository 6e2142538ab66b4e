//! Faults on Kubernetes: the Chaos Mesh objects (a pod-kill Schedule, a
//! one-shot PodChaos on the primary, a NetworkChaos partition burst made from the
//! partition Schedule's template, a one-shot PodChaos on a named vfps pod or
//! object store node),
//! `kubectl rollout restart` and `kubectl drain`, each proven applied and healed
//! by the cluster's state.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{assets, gray, Kube, Runner, DEPLOYMENT, DRAIN_TIMEOUT, NAMESPACE};
use crate::{
    nemesis::{Connect, Faults, Instance, Knobs, Pod, Recorder, RunningJob, Victim, WalPosition},
    platform::net::wait_every,
    scenario::ScenarioName,
};

/// The one-shot partition the driver applies per burst (from the Schedule's template).
pub(crate) const PARTITION_BURST: &str = "db-network-partition-burst";

/// The pod-kill Schedule with its interval set (`@every <n>s`).
pub fn pod_kill_schedule(asset: &str, interval: Duration) -> Result<String, String> {
    let line = asset
        .lines()
        .find(|l| l.trim_start().starts_with("schedule:"))
        .ok_or("the pod-kill asset has no schedule")?;
    let indent = &line[..line.len() - line.trim_start().len()];
    Ok(asset.replacen(
        line,
        &format!("{indent}schedule: \"@every {}s\"", interval.as_secs()),
        1,
    ))
}

/// One partition burst as a one-shot NetworkChaos, made from the partition
/// Schedule's `networkChaos` template (one definition of who is cut off from
/// whom). The driver applies it only on a healthy cluster and deletes it after
/// the burst; its own `duration` (burst + 30 s) heals it should the driver die.
pub fn partition_burst(schedule: &str, burst: Duration) -> Result<String, String> {
    let mut lines = schedule.lines();
    let namespace = schedule
        .lines()
        .find_map(|l| l.trim().strip_prefix("namespace:"))
        .map(str::trim)
        .ok_or("the partition Schedule has no namespace")?;
    lines
        .by_ref()
        .find(|l| l.trim_end() == "  networkChaos:")
        .ok_or("the partition Schedule has no spec.networkChaos template")?;
    let mut spec = String::new();
    for l in lines {
        if !l.trim().is_empty() && !l.starts_with("    ") {
            break;
        }
        let l = l.strip_prefix("  ").unwrap_or(l);
        if l.trim_start().starts_with("duration:") {
            spec.push_str(&format!("  duration: {}s\n", burst.as_secs() + 30));
        } else {
            spec.push_str(l);
            spec.push('\n');
        }
    }
    if !spec.contains("action: partition") {
        return Err("the partition Schedule's template is not a partition".into());
    }
    Ok(format!(
        "apiVersion: chaos-mesh.org/v1alpha1\nkind: NetworkChaos\nmetadata:\n  name: {PARTITION_BURST}\n  namespace: {namespace}\nspec:\n{spec}"
    ))
}

impl<R: Runner> Kube<R> {
    fn partition_manifest(&self, burst: Duration) -> anyhow::Result<String> {
        partition_burst(&self.asset("chaos/db-network-partition.yaml")?, burst)
            .map_err(anyhow::Error::msg)
    }

    pub(crate) async fn chaos_condition(&self, kind: &str, name: &str, condition: &str) -> bool {
        self.get_json(&[kind, name, "-n", NAMESPACE])
            .await
            .is_ok_and(|o| {
                o["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == condition && c["status"] == "True")
                })
            })
    }

    /// Removes every chaos object the scenarios may have left, and any
    /// partition: tries them all, then reports the first failure.
    pub async fn cleanup_chaos(&self) -> anyhow::Result<()> {
        let mut results = Vec::new();
        for asset in [
            "chaos/vfps-pod-kill.yaml",
            "chaos/cnpg-primary-kill.yaml",
            "chaos/db-network-partition.yaml",
        ] {
            results.push(match self.asset(asset) {
                Ok(manifest) => self.delete(&manifest).await,
                Err(e) => Err(e),
            });
        }
        results.push(Faults::heal_partition(self).await);
        for o in super::gray::ONE_SHOTS {
            results.push(self.remove(o).await);
        }
        results.push(self.remove(super::objects::OBJECTS_KILL).await);
        results.into_iter().collect()
    }
}

impl<R: Runner> Faults for Kube<R> {
    async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        Kube::wait_db_healthy(self, timeout).await
    }

    async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        Kube::wait_replicas_ready(self, timeout).await
    }

    fn heal_timeout(&self) -> Duration {
        self.heal_timeout
    }

    /// Applies the Schedule (its interval set to the knob) once every replica is ready.
    async fn pod_kill_begin(&self, interval: Duration) -> anyhow::Result<()> {
        Kube::wait_replicas_ready(self, self.heal_timeout).await?;
        self.remember_pods().await?;
        let manifest = pod_kill_schedule(&self.asset("chaos/vfps-pod-kill.yaml")?, interval)
            .map_err(anyhow::Error::msg)?;
        self.apply(&manifest).await
    }

    fn paces_pod_kills(&self) -> bool {
        true
    }

    /// Observes the Schedule's next kill: a known pod gone or terminating.
    async fn pod_kill_next(
        &self,
        _replica: usize,
        until: Instant,
    ) -> anyhow::Result<Option<Victim>> {
        loop {
            let known = self.known.lock().await.clone();
            let now = self.vfps_pods().await?;
            let victim = known
                .iter()
                .find(|k| !now.iter().any(|p| p.uid == k.uid && !p.terminating));
            if let Some(v) = victim {
                return Ok(Some(Victim {
                    name: format!("pod {} on {}", v.name, v.node),
                    incarnation: v.uid.clone(),
                }));
            }
            if Instant::now() + self.poll >= until {
                return Ok(None);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// The one-shot PodChaos of `chaos/vfps-runner-kill.yaml` on that pod.
    async fn kill_named_replica(&self, replica: &str) -> anyhow::Result<Victim> {
        self.kill_vfps_pod(replica).await
    }

    async fn wait_replaced(&self, victim: &Victim) -> anyhow::Result<()> {
        wait_every(
            "the killed pod replaced and every replica ready",
            self.heal_timeout,
            self.poll,
            || async {
                self.replicas_ready().await
                    && self
                        .vfps_pods()
                        .await
                        .is_ok_and(|p| p.iter().all(|p| p.uid != victim.incarnation))
            },
        )
        .await?;
        self.remember_pods().await
    }

    /// Deletes the Schedule; a kill it did just before heals before this returns.
    async fn pod_kill_end(&self) -> anyhow::Result<()> {
        let manifest = self.asset("chaos/vfps-pod-kill.yaml")?;
        self.delete(&manifest).await?;
        Kube::wait_replicas_ready(self, self.heal_timeout).await
    }

    async fn primary(&self) -> anyhow::Result<Option<Instance>> {
        Ok(self.primary_pod().await?.map(|p| Instance {
            name: p.name,
            incarnation: p.uid,
        }))
    }

    /// The one-shot PodChaos, applied afresh (a previous one is deleted first).
    async fn kill_primary(&self, _primary: &Instance) -> anyhow::Result<()> {
        let manifest = self.asset("chaos/cnpg-primary-kill.yaml")?;
        self.delete(&manifest).await?;
        self.apply(&manifest).await
    }

    /// The operator re-creates the killed instance; only the spent PodChaos go.
    async fn restore_instance(&self, _instance: &Instance) -> anyhow::Result<()> {
        self.delete(&self.asset("chaos/cnpg-primary-kill.yaml")?)
            .await?;
        self.remove(gray::STANDBY_KILL).await
    }

    async fn timeline(&self) -> anyhow::Result<Option<u64>> {
        Ok(self.cnpg_status().await?.timeline)
    }

    /// With `ANY 1` every standby in the quorum can confirm a commit: the
    /// "synchronous standby" is the first by name that the primary reports
    /// streaming with `sync_state = quorum` (`pg_stat_replication`). A Ready
    /// pod proves neither: a standby catching up is Ready too.
    async fn sync_standby(&self) -> anyhow::Result<Option<Instance>> {
        self.quorum_standby().await
    }

    async fn kill_standby(&self, standby: &Instance) -> anyhow::Result<()> {
        self.inject(gray::STANDBY_KILL, &[("STANDBY", standby.name.clone())])
            .await
    }

    async fn pause_instance(&self, _: &Instance) -> anyhow::Result<Instant> {
        bail!("Chaos Mesh cannot stop a process (SIGSTOP)")
    }

    async fn resume_instance(&self, _: &Instance) -> anyhow::Result<()> {
        bail!("Chaos Mesh cannot stop a process (SIGSTOP)")
    }

    /// The isolation selects the pod labelled primary, which is `instance`
    /// (the scenario took it from [`Faults::primary`] on a healthy cluster).
    async fn isolate_instance(&self, _instance: &Instance, hold: Duration) -> anyhow::Result<()> {
        self.inject(
            gray::ISOLATION,
            &[("DURATION", assets::chaos_duration(hold))],
        )
        .await
    }

    async fn heal_isolation(&self, _instance: &Instance) -> anyhow::Result<()> {
        self.remove(gray::ISOLATION).await
    }

    async fn wal_positions(&self) -> anyhow::Result<Vec<WalPosition>> {
        self.db_wal_positions().await
    }

    async fn connect(&self, from: Pod<'_>, to: Pod<'_>) -> anyhow::Result<Connect> {
        match (from, to) {
            (Pod::Instance(a), Pod::Instance(b)) => {
                let ip = self.pod_ip(&b.name).await?;
                self.connect_from_db(&a.name, &ip, 5432).await
            }
            (Pod::Replica(r), Pod::Instance(i)) | (Pod::Instance(i), Pod::Replica(r)) => {
                let ip = self.pod_ip(r).await?;
                self.connect_from_db(&i.name, &ip, 8081).await
            }
            (Pod::Replica(_), Pod::Replica(_)) => {
                bail!("no probe between two vfps pods: the vfps image has no shell")
            }
        }
    }

    async fn replicas(&self) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .vfps_pods()
            .await?
            .into_iter()
            .filter(|p| !p.terminating)
            .map(|p| p.name)
            .collect();
        names.sort();
        Ok(names)
    }

    async fn replica_ready(&self, replica: &str) -> bool {
        self.vfps_pods()
            .await
            .is_ok_and(|p| p.iter().any(|p| p.name == replica && p.ready))
    }

    async fn replica_answers(&self, replica: &str) -> bool {
        Faults::replica_ready(self, replica).await
    }

    async fn pause_replica(&self, _: &str) -> anyhow::Result<()> {
        bail!("Chaos Mesh cannot stop a process (SIGSTOP)")
    }

    async fn resume_replica(&self, _: &str) -> anyhow::Result<()> {
        bail!("Chaos Mesh cannot stop a process (SIGSTOP)")
    }

    async fn cut_replica(&self, replica: &str, hold: Duration) -> anyhow::Result<()> {
        self.inject(
            gray::REPLICA_CUT,
            &[
                ("REPLICA", replica.to_owned()),
                ("DURATION", assets::chaos_duration(hold)),
            ],
        )
        .await
    }

    async fn heal_replica_cut(&self, _replica: &str) -> anyhow::Result<()> {
        self.remove(gray::REPLICA_CUT).await
    }

    /// Returns once a database round trip from a vfps pod is measurably slower.
    async fn delay_database(
        &self,
        delay: Duration,
        jitter: Duration,
        hold: Duration,
    ) -> anyhow::Result<()> {
        self.delay_proven(delay, jitter, hold).await
    }

    /// Returns once the round trips are back to what they were.
    async fn heal_delay(&self) -> anyhow::Result<()> {
        self.delay_removed().await
    }

    async fn partition(&self, burst: Duration) -> anyhow::Result<()> {
        self.apply(&self.partition_manifest(burst)?).await?;
        wait_every(
            "Chaos Mesh to report the partition injected (AllInjected)",
            Duration::from_secs(60),
            self.poll,
            || self.chaos_condition("networkchaos", PARTITION_BURST, "AllInjected"),
        )
        .await
    }

    /// Deleting the NetworkChaos recovers it (Chaos Mesh's finalizer); gone = healed.
    async fn heal_partition(&self) -> anyhow::Result<()> {
        self.delete(&self.partition_manifest(Duration::ZERO)?)
            .await?;
        self.wait_gone("networkchaos", PARTITION_BURST).await
    }

    /// `kubectl rollout restart`; the chart's update strategy (maxUnavailable 0,
    /// maxSurge 1, minReadySeconds) paces it.
    async fn rollout(
        &self,
        _knobs: &Knobs,
        rec: &Recorder,
        scenario: &ScenarioName,
    ) -> anyhow::Result<()> {
        let deployment = format!("deployment/{DEPLOYMENT}");
        self.kubectl(&["rollout", "restart", &deployment, "-n", NAMESPACE])
            .await?;
        rec.fault(scenario, format!("restarted {deployment}")).await;
        let timeout = format!("{}s", self.heal_timeout.as_secs());
        self.kubectl(&[
            "rollout",
            "status",
            &deployment,
            "-n",
            NAMESPACE,
            &format!("--timeout={timeout}"),
        ])
        .await?;
        Kube::wait_replicas_ready(self, self.heal_timeout).await?;
        rec.heal(scenario, "rollout complete, every replica ready")
            .await;
        Ok(())
    }

    /// A worker running vfps but not the database primary; refused while the
    /// database is not fully healthy.
    async fn drain_target(&self) -> anyhow::Result<String> {
        let status = self.cnpg_status().await?;
        if !status.healthy() {
            bail!(
                "disruption budget exhausted: {} of {} database instances ready ({}); refusing to drain",
                status.ready,
                status.wanted,
                status.phase
            );
        }
        let primary_node = self
            .primary_pod()
            .await?
            .context("no pod is labelled as the database primary")?
            .node;
        let nodes: BTreeSet<String> = self
            .vfps_pods()
            .await?
            .into_iter()
            .map(|p| p.node)
            .filter(|n| !n.is_empty() && *n != primary_node)
            .collect();
        nodes
            .into_iter()
            .next()
            .context("every node running vfps also runs the database primary")
    }

    async fn drain(&self, node: &str) -> anyhow::Result<()> {
        self.kubectl(&[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            &format!("--timeout={DRAIN_TIMEOUT}"),
        ])
        .await
        .with_context(|| {
            format!("drain did not finish within {DRAIN_TIMEOUT} (a PodDisruptionBudget or a stuck pod)")
        })
        .map(|_| ())
    }

    async fn uncordon(&self, node: &str) -> anyhow::Result<()> {
        self.kubectl(&["uncordon", node]).await.map(|_| ())
    }

    /// From the database primary: the driver has no route to vfps's API.
    async fn jobs_now(&self) -> anyhow::Result<Vec<RunningJob>> {
        self.db_jobs().await
    }

    async fn objects_nodes(&self) -> anyhow::Result<Vec<String>> {
        self.objects_node_names().await
    }

    /// The one-shot PodChaos; the StatefulSet re-creates the pod at once, so
    /// on Kubernetes a node is down only until its replacement starts.
    async fn kill_objects_node(&self, node: &str) -> anyhow::Result<()> {
        self.kill_objects_pod(node).await
    }

    async fn restore_objects_node(&self, node: &str) -> anyhow::Result<()> {
        self.restore_objects_pod(node).await
    }

    async fn objects_node_answers(&self, node: &str) -> bool {
        self.objects_pod_answers(node).await
    }

    /// The StatefulSet re-creates a killed pod within seconds.
    fn objects_node_returns_by_itself(&self) -> bool {
        true
    }
}
