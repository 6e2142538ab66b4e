//! The kind driver against a simulated cluster. No Kubernetes API can run on the
//! project's machines, so a fake `kubectl` answers from a small model of the HA
//! topology (three vfps pods, a three-instance CloudNativePG cluster, Chaos Mesh
//! objects, nodes, and the object store in [`garage`]) and records every
//! command. The model also checks the driver's promises: faults only on a
//! healthy cluster, never two database faults at once, never draining the
//! primary's node, and nothing left behind. The manifests themselves are
//! validated with real tools by `scripts/validate-k8s.sh`. The object store's
//! tests are in [`objects`].

#![allow(clippy::unwrap_used)]

use std::{path::PathBuf, sync::Mutex as StdMutex, time::Duration};

use serde_json::{json, Value};

use super::{
    chaos::{partition_burst, pod_kill_schedule, PARTITION_BURST},
    cluster,
    driver::{KindArgs, KindDriver},
    gray,
    install::{self, inotify_problem},
    job, *,
};
use crate::{
    config::LoadConfig,
    driver::{self as steps, Driver},
    nemesis::{self, Knobs, Recorder},
    scenario::{Draw, Planned, Scenario, ScenarioName, ScenarioPlan as Plan},
    target::Target,
};

mod drill;
mod garage;
mod jobs;
mod objects;

/// The driver over a (simulated) cluster.
fn driver<R: Runner>(kube: Kube<R>) -> KindDriver<R> {
    KindDriver {
        kube,
        args: kind_args(),
        inotify: None,
    }
}

#[derive(Debug, Clone)]
struct FakePod {
    name: String,
    uid: u64,
    node: String,
    /// Reads of the pod list until it is ready (0 = ready).
    warming: u32,
    terminating: bool,
}

#[derive(Default)]
struct Model {
    /// The run's tokens Secret was applied, with every token.
    tokens_secret: bool,
    /// The merge patch `up` applied to the database Cluster (cnpg-backup.yaml).
    backup_patch: Option<String>,
    /// Image archives `docker image save` wrote: path → holds one platform.
    /// This Docker uses the containerd image store and the images are
    /// multi-arch, of which this machine pulled one platform: a plain save
    /// writes the whole index without the other platforms' blobs.
    archives: std::collections::BTreeMap<String, bool>,
    vfps: Vec<FakePod>,
    db: Vec<FakePod>,
    primary: Option<String>,
    /// Status reads until the database is healthy again (0 = healthy).
    db_recovering: u32,
    /// Status reads while CloudNativePG still bootstraps: it adds the replicas
    /// one at a time, so only the first instance exists (and is ready).
    bootstrapping: u32,
    next_uid: u64,
    pod_kill_schedule: bool,
    pod_list_reads: u64,
    last_kill_read: u64,
    primary_chaos: bool,
    partition: Option<u32>,
    cordoned: Vec<String>,
    drained_db: Option<String>,
    job: Option<String>,
    /// The primary's timeline: every promotion starts a new one.
    timeline: u64,
    /// WAL the primary wrote; what the standbys received.
    wal: u64,
    standby_wal: u64,
    /// One-shot gray faults: reads until injected.
    isolation: Option<u32>,
    replica_cut: Option<(String, u32)>,
    delay: Option<u32>,
    /// What the delay's netem adds to a round trip of vfps's database traffic
    /// once injected. Chaos Mesh filters netem by destination IP: `to` puts it
    /// on the vfps pods for the database pods' IPs, which vfps's packets to the
    /// -rw ClusterIP never carry (zero); `from` and `both` put it on the
    /// database pods for the vfps pods' IPs, which every reply carries.
    delay_on_round_trip: Duration,
    standby_chaos: Option<String>,
    /// Standbys that are Ready but do not stream (catching up, or their
    /// walreceiver is down): the primary does not list them as quorum.
    not_streaming: Vec<String>,
    /// Knobs of a scenario test.
    drain_times_out: bool,
    /// The double failover kills the promoted primary on purpose.
    second_kill_expected: bool,
    no_primary: bool,
    /// The object store and its Secrets.
    objects: garage::FakeGarage,
    /// vfps's `csv_jobs` as the primary holds them, as `psql -At` prints them.
    csv_jobs: Vec<String>,
    /// What `csv_jobs` becomes once a vfps pod is killed by name (its jobs
    /// taken over by another replica).
    csv_jobs_after_kill: Option<Vec<String>>,
    /// The named vfps pod kill is applied; `inert`: it kills nothing.
    runner_kill: bool,
    runner_kill_inert: bool,
    commands: Vec<String>,
    violations: Vec<String>,
}

struct FakeKubectl(StdMutex<Model>);

const NODES: [&str; 3] = ["vfps-ha-worker", "vfps-ha-worker2", "vfps-ha-worker3"];

impl FakeKubectl {
    fn new() -> Self {
        let mut m = Model::default();
        for (i, node) in NODES.iter().enumerate() {
            m.next_uid += 1;
            m.vfps.push(FakePod {
                name: format!("vfps-{i}"),
                uid: m.next_uid,
                node: (*node).into(),
                warming: 0,
                terminating: false,
            });
            m.next_uid += 1;
            m.db.push(FakePod {
                name: format!("vfps-db-{}", i + 1),
                uid: m.next_uid,
                node: (*node).into(),
                warming: 0,
                terminating: false,
            });
        }
        m.primary = Some("vfps-db-1".into());
        m.timeline = 1;
        Self(StdMutex::new(m))
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.0.lock().unwrap()
    }
}

