//! The Kubernetes platform: kind, CloudNativePG, Chaos Mesh and the Helm chart,
//! driven through `kubectl` (and `kind`, `helm` for `up`/`down`).
//!
//! The faults are the Chaos Mesh objects in `tests/chaos/ha/chaos/` (pod kill on a
//! Schedule, a one-shot PodChaos on the primary, a NetworkChaos partition) plus
//! `kubectl rollout restart` and `kubectl drain`. Every command goes through a
//! [`Runner`], so the driver's logic is tested against a simulated cluster where
//! no Kubernetes API can run.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::{sync::Mutex, time::Instant};

use super::net::wait_every;
use crate::nemesis::{Instance, Knobs, Platform, Recorder, Victim};

/// Namespace of vfps and its database.
pub const NAMESPACE: &str = "vfps";
/// Namespace of the load generator Job.
pub const LOADGEN_NAMESPACE: &str = "vfps-loadgen";
pub const LOADGEN_JOB: &str = "vfps-loadgen";
/// The CloudNativePG `Cluster`.
pub const CNPG_CLUSTER: &str = "vfps-db";
/// The vfps Deployment (Helm release `vfps`).
pub const DEPLOYMENT: &str = "vfps";
const VFPS_PODS: &str = "app.kubernetes.io/name=vfps";
const PRIMARY_POD: &str = "cnpg.io/cluster=vfps-db,cnpg.io/instanceRole=primary";
/// The one-shot partition the driver applies per burst (from the Schedule's template).
const PARTITION_BURST: &str = "db-network-partition-burst";
/// What `kubectl drain` may take before the drain counts as failed.
pub const DRAIN_TIMEOUT: &str = "120s";

/// Runs a command: `Ok(stdout)` on exit 0, an error naming the command and
/// carrying its output otherwise.
#[allow(async_fn_in_trait)] // used through generics inside this crate only
pub trait Runner: Sync {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String>;
}

/// The real thing: child processes.
pub struct Shell;

