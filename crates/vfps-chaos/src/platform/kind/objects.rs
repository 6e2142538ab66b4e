//! The object store of vfps's CSV jobs on kind: Garage from
//! `tests/chaos/ha/garage.yaml`, one node per zone, every object on all three.
//! `up` installs it after the namespace and before vfps: the RPC secret, the
//! nodes connected and laid out by the zone of their Kubernetes node, the
//! bucket, and vfps's key in the Secret the chart reads (`s3.existingSecret`).
//! Every step runs `garage` inside a node's pod (`kubectl exec`; the image is
//! the binary alone), and each is skipped when a reused cluster has it done.
//!
//! The fault: one node killed by a one-shot PodChaos
//! (`chaos/objects-pod-kill.yaml`); the StatefulSet re-creates it on its
//! volume, so it comes back as the same node of the layout.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

use super::{
    assets::{self, OneShot},
    cluster::pods_of,
    Kube, Pod, Runner, NAMESPACE,
};
use crate::{nemesis::Connect, platform::net::wait_every};

/// Garage's pods: every pod of the StatefulSet carries this label alone.
pub(crate) const GARAGE_PODS: &str = "app.kubernetes.io/name=garage";
pub const STATEFULSET: &str = "garage";
/// One node per zone.
pub const NODES: usize = 3;
/// The cluster's RPC secret (`GARAGE_RPC_SECRET` of every node).
pub const RPC_SECRET: &str = "garage-rpc";
/// The Secret vfps's chart reads (`s3.existingSecret` in vfps-ha-values.yaml),
/// and its keys.
pub const S3_SECRET: &str = "vfps-s3";
pub const S3_SECRET_ACCESS_KEY: &str = "access-key";
pub const S3_SECRET_SECRET_KEY: &str = "secret-key";
/// The Secret holding vfps's key file (`keys.existingSecret` in
/// vfps-ha-values.yaml): originals sealed at rest (docs/privacy.md).
pub const KEYS_SECRET: &str = "vfps-keys";
/// The bucket of vfps's job files (`s3.bucket`), and the name of its key.
pub const BUCKET: &str = "vfps-jobs";
pub const KEY_NAME: &str = "vfps";
/// The database's backup bucket (tests/chaos/ha/cnpg-backup.yaml), its own
/// key (not vfps's: vfps cannot reach the backups), and the Secret
/// CloudNativePG reads it from, with that file's keys.
pub const BACKUP_BUCKET: &str = "vfps-backup";
pub const BACKUP_KEY_NAME: &str = "vfps-backup";
pub const BACKUP_SECRET: &str = "vfps-backup-s3";
/// Garage's `s3_region` (garage.yaml).
const REGION: &str = "garage";
const RPC_PORT: u16 = 3901;
const S3_PORT: u16 = 3900;
/// Each node's capacity in the layout: equal, so every node holds every object.
const CAPACITY: &str = "1G";
/// The label that names a Kubernetes node's zone (kind-config.yaml).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

pub(crate) const OBJECTS_KILL: OneShot = OneShot {
    asset: "chaos/objects-pod-kill.yaml",
    kind: "podchaos",
    name: "objects-pod-kill",
};

/// A new key file (`vfps keys init`'s) as the Secret the chart mounts.
fn keys_secret() -> anyhow::Result<String> {
    let dir = std::env::temp_dir().join(format!("vfps-chaos-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("keys");
    let made = vfps_keys::source::FileKey::init(&path).map_err(|e| anyhow::anyhow!(e.message));
    let text = made.and_then(|_| Ok(std::fs::read_to_string(&path)?));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {KEYS_SECRET}\n  namespace: {NAMESPACE}\n\
         type: Opaque\nstringData:\n  keys: {}\n",
        serde_json::to_string(text?.trim())?
    ))
}

/// The node id `garage node id -q` printed: 64 hex digits, with `@addr`
/// when the node's configuration names its public address (ours does not).
pub fn node_id_of(out: &str) -> anyhow::Result<String> {
    let id = out.trim().split('@').next().unwrap_or_default();
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("`garage node id -q` printed no node id: {:?}", out.trim());
    }
    Ok(id.to_owned())
}