impl Model {
    fn healthy(&self) -> bool {
        self.db_recovering == 0 && self.drained_db.is_none() && self.primary.is_some()
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    fn ip(p: &FakePod) -> String {
        format!("10.244.{}.{}", p.uid / 250, p.uid % 250 + 2)
    }

    fn pod_json(p: &FakePod) -> Value {
        json!({
            "metadata": {
                "name": p.name,
                "uid": p.uid.to_string(),
                "deletionTimestamp": if p.terminating { json!("2026-11-30T00:00:00Z") } else { Value::Null },
            },
            "spec": {"nodeName": p.node},
            "status": {"conditions": [{"type": "Ready", "status": if p.warming == 0 && !p.terminating { "True" } else { "False" }}]},
        })
    }

    fn read_vfps(&mut self) -> Value {
        self.tick();
        let cut = self
            .replica_cut
            .clone()
            .filter(|(_, reads)| *reads == 0)
            .map(|(name, _)| name);
        let items: Vec<Value> = self
            .vfps
            .iter()
            .map(|p| {
                let mut j = Self::pod_json(p);
                // A replica cut off from its database reports not ready.
                if cut.as_deref() == Some(p.name.as_str()) {
                    j["status"]["conditions"][0]["status"] = json!("False");
                }
                j
            })
            .collect();
        json!({ "items": items })
    }

    /// The standbys: every instance but the primary and a killed one.
    fn read_standbys(&self) -> Value {
        let items: Vec<Value> = self
            .db
            .iter()
            .filter(|p| Some(&p.name) != self.primary.as_ref())
            .filter(|p| self.standby_chaos.as_ref() != Some(&p.name) || self.db_recovering == 0)
            .map(Self::pod_json)
            .collect();
        json!({ "items": items })
    }

    /// What the primary's pg_stat_replication lists as streaming and quorum.
    fn quorum_standbys(&self) -> Vec<String> {
        if self.isolation == Some(0) {
            return Vec::new();
        }
        let mut names: Vec<String> = self
            .db
            .iter()
            .map(|p| p.name.clone())
            .filter(|n| Some(n) != self.primary.as_ref())
            .filter(|n| self.standby_chaos.as_ref() != Some(n) || self.db_recovering == 0)
            .filter(|n| !self.not_streaming.contains(n))
            .collect();
        names.sort();
        names
    }

    fn pod(&self, name: &str) -> Option<&FakePod> {
        self.vfps.iter().chain(&self.db).find(|p| p.name == name)
    }

    /// `kubectl exec` into a database pod: the TCP probe or psql.
    fn exec(&mut self, pod: &str, command: &[&str]) -> anyhow::Result<String> {
        let Some(from) = self.pod(pod).cloned() else {
            anyhow::bail!("pods {pod:?} not found");
        };
        let primary = self.primary.clone().unwrap_or_default();
        let isolated = self.isolation == Some(0);
        if command.first() == Some(&"psql") {
            if command.iter().any(|c| c.contains("csv_jobs")) {
                if !command.windows(2).any(|w| w == ["-d", "vfps"]) {
                    anyhow::bail!("ERROR:  relation \"csv_jobs\" does not exist");
                }
                if from.name != primary {
                    // A standby that has not replayed the latest takeover.
                    return Ok(String::new());
                }
                return Ok(self.csv_jobs.iter().map(|l| format!("{l}\n")).collect());
            }
            if command.iter().any(|c| c.contains("pg_stat_replication")) {
                if from.name != primary {
                    // A standby's pg_stat_replication is empty.
                    return Ok(String::new());
                }
                return Ok(self.quorum_standbys().join("\n"));
            }
            if from.name == primary {
                self.wal += 100;
                return Ok(format!("f|{}\n", self.wal));
            }
            if !isolated {
                self.standby_wal = self.wal;
            }
            return Ok(format!("t|{}\n", self.standby_wal));
        }
        let script = command.last().copied().unwrap_or_default();
        let target = self
            .vfps
            .iter()
            .chain(&self.db)
            .find(|p| script.contains(&format!("/dev/tcp/{}/", Self::ip(p))))
            .cloned();
        let Some(target) = target else {
            return Ok("exit 1\n".into());
        };
        let between_instances = self.db.iter().any(|d| d.name == target.name);
        let cut = if between_instances {
            isolated && (from.name == primary || target.name == primary)
        } else {
            self.partition == Some(0)
                || self
                    .replica_cut
                    .as_ref()
                    .is_some_and(|(r, reads)| *reads == 0 && *r == target.name)
        };
        Ok(if cut { "exit 124\n" } else { "connected\n" }.into())
    }

    /// A one-shot gray fault's status: injected after a few reads.
    fn injected(reads: &mut Option<u32>) -> anyhow::Result<Value> {
        let Some(r) = reads.as_mut() else {
            anyhow::bail!("NotFound");
        };
        let injected = if *r == 0 { "True" } else { "False" };
        *r = r.saturating_sub(1);
        Ok(json!({"status": {"conditions": [{"type": "AllInjected", "status": injected}]}}))
    }

    /// Time passes with every read of the workload: terminating pods go, new pods
    /// warm up, and the pod-kill schedule kills one pod every twentieth read.
    fn tick(&mut self) {
        self.pod_list_reads += 1;
        let gone: Vec<FakePod> = self
            .vfps
            .iter()
            .filter(|p| p.terminating)
            .cloned()
            .collect();
        self.vfps.retain(|p| !p.terminating);
        for g in gone {
            let uid = self.uid();
            let node = if self.cordoned.contains(&g.node) {
                NODES
                    .iter()
                    .find(|n| !self.cordoned.iter().any(|c| c == *n))
                    .unwrap()
                    .to_string()
            } else {
                g.node
            };
            self.vfps.push(FakePod {
                name: format!("vfps-r{uid}"),
                uid,
                node,
                warming: 2,
                terminating: false,
            });
        }
        for p in &mut self.vfps {
            p.warming = p.warming.saturating_sub(1);
        }
        // Like a schedule with an interval well above the time to heal.
        if self.pod_kill_schedule && self.pod_list_reads >= self.last_kill_read + 20 {
            self.last_kill_read = self.pod_list_reads;
            let i = (self.pod_list_reads / 20) as usize % self.vfps.len();
            self.vfps[i].terminating = true;
        }
    }

    fn read_cluster(&mut self) -> Value {
        let primary = self.primary.clone().unwrap_or_default();
        if self.bootstrapping > 0 {
            self.bootstrapping -= 1;
            return json!({"spec": {"instances": 3}, "status": {"instances": 1, "readyInstances": 1,
                "phase": "Creating a new replica", "currentPrimary": primary, "targetPrimary": primary, "timelineID": 1}});
        }
        if self.db_recovering > 0 {
            self.db_recovering -= 1;
        }
        let (ready, phase) = if self.healthy() {
            (3, cluster::PHASE_HEALTHY)
        } else {
            (2, "Waiting for the instances to become active")
        };
        json!({"spec": {"instances": 3}, "status": {"instances": 3, "readyInstances": ready, "phase": phase,
            "currentPrimary": primary, "targetPrimary": primary, "timelineID": self.timeline}})
    }

    fn deployment(&mut self) -> Value {
        self.tick();
        let ready = self
            .vfps
            .iter()
            .filter(|p| p.warming == 0 && !p.terminating)
            .count();
        let live = self.vfps.iter().filter(|p| !p.terminating).count();
        json!({"spec": {"replicas": 3}, "status": {"replicas": live, "readyReplicas": ready, "updatedReplicas": live}})
    }

    fn db_fault(&mut self, what: &str) {
        if !self.healthy() && !self.second_kill_expected {
            self.violations
                .push(format!("{what} applied while the database was not healthy"));
        }
        if (self.primary_chaos && !self.second_kill_expected)
            || self.partition.is_some()
            || self.delay.is_some()
            || self.standby_chaos.is_some()
            || self.replica_cut.is_some()
        {
            self.violations.push(format!(
                "{what} applied while another database fault was active"
            ));
        }
    }

    fn apply(&mut self, manifests: &str) -> anyhow::Result<()> {
        for doc in manifests.split("\n---") {
            self.apply_one(doc)?;
        }
        Ok(())
    }

    fn apply_one(&mut self, manifest: &str) -> anyhow::Result<()> {
        if manifest.contains("${") {
            anyhow::bail!("unrendered placeholder in {manifest}");
        }
        let kind = field(manifest, "kind:");
        let name = field(manifest, "  name:");
        match kind.as_str() {
            "Schedule" if manifest.contains("vfps-pod-kill") => {
                if !manifest.contains("@every") {
                    anyhow::bail!("schedule without an interval");
                }
                self.pod_kill_schedule = true;
            }
            "PodChaos" if name == "db-standby-kill" => {
                self.db_fault("a standby kill");
                let victim = named_pod(manifest);
                if Some(&victim) == self.primary.as_ref() || self.pod(&victim).is_none() {
                    self.violations.push(format!(
                        "the standby kill selects {victim:?}, not a standby"
                    ));
                }
                self.standby_chaos = Some(victim);
                self.db_recovering = 3;
            }
            "PodChaos" if name == "vfps-runner-kill" => {
                let victim = named_pod(manifest);
                self.runner_kill = true;
                if self.runner_kill_inert {
                    return Ok(());
                }
                match self.vfps.iter_mut().find(|p| p.name == victim) {
                    Some(p) => p.terminating = true,
                    None => self.violations.push(format!(
                        "the runner kill selects {victim:?}, not a vfps pod"
                    )),
                }
                if let Some(jobs) = self.csv_jobs_after_kill.take() {
                    self.csv_jobs = jobs;
                }
            }
            "PodChaos" => {
                // The primary of an isolation is killed while it is cut off.
                let isolated = self.isolation.take();
                self.db_fault("a primary kill");
                self.isolation = isolated;
                self.primary_chaos = true;
                // The primary dies; a standby is promoted; the operator re-creates
                // the killed pod, which rejoins after a few status reads.
                let old = self.primary.take().unwrap();
                let uid = self.uid();
                let pod = self.db.iter_mut().find(|p| p.name == old).unwrap();
                pod.uid = uid;
                self.primary = self.db.iter().map(|p| p.name.clone()).find(|n| *n != old);
                self.db_recovering = 3;
                self.timeline += 1;
            }
            "NetworkChaos" if name == "db-primary-isolation" => {
                self.db_fault("an isolation");
                if !manifest.contains("direction: both") {
                    self.violations
                        .push("the isolation is not both ways".into());
                }
                self.isolation = Some(2);
            }
            "NetworkChaos" if name == "vfps-partition" => {
                let replica = named_pod(manifest);
                self.replica_cut = Some((replica, 2));
            }
            "NetworkChaos" if name == "db-network-delay" => {
                self.db_fault("a delay");
                if !manifest.contains("latency: 200ms") || !manifest.contains("jitter: 50ms") {
                    self.violations
                        .push("the delay is not 200 ms ± 50 ms".into());
                }
                self.delay = Some(2);
                self.delay_on_round_trip = match field(manifest, "  direction:").as_str() {
                    "from" | "both" => Duration::from_millis(200),
                    _ => Duration::ZERO,
                };
            }
            "NetworkChaos" => {
                self.db_fault("a partition");
                if !manifest.contains("action: partition") || !manifest.contains("direction: to") {
                    self.violations
                        .push("the partition is not the asset's".into());
                }
                self.partition = Some(2);
            }
            "Namespace" | "Cluster" => {}
            "Secret" if name == "vfps-chaos-tokens" => {
                let keys = ["load.token:", "expired.token:", "read-only.token:"];
                if !keys
                    .iter()
                    .all(|k| manifest.contains(&format!("  {k} vfps_sat_")))
                {
                    anyhow::bail!("the tokens Secret lacks a token: {manifest}");
                }
                self.tokens_secret = true;
            }
            "Job" => {
                if manifest.contains("${") {
                    anyhow::bail!("unrendered placeholder in the Job");
                }
                self.job = Some(manifest.to_owned());
            }
            other => anyhow::bail!("unexpected manifest kind {other:?}"),
        }
        Ok(())
    }

    fn delete(&mut self, manifest: &str) {
        let name = field(manifest, "  name:");
        match field(manifest, "kind:").as_str() {
            "Schedule" if manifest.contains("vfps-pod-kill") => self.pod_kill_schedule = false,
            "PodChaos" if name == "db-standby-kill" => self.standby_chaos = None,
            "PodChaos" if name == "vfps-runner-kill" => self.runner_kill = false,
            "PodChaos" => self.primary_chaos = false,
            "NetworkChaos" if name == "db-primary-isolation" => self.isolation = None,
            "NetworkChaos" if name == "vfps-partition" => self.replica_cut = None,
            "NetworkChaos" if name == "db-network-delay" => self.delay = None,
            "NetworkChaos" | "Schedule" => self.partition = None,
            _ => {}
        }
    }

    fn drain(&mut self, node: &str) -> anyhow::Result<String> {
        if !self.healthy() {
            self.violations
                .push("drained while the database was not healthy".into());
        }
        if self.vfps.iter().any(|p| p.warming > 0 || p.terminating) {
            self.violations
                .push("drained while a vfps replica was not ready".into());
        }
        self.cordoned.push(node.to_owned());
        if self.drain_times_out {
            anyhow::bail!("error: timed out waiting for the condition");
        }
        let db = self
            .db
            .iter()
            .find(|p| p.node == node)
            .unwrap()
            .name
            .clone();
        if self.primary.as_deref() == Some(db.as_str()) {
            self.violations
                .push(format!("drained {node}, the primary's node"));
        }
        self.drained_db = Some(db);
        for p in self.vfps.iter_mut().filter(|p| p.node == node) {
            p.terminating = true;
        }
        Ok(format!("node/{node} drained"))
    }

    fn uncordon(&mut self, node: &str) {
        self.cordoned.retain(|n| n != node);
        if self.drained_db.take().is_some() {
            self.db_recovering = 2;
        }
    }

    fn rollout_restart(&mut self) {
        for p in &mut self.vfps {
            p.terminating = true;
        }
    }

    /// Saving and loading images, as Docker's containerd image store and
    /// kind v0.27.0 do it: kind imports with `ctr images import
    /// --all-platforms`, which fails on an archive of a whole multi-arch index
    /// whose other platforms were never pulled.
    fn docker_and_kind_images(
        &mut self,
        program: &str,
        args: &[&str],
    ) -> Option<anyhow::Result<String>> {
        let missing_blob = || {
            Err(anyhow::anyhow!(
                "ERROR: failed to load image: command \"docker exec --privileged -i vfps-ha-control-plane \
                 ctr --namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -\" \
                 failed with error: exit status 1\nCommand Output: ctr: content digest sha256:9106d839: not found"
            ))
        };
        match (program, args) {
            ("docker", ["image", "inspect", "--format", _, _]) => Some(Ok("linux/amd64\n".into())),
            ("docker", ["image", "save", rest @ ..]) => {
                let path = rest.iter().skip_while(|a| **a != "-o").nth(1)?;
                let one_platform = rest.contains(&"--platform");
                self.archives.insert((*path).to_owned(), one_platform);
                Some(Ok(String::new()))
            }
            ("kind", ["load", "docker-image", ..]) => Some(missing_blob()),
            ("kind", ["load", "image-archive", "--name", _, path]) => {
                Some(match self.archives.get(*path) {
                    Some(true) => Ok(String::new()),
                    Some(false) => missing_blob(),
                    None => Err(anyhow::anyhow!(
                        "ERROR: stat {path}: no such file or directory"
                    )),
                })
            }
            _ => None,
        }
    }

    fn job_log(&self) -> String {
        if self.job.is_none() {
            return String::new();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        format!(
            "Init\n----LOAD WINDOW START unix={:.3}----\nprogress\n",
            now - 0.5
        )
    }
}

/// The pod a chaos object selects by name (`pods: {vfps: [<name>]}`).
fn named_pod(manifest: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("vfps: ["))
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_default()
        .to_owned()
}

fn field(manifest: &str, key: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

impl Runner for FakeKubectl {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        if program == "kubectl" && args.ends_with(&["vfps", "migrate", "--check"]) {
            // A database round trip from a vfps pod: as slow as the delay makes it.
            let slower = {
                let mut m = self.model();
                m.commands.push(format!("{program} {}", args.join(" ")));
                if m.delay == Some(0) {
                    m.delay_on_round_trip
                } else {
                    Duration::ZERO
                }
            };
            tokio::time::sleep(slower).await;
            return Ok(String::new());
        }
        let mut m = self.model();
        let line = format!("{program} {}", args.join(" "));
        m.commands.push(line.clone());
        if let Some(answer) = m.objects.answer(program, args, input) {
            return answer;
        }
        if program == "docker" && args.first() == Some(&"run") {
            return Ok("vfps 0.1.0\n".into());
        }
        if let Some(answer) = m.docker_and_kind_images(program, args) {
            return answer;
        }
        if program == "helm"
            && args.starts_with(&["upgrade", "--install", "vfps"])
            && m.bootstrapping > 0
        {
            m.violations
                .push("vfps installed while the database was still bootstrapping".into());
        }
        if program != "kubectl" {
            return Ok(String::new());
        }
        let json = |v: Value| Ok(v.to_string());
        match args {
            ["get", "pods", "-n", "vfps", "-l", sel, "-o", "json"] if *sel == VFPS_PODS => {
                json(m.read_vfps())
            }
            ["get", "pods", "-n", "vfps", "-l", sel, "-o", "json"] if *sel == PRIMARY_POD => {
                let primary = if m.no_primary {
                    None
                } else {
                    m.primary.clone()
                };
                let items: Vec<Value> =
                    m.db.iter()
                        .filter(|p| Some(&p.name) == primary.as_ref())
                        .map(Model::pod_json)
                        .collect();
                json(json!({ "items": items }))
            }
            ["get", "pods", "-n", "vfps", "-l", sel, "-o", "json"]
                if *sel == gray::STANDBY_PODS =>
            {
                json(m.read_standbys())
            }
            ["get", "pods", "-n", "vfps", "-l", sel, "-o", "json"] if *sel == gray::DB_PODS => {
                json(json!({"items": m.db.iter().map(Model::pod_json).collect::<Vec<_>>()}))
            }
            ["get", "pod", name, "-n", "vfps", "-o", "json"] => match m.pod(name) {
                Some(p) => json(json!({"status": {"podIP": Model::ip(p)}})),
                None => anyhow::bail!("pods {name:?} not found"),
            },
            ["exec", "-n", "vfps", pod, "-c", "postgres", "--", rest @ ..] => m.exec(pod, rest),
            ["exec", "-n", "vfps", "deployment/vfps", "-c", "vfps", "--", "vfps", "tokens", "create", ..] => {
                Ok(format!("vfps_sat_{:A<43}\n", m.commands.len()))
            }
            ["get", "networkchaos", "db-primary-isolation", "-n", "vfps", "-o", "json"] => {
                json(Model::injected(&mut m.isolation)?)
            }
            ["get", "networkchaos", "db-network-delay", "-n", "vfps", "-o", "json"] => {
                json(Model::injected(&mut m.delay)?)
            }
            ["get", "networkchaos", "vfps-partition", "-n", "vfps", "-o", "json"] => {
                let mut reads = m.replica_cut.as_ref().map(|(_, r)| *r);
                let status = Model::injected(&mut reads)?;
                if let (Some((_, r)), Some(left)) = (m.replica_cut.as_mut(), reads) {
                    *r = left;
                }
                json(status)
            }
            ["get", kind, name, "-n", "vfps", "--ignore-not-found", "-o", "name"]
                if *name != PARTITION_BURST =>
            {
                let present = match *name {
                    "db-primary-isolation" => m.isolation.is_some(),
                    "vfps-partition" => m.replica_cut.is_some(),
                    "db-network-delay" => m.delay.is_some(),
                    "db-standby-kill" => m.standby_chaos.is_some(),
                    "vfps-runner-kill" => m.runner_kill,
                    _ => false,
                };
                Ok(if present {
                    format!("{kind}/{name}")
                } else {
                    String::new()
                })
            }
            ["get", "cluster", "vfps-db", "-n", "vfps", "-o", "json"] => json(m.read_cluster()),
            ["get", "deployment", "vfps", "-n", "vfps", "-o", "json"] => json(m.deployment()),
            ["get", "networkchaos", PARTITION_BURST, "-n", "vfps", "-o", "json"] => {
                let Some(reads) = m.partition else {
                    anyhow::bail!("NotFound");
                };
                m.partition = Some(reads.saturating_sub(1));
                let injected = if reads == 0 { "True" } else { "False" };
                json(
                    json!({"status": {"conditions": [{"type": "AllInjected", "status": injected}]}}),
                )
            }
            ["get", "networkchaos", PARTITION_BURST, "-n", "vfps", "--ignore-not-found", "-o", "name"] => {
                Ok(if m.partition.is_some() {
                    format!("networkchaos/{PARTITION_BURST}")
                } else {
                    String::new()
                })
            }
            ["apply", "-f", "-"] => m.apply(input.unwrap()).map(|()| String::new()),
            ["patch", "cluster", "vfps-db", "-n", "vfps", "--type", "merge", "-p", patch] => {
                if m.objects.backup_secret.is_none() {
                    m.objects
                        .violations
                        .push("the Cluster archives before its backup Secret exists".into());
                }
                m.backup_patch = Some((*patch).to_owned());
                Ok(String::new())
            }
            ["delete", "--ignore-not-found", "--wait=true", "-f", "-"] => {
                m.delete(input.unwrap());
                Ok(String::new())
            }
            ["rollout", "restart", ..] => {
                m.rollout_restart();
                Ok(String::new())
            }
            ["drain", node, ..] => m.drain(node),
            ["uncordon", node] => {
                m.uncordon(node);
                Ok(String::new())
            }
            ["logs", "job/vfps-loadgen", ..] => Ok(m.job_log()),
            ["get", "job", "vfps-loadgen", ..] => {
                json(json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}))
            }
            _ => Ok(String::new()),
        }
    }
}