impl Runner for Shell {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(if input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A pod as the driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub uid: String,
    pub node: String,
    pub ready: bool,
    pub terminating: bool,
}

fn pods_of(list: &Value) -> Vec<Pod> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|p| Pod {
                    name: s(&p["metadata"]["name"]),
                    uid: s(&p["metadata"]["uid"]),
                    node: s(&p["spec"]["nodeName"]),
                    ready: p["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    }),
                    terminating: !p["metadata"]["deletionTimestamp"].is_null(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The CloudNativePG cluster's own account of its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnpgStatus {
    pub instances: u64,
    pub ready: u64,
    pub current_primary: String,
    pub target_primary: String,
}

impl CnpgStatus {
    /// Every instance ready and no switchover or failover in progress.
    pub fn healthy(&self) -> bool {
        self.instances > 0
            && self.ready == self.instances
            && !self.current_primary.is_empty()
            && self.current_primary == self.target_primary
    }
}

/// Reads the inotify limits kind needs for a 4-node cluster; the message says how
/// to fix them.
pub fn inotify_problem(instances: u64, watches: u64) -> Option<String> {
    (instances < 512 || watches < 524_288).then(|| {
        format!(
            "inotify limits too low for a 4-node kind cluster (fs.inotify.max_user_instances={instances}, \
             fs.inotify.max_user_watches={watches}); fix: sudo sysctl -w fs.inotify.max_user_instances=512 \
             fs.inotify.max_user_watches=524288"
        )
    })
}

/// Fills `${NAME}` placeholders from `var`; a placeholder without a value is an
/// error naming it (a manifest is never applied half-rendered).
pub fn render(template: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated placeholder in {:?}", &rest[at..]))?;
        let name = &after[..end];
        let value = var(name).ok_or_else(|| format!("no value for ${{{name}}}"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

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

/// The kind topology, reached through `kubectl`.
pub struct Kube<R> {
    runner: R,
    /// `tests/chaos/ha`.
    assets: PathBuf,
    /// Between two observations of the cluster.
    pub poll: Duration,
    /// How long a heal (replacement pod, failover, rejoin, rollout) may take.
    pub heal_timeout: Duration,
    /// The vfps pods after the last heal: a kill is one of them going away.
    known: Mutex<Vec<Pod>>,
}

impl<R: Runner> Kube<R> {
    pub fn new(runner: R, assets: &Path) -> Self {
        Self {
            runner,
            assets: assets.to_owned(),
            poll: Duration::from_secs(2),
            heal_timeout: Duration::from_secs(300),
            known: Mutex::new(Vec::new()),
        }
    }

    pub async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        self.runner.run(program, args, None).await
    }

    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.runner.run("kubectl", args, None).await
    }

    async fn get_json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl(&a).await?;
        serde_json::from_str(&out).with_context(|| format!("kubectl {}: not JSON", a.join(" ")))
    }

    pub fn asset(&self, relative: &str) -> anyhow::Result<String> {
        let path = self.assets.join(relative);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    }

    pub async fn apply(&self, manifest: &str) -> anyhow::Result<()> {
        self.runner
            .run("kubectl", &["apply", "-f", "-"], Some(manifest))
            .await
            .map(|_| ())
    }

    /// Deletes what a manifest names and waits until it is gone.
    pub async fn delete(&self, manifest: &str) -> anyhow::Result<()> {
        self.runner
            .run(
                "kubectl",
                &["delete", "--ignore-not-found", "--wait=true", "-f", "-"],
                Some(manifest),
            )
            .await
            .map(|_| ())
    }

    pub async fn vfps_pods(&self) -> anyhow::Result<Vec<Pod>> {
        Ok(pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", VFPS_PODS])
                .await?,
        ))
    }

    pub async fn cnpg_status(&self) -> anyhow::Result<CnpgStatus> {
        let c = self
            .get_json(&["cluster", CNPG_CLUSTER, "-n", NAMESPACE])
            .await?;
        let st = &c["status"];
        Ok(CnpgStatus {
            instances: st["instances"].as_u64().unwrap_or(0),
            ready: st["readyInstances"].as_u64().unwrap_or(0),
            current_primary: st["currentPrimary"].as_str().unwrap_or_default().into(),
            target_primary: st["targetPrimary"].as_str().unwrap_or_default().into(),
        })
    }

    async fn db_healthy(&self) -> bool {
        self.cnpg_status().await.is_ok_and(|s| s.healthy())
    }

    /// Every replica of the Deployment updated, ready, and no pod terminating.
    async fn replicas_ready(&self) -> bool {
        let Ok(d) = self
            .get_json(&["deployment", DEPLOYMENT, "-n", NAMESPACE])
            .await
        else {
            return false;
        };
        let want = d["spec"]["replicas"].as_u64().unwrap_or(1);
        let st = &d["status"];
        let full = |k: &str| st[k].as_u64() == Some(want);
        if !(full("readyReplicas") && full("updatedReplicas") && full("replicas")) {
            return false;
        }
        self.vfps_pods()
            .await
            .is_ok_and(|p| p.len() as u64 == want && p.iter().all(|p| p.ready && !p.terminating))
    }

    /// The pod labelled primary; two at once is an error, not a choice.
    async fn primary_pod(&self) -> anyhow::Result<Option<Pod>> {
        let mut pods = pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", PRIMARY_POD])
                .await?,
        );
        if pods.len() > 1 {
            bail!(
                "{} pods are labelled primary at once: {}",
                pods.len(),
                pods.iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(pods.pop())
    }

    async fn remember_pods(&self) -> anyhow::Result<()> {
        let pods = self.vfps_pods().await?;
        *self.known.lock().await = pods;
        Ok(())
    }

    pub async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_every(
            "a healthy CloudNativePG cluster (every instance ready, no failover in progress)",
            timeout,
            self.poll,
            || self.db_healthy(),
        )
        .await
    }

    pub async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_every("every vfps replica ready", timeout, self.poll, || {
            self.replicas_ready()
        })
        .await
    }

    fn partition_manifest(&self, burst: Duration) -> anyhow::Result<String> {
        partition_burst(&self.asset("chaos/db-network-partition.yaml")?, burst)
            .map_err(anyhow::Error::msg)
    }

    async fn chaos_condition(&self, kind: &str, name: &str, condition: &str) -> bool {
        self.get_json(&[kind, name, "-n", NAMESPACE])
            .await
            .is_ok_and(|o| {
                o["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == condition && c["status"] == "True")
                })
            })
    }
}

impl<R: Runner> Platform for Kube<R> {
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
    async fn pod_kill_next(&self, _round: usize, until: Instant) -> anyhow::Result<Option<Victim>> {
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

    /// The operator re-creates the killed instance; only the spent PodChaos goes.
    async fn restore_instance(&self, _instance: &Instance) -> anyhow::Result<()> {
        self.delete(&self.asset("chaos/cnpg-primary-kill.yaml")?)
            .await
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
        wait_every(
            "the partition to be recovered and gone",
            Duration::from_secs(120),
            self.poll,
            || async {
                self.kubectl(&[
                    "get",
                    "networkchaos",
                    PARTITION_BURST,
                    "-n",
                    NAMESPACE,
                    "--ignore-not-found",
                    "-o",
                    "name",
                ])
                .await
                .is_ok_and(|o| o.trim().is_empty())
            },
        )
        .await
    }

    /// `kubectl rollout restart`; the chart's update strategy (maxUnavailable 0,
    /// maxSurge 1, minReadySeconds) paces it.
    async fn rollout(&self, _knobs: &Knobs, rec: &Recorder, scenario: &str) -> anyhow::Result<()> {
        let deployment = format!("deployment/{DEPLOYMENT}");
        self.kubectl(&["rollout", "restart", &deployment, "-n", NAMESPACE])
            .await?;
        rec.event(scenario, format!("restarted {deployment}")).await;
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
        rec.event(scenario, "rollout complete, every replica ready")
            .await;
        Ok(())
    }

    /// A worker running vfps but not the database primary; refused while the
    /// database is not fully healthy.
    async fn drain_target(&self) -> anyhow::Result<String> {
        let status = self.cnpg_status().await?;
        if !status.healthy() {
            bail!(
                "disruption budget exhausted: {} of {} database instances ready; refusing to drain",
                status.ready,
                status.instances
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
}

#[cfg(test)]
mod tests;
