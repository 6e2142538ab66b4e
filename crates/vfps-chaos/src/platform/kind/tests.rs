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
    driver::KindDriver,
    gray,
    install::{self, inotify_problem},
    job, KindArgs, *,
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
mod load_job;
mod model;
mod objects;
mod scenarios;
mod up;

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
                if *sel == assets::STANDBY_PODS =>
            {
                json(m.read_standbys())
            }
            ["get", "pods", "-n", "vfps", "-l", sel, "-o", "json"] if *sel == assets::DB_PODS => {
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