/// The simulated cluster, except where `.1` has its own answer for a command
/// (program and arguments); such a command never reaches the model.
struct Overriding<F>(FakeKubectl, F);

impl<F> Runner for Overriding<F>
where
    F: Fn(&str, &[&str]) -> Option<anyhow::Result<String>> + Sync,
{
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        match (self.1)(program, args) {
            Some(answer) => answer,
            None => self.0.run(program, args, input).await,
        }
    }
}

/// The simulated cluster, except that one kubectl verb always answers `answer`.
fn answering(
    verb: &'static str,
    answer: String,
) -> Overriding<impl Fn(&str, &[&str]) -> Option<anyhow::Result<String>> + Sync> {
    Overriding(FakeKubectl::new(), move |_: &str, args: &[&str]| {
        (args.first() == Some(&verb)).then(|| Ok(answer.clone()))
    })
}

fn assets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/chaos/ha")
}

fn kube() -> Kube<FakeKubectl> {
    let mut k = Kube::new(FakeKubectl::new(), &assets());
    k.poll = Duration::from_millis(5);
    k.heal_timeout = Duration::from_secs(5);
    k
}

fn planned(scenario: Scenario, name: &str, seconds: u64) -> Planned {
    Planned {
        scenario,
        name: ScenarioName::new(name),
        duration_seconds: seconds,
        max_outage_seconds: 0,
        gate: true,
        draw: Draw::undrawn(),
    }
}

