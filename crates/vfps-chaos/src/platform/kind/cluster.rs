//! What the driver reads of the cluster: the vfps pods, the CloudNativePG
//! cluster's own account of its health, the primary, and readiness.

use std::time::Duration;

use anyhow::bail;
use serde_json::Value;

use super::{Kube, Runner, CNPG_CLUSTER, DEPLOYMENT, NAMESPACE, PRIMARY_POD, VFPS_PODS};
use crate::platform::net::wait_every;

/// A pod as the driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub uid: String,
    pub node: String,
    pub ready: bool,
    pub terminating: bool,
}

pub(crate) fn pods_of(list: &Value) -> Vec<Pod> {
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

/// The phase CloudNativePG reports when every instance it wants is up and
/// nothing is in progress (`PhaseHealthy`, api/v1/cluster_types.go).
pub const PHASE_HEALTHY: &str = "Cluster in healthy state";

/// The CloudNativePG cluster's own account of its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnpgStatus {
    /// `spec.instances`: how many instances the cluster is to have.
    pub wanted: u64,
    /// `status.instances`: the PVC groups the operator found so far. While it
    /// bootstraps, replicas are added one at a time, so this is 1, then 2.
    pub instances: u64,
    pub ready: u64,
    /// `status.phase`: [`PHASE_HEALTHY`] once nothing is in progress.
    pub phase: String,
    pub current_primary: String,
    pub target_primary: String,
    /// The timeline the primary writes on (a promotion starts a new one).
    pub timeline: Option<u64>,
}

impl CnpgStatus {
    /// Reads a `Cluster` as `kubectl get -o json` prints it.
    pub fn of(cluster: &Value) -> Self {
        let st = &cluster["status"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            wanted: cluster["spec"]["instances"].as_u64().unwrap_or(0),
            instances: st["instances"].as_u64().unwrap_or(0),
            ready: st["readyInstances"].as_u64().unwrap_or(0),
            phase: text(&st["phase"]),
            current_primary: text(&st["currentPrimary"]),
            target_primary: text(&st["targetPrimary"]),
            timeline: st["timelineID"].as_u64(),
        }
    }

    /// Every instance of the spec present and ready, the operator reporting
    /// the healthy phase, and no switchover or failover in progress.
    pub fn healthy(&self) -> bool {
        self.wanted > 0
            && self.instances == self.wanted
            && self.ready == self.wanted
            && self.phase == PHASE_HEALTHY
            && !self.current_primary.is_empty()
            && self.current_primary == self.target_primary
    }
}

impl<R: Runner> Kube<R> {
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
        Ok(CnpgStatus::of(&c))
    }

    pub(crate) async fn db_healthy(&self) -> bool {
        self.cnpg_status().await.is_ok_and(|s| s.healthy())
    }

    /// Every replica of the Deployment updated, ready, and no pod terminating.
    pub(crate) async fn replicas_ready(&self) -> bool {
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
    pub(crate) async fn primary_pod(&self) -> anyhow::Result<Option<Pod>> {
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

    pub(crate) async fn remember_pods(&self) -> anyhow::Result<()> {
        let pods = self.vfps_pods().await?;
        *self.known.lock().await = pods;
        Ok(())
    }

    pub async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_every(
            "a healthy CloudNativePG cluster (every instance of the spec ready, phase healthy, no failover in progress)",
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
}
