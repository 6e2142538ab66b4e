//! The object store in the simulated cluster: Garage's StatefulSet, its pods
//! and what `garage` answers inside them (node ids, connections, the layout,
//! buckets, keys, health), the Secrets around it and the PodChaos that kills a
//! node. It records what the driver must never do: lay out nodes it has not
//! connected, put two nodes in one zone, replace a cluster's RPC secret, hand
//! vfps a key the bucket does not allow, install vfps before its Secret, kill a
//! node while another is down.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{field, NODES};
use crate::platform::kind::objects::{self, BUCKET, S3_SECRET};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

#[derive(Debug, Clone)]
pub(super) struct GaragePod {
    pub uid: u64,
    /// Reads until its container runs (0 = running).
    pub warming: u32,
}

#[derive(Debug, Default)]
pub(super) struct FakeGarage {
    /// The StatefulSet as applied (its image is checked).
    pub statefulset: Option<String>,
    pub rpc_secret: Option<String>,
    /// The Secret vfps reads: (access key id, secret key).
    pub s3_secret: Option<(String, String)>,
    /// The Secret CloudNativePG archives with: (access key id, secret key).
    pub backup_secret: Option<(String, String)>,
    /// The Secret of vfps's key file, as applied.
    pub keys_secret: Option<String>,
    /// garage-0, garage-1, garage-2 by ordinal, once the StatefulSet exists.
    pub pods: Vec<GaragePod>,
    next_uid: u64,
    /// Ordinals garage-0 is connected to (itself included).
    connected: BTreeSet<usize>,
    pub layout_version: u64,
    staged: BTreeMap<String, String>,
    /// Node id → zone, as applied.
    pub roles: BTreeMap<String, String>,
    pub buckets: BTreeSet<String>,
    /// (id, secret).
    pub keys: Vec<(String, String)>,
    /// (bucket, key id) with read, write and owner.
    pub allowed: Vec<(String, String)>,
    /// The kill PodChaos exists.
    pub kill_chaos: bool,
    /// Chaos Mesh ignores the kill (an inert injection).
    pub inert: bool,
    pub violations: Vec<String>,
}

/// A node's id: its key lives on the pod's volume, so a re-created pod keeps it.
pub(super) fn node_id(ordinal: usize) -> String {
    format!("{:064x}", 0xab00 + ordinal)
}

fn ordinal(pod: &str) -> Option<usize> {
    pod.strip_prefix("garage-")?
        .parse()
        .ok()
        .filter(|i| *i < NODES.len())
}

impl FakeGarage {
    fn up(&self, i: usize) -> bool {
        self.pods.get(i).is_some_and(|p| p.warming == 0)
    }

    fn ip(&self, i: usize) -> Option<String> {
        let p = self.pods.get(i).filter(|p| p.warming == 0)?;
        Some(format!("10.245.{}.{}", i, p.uid % 250 + 2))
    }

    /// Nodes of the layout that run.
    fn storage_ok(&self) -> usize {
        (0..self.pods.len())
            .filter(|i| self.up(*i) && self.roles.contains_key(&node_id(*i)))
            .count()
    }

    /// Ready: its /health answers 200, which needs a layout and a quorum.
    fn ready(&self, i: usize) -> bool {
        self.up(i) && self.layout_version > 0 && self.storage_ok() >= 2
    }