fn knobs() -> Knobs {
    Knobs {
        pod_kill_interval: Duration::from_secs(1),
        partition_burst: Duration::from_millis(300),
        partition_every: Duration::from_millis(600),
        min_ready: Duration::from_millis(10),
        drain_hold: Duration::from_millis(200),
        db_pause: Duration::from_millis(300),
        isolation: Duration::from_millis(300),
        vfps_pause: Duration::from_millis(300),
        vfps_partition: Duration::from_millis(300),
        delay: Duration::from_millis(300),
        objects_down: Duration::from_millis(300),
    }
}

async fn run_plan(
    k: &Kube<FakeKubectl>,
    scenarios: Vec<Planned>,
) -> (anyhow::Result<nemesis::Tally>, Vec<String>) {
    let plan = Plan {
        scenarios,
        margin_seconds: 0,
        seed: None,
        drill: None,
    };
    let rec = Recorder::new(tokio::time::Instant::now());
    let r = nemesis::run(k, &plan, &knobs(), &rec).await;
    let events = rec
        .events()
        .await
        .into_iter()
        .map(|e| {
            format!(
                "{} {}",
                e.scenario.as_ref().map_or("harness", ScenarioName::as_str),
                e.text
            )
        })
        .collect();
    (r, events)
}

#[tokio::test]
async fn every_scenario_applies_proves_and_heals_its_fault_on_kubernetes() {
    let k = kube();
    let (r, events) = run_plan(
        &k,
        vec![
            planned(Scenario::Baseline, "baseline", 1),
            planned(Scenario::VfpsPodKill, "vfps-pod-kill", 6),
            planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1),
            planned(Scenario::DbNetworkPartition, "db-network-partition", 2),
            planned(Scenario::Rollout, "rollout", 1),
            planned(Scenario::Drain, "drain", 1),
        ],
    )
    .await;
    let tally = r.unwrap();
    let events: Vec<String> = events.into_iter().map(|e| e + "\n").collect();
    assert!(
        tally.replica_kills >= 2,
        "the schedule killed repeatedly: {tally:?}"
    );
    assert_eq!(tally.failovers, 1);
    assert!(
        tally.partitions >= 2,
        "bursts repeat within the window: {tally:?}"
    );
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "vfps-pod-kill killed pod vfps-",
        "vfps-pod-kill healed: pod vfps-",
        "cnpg-primary-kill killed primary vfps-db-1",
        "cnpg-primary-kill promoted vfps-db-2",
        "cnpg-primary-kill healed: vfps-db-1 back",
        "db-network-partition applied",
        "db-network-partition healed",
        "rollout restarted deployment/vfps",
        "rollout rollout complete",
        // The failover moved the primary to vfps-db-2 on worker2: not that node.
        "drain drained node vfps-ha-worker\n",
        "drain healed: node vfps-ha-worker uncordoned",
        "drain end",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(
        !m.pod_kill_schedule && !m.primary_chaos && m.partition.is_none(),
        "no chaos object left"
    );
    assert!(m.cordoned.is_empty(), "every node back in service");
    assert!(
        m.commands
            .iter()
            .any(|c| c.contains("drain vfps-ha-worker ") && c.contains("--timeout=120s")),
        "kubectl drain with the 120 s timeout"
    );
}