/// A key as `garage key create` prints it: `Key ID:` and `Secret key:`.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Key {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for S3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Key").field("id", &self.id).finish()
    }
}

pub fn key_of(out: &str) -> anyhow::Result<S3Key> {
    let field = |name: &str| {
        out.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
            .filter(|v| !v.is_empty())
            .with_context(|| format!("no {name:?} in what `garage key create` printed"))
    };
    let secret = field("Secret key")?;
    if secret == "(redacted)" {
        bail!("`garage key create` printed the secret key redacted");
    }
    Ok(S3Key {
        id: field("Key ID")?,
        secret,
    })
}

/// Whether `garage json-api GetClusterHealth` reports every node of the
/// layout connected and every partition with its quorum.
pub fn healthy(health: &Value) -> bool {
    let n = |k: &str| health[k].as_u64();
    health["status"] == "healthy"
        && n("storageNodes") == Some(NODES as u64)
        && n("storageNodesOk") == Some(NODES as u64)
        && n("partitions").is_some()
        && n("partitionsQuorum") == n("partitions")
}

/// The rendered manifest of the object store: the image from versions.env.
pub fn manifest(asset: &str, image: &str) -> anyhow::Result<String> {
    assets::render_asset(asset, &[("GARAGE_IMAGE", image.to_owned())])
}

impl<R: Runner> Kube<R> {
    /// `garage ARGS…` inside a node's pod (the configuration at its default
    /// path, the RPC secret in the container's environment).
    pub(crate) async fn garage(&self, pod: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut a = vec![
            "exec", "-n", NAMESPACE, pod, "-c", "garage", "--", "/garage",
        ];
        a.extend_from_slice(args);
        self.kubectl(&a).await
    }

    async fn garage_json(&self, pod: &str, endpoint: &str) -> anyhow::Result<Value> {
        let out = self.garage(pod, &["json-api", endpoint]).await?;
        serde_json::from_str(&out)
            .with_context(|| format!("garage json-api {endpoint} in {pod}: not JSON"))
    }