    fn tick(&mut self) {
        for p in &mut self.pods {
            p.warming = p.warming.saturating_sub(1);
        }
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    fn pod_list(&mut self) -> Value {
        self.tick();
        let items: Vec<Value> = (0..self.pods.len())
            .map(|i| {
                json!({
                    "metadata": {"name": format!("garage-{i}"), "uid": format!("g{}", self.pods[i].uid)},
                    "spec": {"nodeName": NODES[i]},
                    "status": {"conditions": [{"type": "Ready", "status": if self.ready(i) { "True" } else { "False" }}]},
                })
            })
            .collect();
        json!({ "items": items })
    }

    /// Answers a command that concerns the object store; `None` leaves it to
    /// the rest of the simulated cluster.
    pub fn answer(
        &mut self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> Option<anyhow::Result<String>> {
        if program == "helm" && args.starts_with(&["upgrade", "--install", "vfps"]) {
            if self.s3_secret.is_none() || self.storage_ok() < NODES.len() {
                self.violations
                    .push("vfps installed before its S3 Secret and a healthy object store".into());
            }
            if self.keys_secret.is_none() {
                self.violations
                    .push("vfps installed before the Secret of its key file".into());
            }
            return None;
        }
        if program != "kubectl" {
            return None;
        }
        let json = |v: Value| Some(Ok(v.to_string()));
        match args {
            ["get", "secret", name, "-n", "vfps", "--ignore-not-found", "-o", "name"] => {
                let present = match *name {
                    objects::RPC_SECRET => self.rpc_secret.is_some(),
                    S3_SECRET => self.s3_secret.is_some(),
                    objects::BACKUP_SECRET => self.backup_secret.is_some(),
                    objects::KEYS_SECRET => self.keys_secret.is_some(),
                    _ => return None,
                };
                Some(Ok(if present {
                    format!("secret/{name}")
                } else {
                    String::new()
                }))
            }
            ["get", "pods", "-n", "vfps", "-l", objects::GARAGE_PODS, "-o", "json"] => {
                json(self.pod_list())
            }
            ["get", "pod", name, "-n", "vfps", "-o", "json"] => {
                let i = ordinal(name)?;
                self.tick();
                json(json!({"status": {"podIP": self.ip(i).unwrap_or_default()}}))
            }
            ["get", "node", name, "-o", "json"] => {
                let i = NODES.iter().position(|n| n == name)?;
                json(json!({"metadata": {"labels": {"topology.kubernetes.io/zone": ZONES[i]}}}))
            }
            ["get", "podchaos", "objects-pod-kill", "-n", "vfps", "--ignore-not-found", "-o", "name"] => {
                Some(Ok(if self.kill_chaos {
                    "podchaos/objects-pod-kill".into()
                } else {
                    String::new()
                }))
            }
            ["rollout", "status", "statefulset/garage", ..] => {
                // kubectl waits: time passes until every pod is ready, or not.
                for _ in 0..10 {
                    if (0..NODES.len()).all(|i| self.ready(i)) {
                        return Some(Ok("partitioned roll out complete".into()));
                    }
                    self.tick();
                }
                Some(Err(anyhow::anyhow!(
                    "error: timed out waiting for the condition"
                )))
            }
            ["exec", "-n", "vfps", pod, "-c", "garage", "--", "/garage", rest @ ..] => {
                let i = ordinal(pod)?;
                self.tick();
                Some(self.garage(i, rest))
            }
            ["exec", "-n", "vfps", _, "-c", "postgres", "--", "bash", "-c", script] => {
                let i = (0..self.pods.len()).find(|i| {
                    self.ip(*i)
                        .is_some_and(|ip| script.contains(&format!("/dev/tcp/{ip}/3900")))
                })?;
                Some(Ok(if self.up(i) {
                    "connected\n".into()
                } else {
                    "exit 124\n".into()
                }))
            }
            ["apply", "-f", "-"] => {
                let docs: Vec<&str> = input?.split("\n---").collect();
                if !docs.iter().all(|d| is_ours(d)) {
                    return None;
                }
                for d in docs {
                    if let Err(e) = self.apply(d) {
                        return Some(Err(e));
                    }
                }
                Some(Ok(String::new()))
            }
            ["delete", "--ignore-not-found", "--wait=true", "-f", "-"] => {
                let d = input?;
                if !is_ours(d) {
                    return None;
                }
                if field(d, "kind:") == "PodChaos" {
                    self.kill_chaos = false;
                }
                Some(Ok(String::new()))
            }
            _ => None,
        }
    }

    fn apply(&mut self, doc: &str) -> anyhow::Result<()> {
        if doc.contains("${") {
            anyhow::bail!("unrendered placeholder in {doc}");
        }
        let value = |key: &str| {
            doc.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        match (field(doc, "kind:").as_str(), field(doc, "  name:").as_str()) {
            ("Secret", objects::RPC_SECRET) => {
                if self.rpc_secret.is_some() {
                    self.violations
                        .push("the cluster's RPC secret replaced: its nodes no longer talk".into());
                }
                let s = value("rpc-secret:");
                if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    self.violations
                        .push("the RPC secret is not 32 bytes in hex".into());
                }
                self.rpc_secret = Some(s);
            }
            ("Secret", S3_SECRET) => {
                let (id, secret) = (value("access-key:"), value("secret-key:"));
                if !self.keys.contains(&(id.clone(), secret.clone())) {
                    self.violations
                        .push("vfps's Secret holds no key of the store".into());
                }
                if !self.allowed.contains(&(BUCKET.to_owned(), id.clone())) {
                    self.violations
                        .push("vfps's key may not read, write and own the bucket".into());
                }
                self.s3_secret = Some((id, secret));
            }
            ("Secret", objects::KEYS_SECRET) => {
                if self.keys_secret.is_some() {
                    self.violations.push(
                        "vfps's key file replaced: its sealed originals no longer open".into(),
                    );
                }
                let file = value("keys:");
                if !file.trim_matches('"').starts_with("vfps-key-v1 ") {
                    self.violations
                        .push(format!("the keys Secret holds no key file: {file}"));
                }
                self.keys_secret = Some(file);
            }
            ("Secret", objects::BACKUP_SECRET) => {
                let (id, secret) = (value("ACCESS_KEY_ID:"), value("ACCESS_SECRET_KEY:"));
                if !self.keys.contains(&(id.clone(), secret.clone())) {
                    self.violations
                        .push("the backup Secret holds no key of the store".into());
                }
                if !self
                    .allowed
                    .contains(&(objects::BACKUP_BUCKET.to_owned(), id.clone()))
                {
                    self.violations
                        .push("the backup key may not read, write and own its bucket".into());
                }
                if self.s3_secret.as_ref().is_some_and(|(vfps, _)| *vfps == id) {
                    self.violations
                        .push("the database's backups share vfps's key".into());
                }
                if value("REGION:") != "garage" {
                    self.violations
                        .push("the backup Secret's region is not Garage's".into());
                }
                self.backup_secret = Some((id, secret));
            }
            ("StatefulSet", "garage") => {
                if self.rpc_secret.is_none() {
                    self.violations
                        .push("the nodes started before their RPC secret existed".into());
                }
                self.statefulset = Some(doc.to_owned());
                while self.pods.len() < NODES.len() {
                    let uid = self.uid();
                    self.pods.push(GaragePod { uid, warming: 3 });
                }
                self.connected.insert(0);
            }
            ("PodChaos", "objects-pod-kill") => {
                let victim = value("vfps: [");
                let victim = victim.trim_end_matches(']');
                let Some(i) = ordinal(victim) else {
                    self.violations
                        .push(format!("the kill selects {victim:?}, not a Garage pod"));
                    return Ok(());
                };
                if (0..self.pods.len()).any(|j| !self.up(j)) {
                    self.violations
                        .push("an object store node killed while another was down".into());
                }
                self.kill_chaos = true;
                if !self.inert {
                    let uid = self.uid();
                    self.pods[i] = GaragePod { uid, warming: 4 };
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `garage ARGS` in pod `i`.
    fn garage(&mut self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        if !self.up(i) {
            anyhow::bail!("error: unable to upgrade connection: container not found (\"garage\")");
        }
        let unreachable = || anyhow::anyhow!("Error: Unable to connect to destination RPC host");
        match args {
            ["status"] => Ok("==== HEALTHY NODES ====\n".into()),
            ["node", "id", "-q"] => Ok(format!("{}\n", node_id(i))),
            ["node", "connect", peer] => {
                let (id, addr) = peer.split_once('@').ok_or_else(unreachable)?;
                let j = (0..NODES.len())
                    .find(|j| node_id(*j) == id)
                    .ok_or_else(unreachable)?;
                if self.ip(j).map(|ip| format!("{ip}:3901")).as_deref() != Some(addr) {
                    return Err(unreachable());
                }
                self.connected.insert(j);
                Ok("Success.\n".into())
            }
            ["layout", "assign", "-z", zone, "-c", "1G", id] => {
                let known =
                    (0..NODES.len()).any(|j| node_id(j) == *id && self.connected.contains(&j));
                if !known {
                    anyhow::bail!("Error: 1 id(s) could not be found: {id}");
                }
                if self.staged.values().any(|z| z == zone) {
                    self.violations
                        .push(format!("two object store nodes in zone {zone}"));
                }
                self.staged.insert((*id).to_owned(), (*zone).to_owned());
                Ok("Role changes are staged\n".into())
            }
            ["layout", "apply", "--version", v] => {
                if v.parse::<u64>().ok() != Some(self.layout_version + 1) {
                    anyhow::bail!("Error: Invalid new layout version");
                }
                if self.staged.len() != NODES.len() {
                    self.violations
                        .push(format!("a layout of {} nodes applied", self.staged.len()));
                }
                self.roles = std::mem::take(&mut self.staged);
                self.layout_version += 1;
                Ok("New cluster layout with updated role assignment has been applied\n".into())
            }
            ["bucket", "info", b] if self.buckets.contains(*b) => Ok(format!("Bucket: {b}\n")),
            ["bucket", "info", b] => anyhow::bail!("Error: Bucket not found: {b}"),
            ["bucket", "create", b] => {
                if !self.buckets.insert((*b).to_owned()) {
                    anyhow::bail!("Error: Bucket {b} already exists");
                }
                Ok(format!("Bucket {b} was created.\n"))
            }
            ["key", "create", _name] => {
                let n = self.keys.len();
                let key = (
                    format!("GK{:024x}", 0xc0de + n),
                    format!("{:064x}", 0x5ec + n),
                );
                self.keys.push(key.clone());
                Ok(format!(
                    "==== ACCESS KEY INFORMATION ====\nKey ID:              {}\nKey name:            vfps\nSecret key:          {}\nCreated:             2026-12-03\n",
                    key.0, key.1
                ))
            }
            ["bucket", "allow", "--read", "--write", "--owner", b, "--key", k] => {
                if !self.buckets.contains(*b) || !self.keys.iter().any(|(id, _)| id == k) {
                    anyhow::bail!("Error: no such bucket or key");
                }
                self.allowed.push(((*b).to_owned(), (*k).to_owned()));
                Ok("ok\n".into())
            }
            ["json-api", "GetClusterStatus"] => {
                let nodes: Vec<Value> = self
                    .connected
                    .iter()
                    .map(|j| {
                        let id = node_id(*j);
                        json!({"id": id, "isUp": self.up(*j),
                               "role": self.roles.get(&id).map(|z| json!({"zone": z, "capacity": 1_000_000_000}))})
                    })
                    .collect();
                Ok(json!({"layoutVersion": self.layout_version, "nodes": nodes}).to_string())
            }
            ["json-api", "GetClusterHealth"] => {
                let ok = self.storage_ok();
                let status = match ok {
                    3 => "healthy",
                    2 => "degraded",
                    _ => "unavailable",
                };
                Ok(json!({"status": status, "knownNodes": self.connected.len(), "connectedNodes": ok,
                          "storageNodes": self.roles.len(), "storageNodesOk": ok, "partitions": 256,
                          "partitionsQuorum": if ok >= 2 { 256 } else { 0 }, "partitionsAllOk": if ok == 3 { 256 } else { 0 }})
                .to_string())
            }
            other => anyhow::bail!("unexpected garage command {other:?}"),
        }
    }
}

/// Whether a manifest document is the object store's (or its kill's).
fn is_ours(doc: &str) -> bool {
    let name = field(doc, "  name:");
    matches!(
        (field(doc, "kind:").as_str(), name.as_str()),
        (
            "Secret",
            objects::RPC_SECRET | S3_SECRET | objects::BACKUP_SECRET | objects::KEYS_SECRET
        ) | ("ConfigMap", "garage-config")
            | ("Service", "garage" | "garage-headless")
            | ("StatefulSet", "garage")
            | ("PodDisruptionBudget", "garage")
            | ("PodChaos", "objects-pod-kill")
    )
}