#[tokio::test]
async fn every_gray_fault_applies_proves_and_heals_on_kubernetes() {
    let k = kube();
    k.runner.model().second_kill_expected = true;
    let (r, events) = run_plan(
        &k,
        vec![
            planned(Scenario::DbPrimaryIsolation, "db-primary-isolation", 1),
            planned(Scenario::DbSyncStandbyKill, "db-sync-standby-kill", 1),
            planned(Scenario::VfpsPartition, "vfps-partition", 1),
            planned(Scenario::DbNetworkDelay, "db-network-delay", 1),
            planned(Scenario::DbDoubleFailover, "db-double-failover", 1),
        ],
    )
    .await;
    let tally = r.unwrap();
    assert_eq!(tally.failovers, 1 + 2, "{tally:?}");
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "db-primary-isolation isolated vfps-db-1 from the other instances",
        "db-primary-isolation standbys' received WAL stood still; the primary wrote",
        "db-primary-isolation killed the isolated primary vfps-db-1",
        "db-primary-isolation promoted vfps-db-2 on timeline 2",
        "db-sync-standby-kill killed synchronous standby vfps-db-1",
        "db-sync-standby-kill vfps-db-3 is the synchronous standby",
        "vfps-partition cut vfps-0 off from the database",
        "vfps-partition vfps-0 not ready after",
        "vfps-partition healed: vfps-0 reaches the database and is ready",
        "db-network-delay database traffic delayed 200ms ± 50ms",
        "db-network-delay healed: delay removed",
        "db-double-failover killed primary vfps-db-2 (timeline 2)",
        "db-double-failover killed vfps-db-1 just promoted (timeline 3)",
        "db-double-failover healed",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(
        m.commands
            .iter()
            .any(|c| c.ends_with("-c vfps -- vfps migrate --check")),
        "the delay is measured on vfps's own path to the database"
    );
    assert!(
        m.isolation.is_none()
            && m.replica_cut.is_none()
            && m.delay.is_none()
            && m.standby_chaos.is_none()
            && !m.primary_chaos,
        "no chaos object left"
    );
}

/// A Chaos Mesh that reports every object injected but does nothing: each
/// gray fault's behavioural proof fails its scenario.
#[tokio::test]
async fn an_inert_gray_fault_fails_its_scenario() {
    for (scenario, name, why) in [
        (
            Scenario::DbPrimaryIsolation,
            "db-primary-isolation",
            "the isolation did not hold",
        ),
        (
            Scenario::VfpsPartition,
            "vfps-partition",
            "the cut did not hold",
        ),
    ] {
        let inert = Overriding(FakeKubectl::new(), |_: &str, args: &[&str]| {
            let probe = args.first() == Some(&"exec") && args.contains(&"bash");
            probe.then(|| Ok("connected\n".to_owned()))
        });
        let mut k = Kube::new(inert, &assets());
        k.poll = Duration::from_millis(5);
        k.heal_timeout = Duration::from_secs(5);
        let plan = Plan {
            scenarios: vec![planned(scenario, name, 1)],
            margin_seconds: 0,
            seed: None,
            drill: None,
        };
        let rec = Recorder::new(tokio::time::Instant::now());
        let e = format!(
            "{:#}",
            nemesis::run(&k, &plan, &knobs(), &rec).await.unwrap_err()
        );
        assert!(e.contains(why), "{name}: {e}");
        let m = k.runner.0.model();
        assert!(
            m.isolation.is_none() && m.replica_cut.is_none(),
            "{name}: the fault is removed even when its proof failed"
        );
    }
}

#[tokio::test]
async fn the_synchronous_standby_is_one_the_primary_streams_to() {
    let k = kube();
    // vfps-db-2 is Ready, first by name, but catching up: it confirms nothing.
    k.runner.model().not_streaming = vec!["vfps-db-2".into()];
    let (r, events) = run_plan(
        &k,
        vec![planned(
            Scenario::DbSyncStandbyKill,
            "db-sync-standby-kill",
            1,
        )],
    )
    .await;
    let e = r.map(|_| ()).map_err(|e| format!("{e:#}"));
    assert!(
        events
            .iter()
            .any(|e| e.ends_with("killed synchronous standby vfps-db-3")),
        "{events:#?} {e:?}"
    );
    let m = k.runner.model();
    assert!(
        m.commands.iter().any(|c| c.contains("pg_stat_replication")),
        "the primary was asked"
    );
}

#[tokio::test]
async fn a_standby_kill_fails_when_no_other_standby_streams_meanwhile() {
    let mut k = kube();
    k.heal_timeout = Duration::from_secs(1);
    // The other standby is Ready but does not stream: with the streaming one
    // killed, no standby confirms commits, and the proof must say so.
    k.runner.model().not_streaming = vec!["vfps-db-3".into()];
    let (r, events) = run_plan(
        &k,
        vec![planned(
            Scenario::DbSyncStandbyKill,
            "db-sync-standby-kill",
            1,
        )],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("no other instance became the synchronous standby"),
        "{e} {events:#?}"
    );
    assert!(
        k.runner.model().standby_chaos.is_none(),
        "the kill is removed even when its proof failed"
    );
}

/// Chaos Mesh reports the delay injected, but its netem matches none of
/// vfps's database packets (`direction: to`, toward pods vfps reaches only
/// through a ClusterIP): the measured round trip fails the scenario.
#[tokio::test]
async fn a_delay_that_misses_vfpss_database_traffic_fails_its_scenario() {
    let dir = vfps_testkit::scratch_dir("kind-delay-to");
    std::fs::create_dir_all(dir.join("chaos")).unwrap();
    let asset = std::fs::read_to_string(assets().join(gray::DELAY.asset)).unwrap();
    assert!(asset.contains("  direction: from\n"), "{asset}");
    std::fs::write(
        dir.join(gray::DELAY.asset),
        asset.replace("  direction: from\n", "  direction: to\n"),
    )
    .unwrap();
    let mut k = Kube::new(FakeKubectl::new(), &dir);
    k.poll = Duration::from_millis(5);
    k.heal_timeout = Duration::from_secs(5);
    let (r, _) = run_plan(
        &k,
        vec![planned(Scenario::DbNetworkDelay, "db-network-delay", 1)],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("the delay did not reach vfps's database traffic"),
        "{e}"
    );
    assert!(
        k.runner.model().delay.is_none(),
        "the delay is removed even when its proof failed"
    );
}