    /// Garage's pods, sorted by name.
    pub(crate) async fn garage_pods(&self) -> anyhow::Result<Vec<Pod>> {
        let mut pods = pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", GARAGE_PODS])
                .await?,
        );
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(pods)
    }

    async fn secret_exists(&self, name: &str) -> anyhow::Result<bool> {
        let out = self
            .kubectl(&[
                "get",
                "secret",
                name,
                "-n",
                NAMESPACE,
                "--ignore-not-found",
                "-o",
                "name",
            ])
            .await?;
        Ok(!out.trim().is_empty())
    }

    async fn zone_of(&self, node: &str) -> anyhow::Result<String> {
        let n = self.get_json(&["node", node]).await?;
        n["metadata"]["labels"][ZONE_LABEL]
            .as_str()
            .filter(|z| !z.is_empty())
            .map(str::to_owned)
            .with_context(|| format!("node {node} has no {ZONE_LABEL} label"))
    }

    /// `up`'s step: Garage installed, laid out, with the bucket and vfps's key
    /// in [`S3_SECRET`], and healthy. Steps a reused cluster has done are
    /// skipped: its RPC secret, layout, bucket and key stay.
    pub async fn install_objects(&self, image: &str, timeout: Duration) -> anyhow::Result<()> {
        if !self.secret_exists(RPC_SECRET).await? {
            // The plaintext travels only through kubectl's standard input.
            let secret = hex::encode(rand::random::<[u8; 32]>());
            self.apply(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {RPC_SECRET}\n  namespace: {NAMESPACE}\n\
                 type: Opaque\nstringData:\n  rpc-secret: {secret}\n"
            ))
            .await?;
        }
        self.apply(&manifest(&self.asset("garage.yaml")?, image)?)
            .await?;
        let ids = self.wait_garage_nodes(timeout).await?;
        let first = &ids[0].0.name;
        // Idempotent: a node that knows the others already just says so.
        for (pod, id) in &ids[1..] {
            let ip = self.pod_ip(&pod.name).await?;
            self.garage(
                first,
                &["node", "connect", &format!("{id}@{ip}:{RPC_PORT}")],
            )
            .await?;
        }
        self.lay_out(&ids).await?;
        if self
            .garage(first, &["bucket", "info", BUCKET])
            .await
            .is_err()
        {
            self.garage(first, &["bucket", "create", BUCKET]).await?;
        }
        if !self.secret_exists(S3_SECRET).await? {
            let key = key_of(&self.garage(first, &["key", "create", KEY_NAME]).await?)?;
            self.garage(
                first,
                &[
                    "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", &key.id,
                ],
            )
            .await?;
            self.apply(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {S3_SECRET}\n  namespace: {NAMESPACE}\n\
                 type: Opaque\nstringData:\n  {S3_SECRET_ACCESS_KEY}: {}\n  {S3_SECRET_SECRET_KEY}: {}\n",
                key.id, key.secret
            ))
            .await?;
        }
        if !self.secret_exists(KEYS_SECRET).await? {
            self.apply(&keys_secret()?).await?;
        }
        self.wait_objects_healthy(timeout).await
    }

    /// `up`'s step after [`Kube::install_objects`]: the backup bucket, its
    /// key in [`BACKUP_SECRET`], and the database Cluster patched with
    /// `cnpg-backup.yaml` (WAL archiving and base backups to that bucket;
    /// docs/backup.md). A reused cluster keeps its bucket and key.
    pub async fn install_backup(&self) -> anyhow::Result<()> {
        let first = &self
            .garage_pods()
            .await?
            .first()
            .context("no Garage pod")?
            .name
            .clone();
        if self
            .garage(first, &["bucket", "info", BACKUP_BUCKET])
            .await
            .is_err()
        {
            self.garage(first, &["bucket", "create", BACKUP_BUCKET])
                .await?;
        }
        if !self.secret_exists(BACKUP_SECRET).await? {
            let key = key_of(
                &self
                    .garage(first, &["key", "create", BACKUP_KEY_NAME])
                    .await?,
            )?;
            self.garage(
                first,
                &[
                    "bucket",
                    "allow",
                    "--read",
                    "--write",
                    "--owner",
                    BACKUP_BUCKET,
                    "--key",
                    &key.id,
                ],
            )
            .await?;
            self.apply(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {BACKUP_SECRET}\n  namespace: {NAMESPACE}\n\
                 type: Opaque\nstringData:\n  ACCESS_KEY_ID: {}\n  ACCESS_SECRET_KEY: {}\n  REGION: {REGION}\n",
                key.id, key.secret
            ))
            .await?;
        }
        let patch = self.asset("cnpg-backup.yaml")?;
        self.kubectl(&[
            "patch", "cluster", "vfps-db", "-n", NAMESPACE, "--type", "merge", "-p", &patch,
        ])
        .await?;
        Ok(())
    }

    /// Waits until every node's pod runs and its RPC answers; each pod with
    /// its node id, sorted by name.
    async fn wait_garage_nodes(&self, timeout: Duration) -> anyhow::Result<Vec<(Pod, String)>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut ids = Vec::new();
            let pods = self.garage_pods().await.unwrap_or_default();
            for pod in pods.into_iter().filter(|p| !p.terminating) {
                // `node id` reads the key from disk; `status` needs the RPC.
                if self.garage(&pod.name, &["status"]).await.is_err() {
                    break;
                }
                let Ok(out) = self.garage(&pod.name, &["node", "id", "-q"]).await else {
                    break;
                };
                let id = node_id_of(&out)?;
                ids.push((pod, id));
            }
            if ids.len() == NODES {
                return Ok(ids);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} of {NODES} object store nodes answered within {timeout:?}",
                    ids.len()
                );
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Assigns each node its Kubernetes node's zone and applies the first
    /// layout; a cluster laid out before is checked instead.
    async fn lay_out(&self, ids: &[(Pod, String)]) -> anyhow::Result<()> {
        let first = &ids[0].0.name;
        let status = self.garage_json(first, "GetClusterStatus").await?;
        if status["layoutVersion"].as_u64().unwrap_or(0) > 0 {
            let roles = status["nodes"]
                .as_array()
                .map(|nodes| {
                    nodes
                        .iter()
                        .filter(|n| !n["role"].is_null())
                        .filter_map(|n| n["id"].as_str())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            if let Some((pod, _)) = ids.iter().find(|(_, id)| !roles.contains(&id.as_str())) {
                bail!(
                    "the object store was laid out before, without {} (a node that lost its volume?); \
                     delete the cluster (`vfps-chaos kind down`) and start again",
                    pod.name
                );
            }
            return Ok(());
        }
        let mut zones = Vec::new();
        for (pod, _) in ids {
            let zone = self.zone_of(&pod.node).await?;
            if zones.contains(&zone) {
                bail!(
                    "two object store nodes in zone {zone} ({} on {}): the spread constraint did not hold",
                    pod.name,
                    pod.node
                );
            }
            zones.push(zone);
        }
        for ((_, id), zone) in ids.iter().zip(&zones) {
            self.garage(first, &["layout", "assign", "-z", zone, "-c", CAPACITY, id])
                .await?;
        }
        self.garage(first, &["layout", "apply", "--version", "1"])
            .await?;
        Ok(())
    }

    /// Every node ready and, as the first answering node sees it, connected
    /// to the others with every partition's quorum.
    pub async fn wait_objects_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        self.kubectl(&[
            "rollout",
            "status",
            &format!("statefulset/{STATEFULSET}"),
            "-n",
            NAMESPACE,
            &format!("--timeout={}s", timeout.as_secs()),
        ])
        .await?;
        wait_every(
            "the object store healthy (every node connected, every partition's quorum)",
            timeout,
            self.poll,
            || self.objects_healthy(None),
        )
        .await
    }

    /// Health as `from` (else the first ready node) reports it, every node ready.
    async fn objects_healthy(&self, from: Option<&str>) -> bool {
        let Ok(pods) = self.garage_pods().await else {
            return false;
        };
        let ready = pods.iter().filter(|p| p.ready && !p.terminating).count();
        let Some(asked) = from.or_else(|| pods.iter().find(|p| p.ready).map(|p| p.name.as_str()))
        else {
            return false;
        };
        ready == NODES
            && self
                .garage_json(asked, "GetClusterHealth")
                .await
                .is_ok_and(|h| healthy(&h))
    }

    /// The object store's nodes by pod name (the seed indexes them).
    pub async fn objects_node_names(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .garage_pods()
            .await?
            .into_iter()
            .filter(|p| !p.terminating)
            .map(|p| p.name)
            .collect())
    }

    /// Kills the node's pod with the one-shot PodChaos; returns once that
    /// incarnation is gone (Chaos Mesh reports no injection for a pod kill).
    pub async fn kill_objects_pod(&self, node: &str) -> anyhow::Result<()> {
        self.kill_pod(OBJECTS_KILL, "object store pod", node, || {
            self.garage_pods()
        })
        .await
        .map(drop)
    }

    /// Whether the node's S3 port accepts a connection, tried from a database
    /// pod (Garage's and vfps's images have no shell to try from).
    pub async fn objects_pod_answers(&self, node: &str) -> bool {
        let Ok(ip) = self.pod_ip(node).await else {
            return false;
        };
        let Ok(from) = self.db_probe_pod().await else {
            return false;
        };
        matches!(
            self.connect_from_db(&from, &ip, S3_PORT).await,
            Ok(Connect::Connected)
        )
    }

    /// A ready database pod: it has bash to connect from.
    async fn db_probe_pod(&self) -> anyhow::Result<String> {
        pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", assets::DB_PODS])
                .await?,
        )
        .into_iter()
        .find(|p| p.ready && !p.terminating)
        .map(|p| p.name)
        .context("no ready database pod to probe the object store from")
    }

    /// Removes the spent PodChaos and waits until the re-created node is
    /// ready and sees the whole store healthy.
    pub async fn restore_objects_pod(&self, node: &str) -> anyhow::Result<()> {
        self.remove(OBJECTS_KILL).await?;
        wait_every(
            &format!("object store node {node} back, every node connected"),
            self.heal_timeout,
            self.poll,
            || self.objects_healthy(Some(node)),
        )
        .await
    }
}