#[tokio::test]
async fn a_primary_kill_without_a_labelled_primary_fails_loudly() {
    let k = kube();
    k.runner.model().no_primary = true;
    let (r, events) = run_plan(
        &k,
        vec![planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1)],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("no pod is labelled as the database primary"),
        "{e}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("error: no pod is labelled")),
        "{events:?}"
    );
    assert!(!k.runner.model().primary_chaos, "nothing was applied");
}

#[tokio::test]
async fn a_drain_waits_until_every_replica_is_ready() {
    let k = kube();
    // A replica still starting (after a rollout, say): draining now would
    // take a second one out.
    k.runner.model().vfps[1].warming = 8;
    let (r, _) = run_plan(&k, vec![planned(Scenario::Drain, "drain", 1)]).await;
    r.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(m.commands.iter().any(|c| c.starts_with("kubectl drain")));
}

#[tokio::test]
async fn a_drain_that_times_out_fails_and_the_node_is_uncordoned_anyway() {
    let k = kube();
    k.runner.model().drain_times_out = true;
    let (r, _) = run_plan(&k, vec![planned(Scenario::Drain, "drain", 1)]).await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("drain did not finish within 120s"), "{e}");
    let m = k.runner.model();
    assert!(m.cordoned.is_empty(), "uncordoned after the failed drain");
    assert!(m.commands.last().unwrap().starts_with("kubectl uncordon"));
}

#[tokio::test]
async fn a_pod_kill_schedule_that_never_kills_is_a_failure() {
    // A schedule Chaos Mesh ignores (no pod ever goes): the fault never took effect.
    let mut k = Kube::new(answering("apply", String::new()), &assets());
    k.poll = Duration::from_millis(5);
    let plan = Plan {
        scenarios: vec![planned(Scenario::VfpsPodKill, "vfps-pod-kill", 6)],
        margin_seconds: 0,
        seed: None,
        drill: None,
    };
    let rec = Recorder::new(tokio::time::Instant::now());
    let e = format!(
        "{:#}",
        nemesis::run(&k, &plan, &knobs(), &rec).await.unwrap_err()
    );
    assert!(e.contains("never took effect"), "{e}");
}

#[tokio::test]
async fn database_faults_wait_for_a_healthy_cluster() {
    let k = kube();
    k.runner.model().db_recovering = 6;
    let (r, _) = run_plan(
        &k,
        vec![
            planned(Scenario::DbNetworkPartition, "db-network-partition", 1),
            planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1),
        ],
    )
    .await;
    r.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    // The checks of the model itself can fire: a fault on a recovering cluster.
    drop(m);
    let mut m = k.runner.model();
    m.db_recovering = 5;
    m.apply("kind: NetworkChaos\naction: partition\ndirection: to\n")
        .unwrap();
    assert!(
        !m.violations.is_empty(),
        "the model catches a fault on an unhealthy cluster"
    );
}

#[test]
fn the_inotify_check_names_the_limits_and_the_fix() {
    assert!(inotify_problem(512, 524_288).is_none());
    let p = inotify_problem(128, 8192).unwrap();
    assert!(
        p.contains("max_user_instances=128") && p.contains("max_user_watches=8192"),
        "{p}"
    );
    assert!(
        p.contains("sudo sysctl -w fs.inotify.max_user_instances=512"),
        "{p}"
    );
    assert!(inotify_problem(512, 8192).is_some());
}

#[tokio::test]
async fn up_refuses_low_inotify_limits_before_touching_anything() {
    let k = kube();
    let args = kind_args();
    let e = install::up(&k, &args, Some((128, 8192))).await.unwrap_err();
    assert!(e.to_string().contains("fix: sudo sysctl"), "{e}");
    assert!(
        k.runner.model().commands.is_empty(),
        "no cluster was created"
    );
}

#[tokio::test]
async fn up_builds_the_topology_in_order() {
    let k = kube();
    install::up(&k, &kind_args(), Some((512, 524_288)))
        .await
        .unwrap();
    let cmds = k.runner.model().commands.clone();
    let at = |s: &str| {
        cmds.iter()
            .position(|c| c.contains(s))
            .unwrap_or_else(|| panic!("{s:?} not run: {cmds:#?}"))
    };
    assert!(
        at("kind create cluster --name vfps-ha") < at("kind load image-archive --name vfps-ha")
    );
    assert!(at("docker image save --platform linux/amd64") < at("kind load image-archive"));
    assert!(cmds[at("docker image save")].ends_with("ghcr.io/miracum/vfps:ci"));
    assert!(cmds.iter().any(
        |c| c.starts_with("docker image save --platform linux/amd64")
            && c.ends_with("ghcr.io/miracum/vfps/stress-test:ci")
    ));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("dashboard.create=false"));
    // Pinned: the operators the manifests are validated against, the node image by digest.
    assert!(cmds[at("cnpg/cloudnative-pg")].contains("--version 0.26.1"));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("--version 2.7.2"));
    assert!(cmds[at("kind create cluster")].contains("--image kindest/node:v1.32.2@sha256:"));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("/run/containerd/containerd.sock"));
    assert!(at("cnpg/cloudnative-pg") < at("get cluster vfps-db"));
    assert!(
        at("get cluster vfps-db") < at("helm upgrade --install vfps"),
        "the database is healthy before vfps"
    );
    assert!(at("helm upgrade --install vfps") < at("rollout status deployment/vfps"));
    // The run's tokens are made by vfps itself once it runs, one per kind.
    let made: Vec<&String> = cmds
        .iter()
        .filter(|c| c.contains("vfps tokens create"))
        .collect();
    assert_eq!(made.len(), 3, "{cmds:#?}");
    assert!(at("rollout status deployment/vfps") < at("vfps tokens create"));
    assert!(made.iter().any(|c| c.contains("--expires-in 1s")));
    assert!(
        k.runner.model().tokens_secret,
        "the tokens Secret is applied"
    );
}

#[test]
fn a_cluster_is_healthy_only_with_every_instance_of_its_spec_and_the_healthy_phase() {
    let cluster = |instances: u64, ready: u64, phase: &str, target: &str| {
        CnpgStatus::of(&json!({"spec": {"instances": 3}, "status": {
            "instances": instances, "readyInstances": ready, "phase": phase,
            "currentPrimary": "vfps-db-1", "targetPrimary": target}}))
    };
    assert!(cluster(3, 3, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    // CloudNativePG adds replicas one at a time: one instance, ready, is a
    // cluster still bootstrapping.
    assert!(!cluster(1, 1, "Creating a new replica", "vfps-db-1").healthy());
    assert!(!cluster(1, 1, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    assert!(!cluster(3, 2, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    assert!(!cluster(3, 3, "Failing over", "vfps-db-1").healthy());
    assert!(!cluster(3, 3, cluster::PHASE_HEALTHY, "vfps-db-2").healthy());
    assert!(!CnpgStatus::of(&json!({})).healthy());
}

#[tokio::test]
async fn up_waits_until_the_database_has_every_instance_of_its_spec() {
    let k = kube();
    k.runner.model().bootstrapping = 4;
    install::up(&k, &kind_args(), None).await.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(m
        .commands
        .iter()
        .any(|c| c.starts_with("helm upgrade --install vfps")));
}

#[tokio::test]
async fn up_refuses_an_image_that_is_not_this_vfps_before_loading_it() {
    for answer in [
        Ok("Unhandled exception. System.ArgumentException".to_owned()),
        Err("exec: /usr/local/bin/vfps: not found"),
    ] {
        let fake = Overriding(FakeKubectl::new(), move |program: &str, _: &[&str]| {
            (program == "docker").then(|| answer.clone().map_err(|e| anyhow::anyhow!(e)))
        });
        let mut k = Kube::new(fake, &assets());
        k.poll = Duration::from_millis(5);
        let e = install::up(&k, &kind_args(), None).await.unwrap_err();
        assert!(
            e.to_string().contains("is not an image of this vfps"),
            "{e:#}"
        );
        let cmds = k.runner.0.model().commands.clone();
        assert!(!cmds.iter().any(|c| c.contains("kind load")), "{cmds:#?}");
    }
}

/// A released vfps is a multi-arch image, pulled for this machine's platform
/// into a Docker with the containerd image store: `kind load docker-image`
/// would fail; each image is saved for its one platform and loaded as an
/// archive, which kind imports whole.
#[tokio::test]
async fn a_released_multi_arch_image_is_loaded_as_one_platforms_archive() {
    let k = kube();
    let args = KindArgs {
        image_tag: "1.2.3".into(),
        stress_test_tag: Some("ci".into()),
        ..kind_args()
    };
    install::up(&k, &args, None).await.unwrap();
    let m = k.runner.model();
    assert_eq!(
        m.archives.values().filter(|one| **one).count(),
        2,
        "{:#?}",
        m.commands
    );
    assert!(!m
        .commands
        .iter()
        .any(|c| c.contains("kind load docker-image")));
}

#[test]
fn versions_must_pin_the_node_image_by_digest() {
    let pinned = std::fs::read_to_string(assets().join("versions.env")).unwrap();
    assert_eq!(
        install::Versions::parse(&pinned).unwrap().cnpg_chart,
        "0.26.1"
    );
    let floating = pinned.replace("@sha256:", ":latest-");
    let e = install::Versions::parse(&floating).unwrap_err();
    assert!(e.to_string().contains("not pinned by digest"), "{e}");
    let e = install::Versions::parse("CNPG_CHART_VERSION=1").unwrap_err();
    assert!(e.to_string().contains("is not set"), "{e}");
}

fn kind_args() -> KindArgs {
    KindArgs {
        cluster_name: "vfps-ha".into(),
        image_tag: "ci".into(),
        stress_test_tag: None,
        assets: assets(),
        chart: PathBuf::from("charts/vfps"),
    }
}

fn load_config(dir: &std::path::Path) -> LoadConfig {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadConfig,
    }
    let mut c = Cli::parse_from(["x"]).load;
    c.output.output_dir = dir.to_owned();
    c.verification.settle_seconds = 60;
    c
}

#[test]
fn the_job_runs_the_plans_load_window_with_its_deadline() {
    let plan = Plan::from_env("baseline,cnpg-primary-kill", Target::Kind, |k| match k {
        "DURATION_BASELINE" => Some("30".into()),
        "DURATION_CNPG_PRIMARY_KILL" => Some("100".into()),
        "LOAD_MARGIN_SECONDS" => Some("20".into()),
        _ => None,
    })
    .unwrap();
    let dir = std::env::temp_dir();
    let job = job::render_job(
        &std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap(),
        &plan,
        &load_config(&dir),
        "v9",
    )
    .unwrap();
    assert!(
        job.contains(r#"{name: RESILIENCE_LOAD_SECONDS, value: "150"}"#),
        "{job}"
    );
    assert!(
        job.contains("activeDeadlineSeconds: 1110"),
        "150 + 60 settle + 900"
    );
    assert!(job.contains("stress-test:v9"));
    assert!(
        job.contains(r#"{name: RESILIENCE_MIX, value: "create=60"#),
        "the Job runs the same mix: {job}"
    );
    // The local platform's MII side (P8), which the default mix leaves out,
    // and the FHIR calls through the Service (pod addresses change on a kill).
    assert!(
        job.contains(r#",mii=4,bundle=1,erase=2"}"#),
        "the Job speaks the MII interface: {job}"
    );
    assert!(
        job.contains(
            r#"{name: RESILIENCE_HTTP_ADDRESS, value: "http://vfps.vfps.svc.cluster.local:8080"}"#
        ),
        "{job}"
    );
    assert!(!job.contains("${"));
    let missing = job::render_job("x: ${NOT_A_VARIABLE}", &plan, &load_config(&dir), "v9");
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("${NOT_A_VARIABLE}"));
}

#[test]
fn the_job_submits_csv_jobs_when_the_plan_faults_their_store() {
    let template = std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap();
    let dir = std::env::temp_dir();
    let render = |list: &str, rows: u64| {
        let plan = Plan::from_env(list, Target::Kind, |_| None).unwrap();
        let mut load = load_config(&dir);
        load.workload.job_rows = rows;
        job::render_job(&template, &plan, &load, "v9").unwrap()
    };
    let rows = |n: u64| format!(r#"{{name: RESILIENCE_JOB_ROWS, value: "{n}"}}"#);
    let job = render("baseline,objects-node-kill", 0);
    assert!(job.contains(&rows(job::DEFAULT_JOB_ROWS)), "{job}");
    // The files go to the object store through presigned URLs naming its
    // Service; the HTTP address (the vfps Service's) is the FHIR calls'.
    assert!(
        job.contains(r#"value: "http://vfps.vfps.svc.cluster.local:8080"}"#),
        "{job}"
    );
    assert!(render("baseline,vfps-pod-kill", 0).contains(&rows(0)));
    assert!(
        render("baseline,vfps-pod-kill", 7).contains(&rows(7)),
        "RESILIENCE_JOB_ROWS as configured"
    );
    assert!(render("baseline,objects-node-kill", 9).contains(&rows(9)));
}

/// The `labelSelectors` blocks of a manifest, each as `k=v,…` sorted.
fn label_selectors(manifest: &str) -> Vec<String> {
    let lines: Vec<&str> = manifest.lines().collect();
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "labelSelectors:" {
            continue;
        }
        let indent = l.len() - l.trim_start().len();
        let mut labels: Vec<String> = lines[i + 1..]
            .iter()
            .take_while(|m| m.len() - m.trim_start().len() > indent)
            .filter_map(|m| m.trim().split_once(": "))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        found.push(labels.join(","));
    }
    found
}

#[test]
fn the_chaos_objects_select_the_pods_the_driver_watches() {
    let sorted = |selector: &str| {
        let mut labels: Vec<&str> = selector.split(',').collect();
        labels.sort();
        labels.join(",")
    };
    let mut seen = 0;
    for entry in std::fs::read_dir(assets().join("chaos")).unwrap() {
        let path = entry.unwrap().path();
        for selector in label_selectors(&std::fs::read_to_string(&path).unwrap()) {
            let expected = if selector.contains("app.kubernetes.io/name=vfps") {
                sorted(VFPS_PODS)
            } else if selector.contains("cnpg.io/instanceRole=primary") {
                sorted(PRIMARY_POD)
            } else if selector.contains("cnpg.io/instanceRole=replica") {
                sorted(gray::STANDBY_PODS)
            } else {
                sorted(gray::DB_PODS)
            };
            assert_eq!(selector, expected, "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 8, "{seen} selectors");
}

#[test]
fn the_partition_burst_comes_from_the_schedules_template() {
    let schedule =
        std::fs::read_to_string(assets().join("chaos/db-network-partition.yaml")).unwrap();
    let burst = partition_burst(&schedule, Duration::from_secs(20)).unwrap();
    assert!(
        burst.contains("kind: NetworkChaos") && burst.contains("name: db-network-partition-burst")
    );
    assert!(burst.contains("  action: partition\n") && burst.contains("  direction: to\n"));
    assert!(
        burst.contains("  duration: 50s\n"),
        "burst + 30 s as a dead man's switch: {burst}"
    );
    assert!(burst.contains("cnpg.io/cluster: vfps-db"));
    assert!(partition_burst(
        "kind: Schedule\nmetadata:\n  namespace: x\n",
        Duration::ZERO
    )
    .is_err());
    let kill = std::fs::read_to_string(assets().join("chaos/vfps-pod-kill.yaml")).unwrap();
    assert!(pod_kill_schedule(&kill, Duration::from_secs(7))
        .unwrap()
        .contains("schedule: \"@every 7s\""));
}

#[tokio::test]
async fn scenarios_put_chaos_on_the_jobs_clock_and_collect_attributes_it() {
    let dir = vfps_testkit::scratch_dir("kind-run");
    let d = driver(kube());
    objects::install(&d.kube).await;
    // Two seconds, so that second 1 lies well inside the window even when the
    // machine is busy.
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 2)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let load = load_config(&dir);
    let passed = d.scenarios(&plan, &knobs(), &load).await.unwrap();
    assert!(passed, "the Job completed");
    let timeline = std::fs::read_to_string(dir.join("chaos-timeline.csv")).unwrap();
    let events = crate::scenario::events::parse_chaos_csv(&timeline).unwrap();
    assert!(
        events[0].at_seconds >= 0.4,
        "the first event is on the Job's clock, which began 0.5 s before: {events:?}"
    );
    assert!(dir.join("loadgen-job.yaml").exists());

    // The fake Job never printed a timeline: collect fails the run and says why.
    let e = steps::collect(&d, &plan, &load).await.unwrap_err();
    assert!(
        e.to_string().contains("no timeline between the markers"),
        "{e}"
    );
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("no timeline"));

    // A log with a timeline and a summary: per-scenario verdicts and the report.
    let rows: Vec<crate::history::Row> = (0..3)
        .map(|s| crate::history::Row {
            offered: 10,
            ok: if s == 1 { 0 } else { 10 },
            failed: if s == 1 { 10 } else { 0 },
            mean_ms: 1.0,
            p50_ms: 1.0,
            p99_ms: 1.0,
            max_ms: 1.0,
            ..crate::history::Row::empty(s)
        })
        .collect();
    let summary = crate::report::Summary {
        passed: true,
        seed: 1,
        rate_per_second: 10,
        availability: crate::checker::availability::of(&rows, 10),
        verdicts: Vec::new(),
        failures_by_code: Default::default(),
        ledger_entries: 20,
        ledger_indeterminate: 0,
        max_dispatch_lag_ms: 0.1,
        warnings: Vec::new(),
        ..Default::default()
    };
    let log = format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n",
        crate::report::markers::BEGIN_MARKER,
        crate::report::markers::marker_timeline(&rows).trim_end(),
        crate::report::markers::END_MARKER,
        crate::report::markers::SUMMARY_BEGIN,
        serde_json::to_string(&summary).unwrap(),
        crate::report::markers::SUMMARY_END
    );
    let logged = driver(Kube::new(answering("logs", log), &assets()));
    let passed = steps::collect(&logged, &plan, &load).await.unwrap();
    assert!(
        !passed,
        "second 1 is an outage inside baseline, whose budget is 0 s"
    );
    let scenarios = std::fs::read_to_string(dir.join("scenarios.json")).unwrap();
    assert!(
        scenarios.contains("\"longest_outage_seconds\": 1"),
        "{scenarios}"
    );
    assert!(dir.join("report.html").exists() && dir.join("timeline.png").exists());
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("baseline"));
}

#[tokio::test]
async fn all_keeps_the_clusters_state_when_up_fails_and_always_deletes_the_cluster() {
    let dir = vfps_testkit::scratch_dir("kind-all");
    let no_cluster = |program: &str, args: &[&str]| {
        (program == "kind" && args.first() == Some(&"create")).then(|| {
            Err(anyhow::anyhow!(
                "ERROR: failed to create cluster: node(s) not ready"
            ))
        })
    };
    let d = driver(Kube::new(
        Overriding(FakeKubectl::new(), no_cluster),
        &assets(),
    ));
    let drive = crate::driver::DriveArgs {
        scenarios: Some("baseline".into()),
    };
    let (plan, knobs) = steps::plan(&drive, Target::Kind, None).unwrap();
    let e = steps::all(&d, &plan, &knobs, &load_config(&dir))
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("failed to create cluster"),
        "{e:#}"
    );
    assert!(dir.join("pods.txt").exists() && dir.join("events.txt").exists());
    assert!(std::fs::read_to_string(dir.join("failures.txt"))
        .unwrap()
        .contains("failed to create cluster"));
    let cmds = d.kube.runner.0.model().commands.clone();
    assert_eq!(
        cmds.last().map(String::as_str),
        Some("kind delete cluster --name vfps-ha"),
        "down runs last, whatever happened"
    );
    assert!(
        !cmds.iter().any(|c| c.contains("loadgen")),
        "no load without a cluster"
    );
}

#[tokio::test]
async fn a_job_that_never_starts_says_what_its_pod_is_waiting_for() {
    let pull_back_off = |_: &str, args: &[&str]| match args {
        ["logs", ..] => Some(Ok(String::new())),
        ["get", "job", ..] => Some(Ok(r#"{"status": {}}"#.into())),
        ["get", "pods", "-n", "vfps-loadgen", ..] => Some(Ok(serde_json::json!({"items": [{
            "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
                "reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"ghcr.io/miracum/vfps/stress-test:ci\""
            }}}]}
        }]})
        .to_string())),
        _ => None,
    };
    let mut k = Kube::new(Overriding(FakeKubectl::new(), pull_back_off), &assets());
    k.poll = Duration::from_millis(5);
    let e = job::wait_load_start(&k, Duration::from_millis(50))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("ImagePullBackOff") && e.contains("stress-test:ci"),
        "{e}"
    );
}

#[tokio::test]
async fn a_released_vfps_is_tested_with_the_checkouts_load_generator() {
    let k = kube();
    let args = KindArgs {
        image_tag: "1.2.3".into(),
        stress_test_tag: Some("ci".into()),
        ..kind_args()
    };
    install::up(&k, &args, None).await.unwrap();
    let cmds = k.runner.model().commands.clone();
    let saved: Vec<&String> = cmds
        .iter()
        .filter(|c| c.starts_with("docker image save"))
        .collect();
    assert!(
        saved
            .iter()
            .any(|c| c.ends_with("ghcr.io/miracum/vfps:1.2.3"))
            && saved
                .iter()
                .any(|c| c.ends_with("ghcr.io/miracum/vfps/stress-test:ci")),
        "{saved:#?}"
    );
    assert!(cmds.iter().any(|c| c.contains("image.tag=1.2.3")));
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 1)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let job = job::render_job(
        &std::fs::read_to_string(assets().join("loadgen-job.yaml")).unwrap(),
        &plan,
        &load_config(&std::env::temp_dir()),
        args.stress_test_tag(),
    )
    .unwrap();
    assert!(
        job.contains("image: ghcr.io/miracum/vfps/stress-test:ci"),
        "{job}"
    );
}

#[tokio::test]
async fn a_load_generator_that_dies_ends_the_scenarios_at_once() {
    let dies = |_: &str, args: &[&str]| match args {
        ["logs", ..] => Some(Ok(format!(
            "----LOAD WINDOW START unix={:.3}----\nthread 'main' panicked at generator\n",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        ))),
        ["get", "job", ..] => Some(Ok(
            r#"{"status": {"conditions": [{"type": "Failed", "status": "True"}]}}"#.into(),
        )),
        _ => None,
    };
    let mut k = Kube::new(Overriding(FakeKubectl::new(), dies), &assets());
    k.poll = Duration::from_millis(5);
    objects::install(&k).await;
    let dir = vfps_testkit::scratch_dir("kind-dies");
    let plan = Plan {
        scenarios: vec![planned(Scenario::Baseline, "baseline", 60)],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let started = std::time::Instant::now();
    let e = driver(k)
        .scenarios(&plan, &knobs(), &load_config(&dir))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not after the 60 s window"
    );
    assert!(
        e.contains("failed during the scenarios") && e.contains("panicked"),
        "{e}"
    );
    let timeline = std::fs::read_to_string(dir.join("chaos-timeline.csv")).unwrap();
    assert!(
        timeline.contains("the load generator Job failed"),
        "{timeline}"
    );
}
