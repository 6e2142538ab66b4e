//! The restore and the restore drill on kind, against a simulated cluster of
//! their own: the CloudNativePG Cluster with its archive, `Backup` objects,
//! the vfps Deployment, and the Jobs (the drill's client answers as
//! `vfps-chaos drill-client` does: its start, the read-back once the restored
//! service is held and served, its redacted report once the restore is
//! confirmed). The model checks the restore's promises: no database destroyed
//! while a vfps replica serves, the recovery Cluster applied only once the old
//! one and its volumes are gone and archiving under a new server name, the hold
//! written on a healthy Cluster before any replica serves it, the
//! confirmation only after the read-back.

use std::{collections::BTreeMap, path::Path, sync::Mutex, time::Duration};

use serde_json::{json, Value};

use super::assets;
use crate::{
    backup::RestoreTo,
    checker::restore::{RestoreBudgets, Restored},
    drill::{render_report, ClientTimes, ReadBack, READ_BACK_DONE},
    history::{Entry, Status},
    platform::kind::{
        drill::{self, recovery_target, render_recovery_cluster},
        job::unix_now,
        Kube, Runner,
    },
    report::markers,
    scenario::{
        drill::{DrillPlan, DrillTarget},
        ScenarioName,
    },
};

#[derive(Debug, Clone)]
struct FakeJob {
    log: String,
    done: Option<bool>,
}

#[derive(Default)]
struct Model {
    /// The Cluster: its archive's server name, and status reads until it
    /// is healthy (a recovery takes a few).
    cluster: Option<(String, u32)>,
    first_recoverability: Option<String>,
    volumes: bool,
    vfps_replicas: u64,
    backups: BTreeMap<String, u32>,
    jobs: BTreeMap<String, FakeJob>,
    /// The drill client's start, and what it will report.
    client_start: f64,
    client_reads: Vec<ReadBack>,
    read_back_said: bool,
    /// The hold Job fails (its database refuses).
    hold_fails: bool,
    /// A hold older than the drill: the client is refused from the start.
    stale_hold: bool,
    /// Seconds after the confirmation the client's first new original is
    /// acknowledged.
    served_after: f64,
    held: bool,
    restore_point_after_start: f64,
    commands: Vec<String>,
    violations: Vec<String>,
}

struct FakeCluster(Mutex<Model>);

impl FakeCluster {
    fn new(reads: Vec<ReadBack>) -> Self {
        Self(Mutex::new(Model {
            cluster: Some(("vfps-db".into(), 0)),
            // `up` takes no base backup: the drill's own is the first.
            first_recoverability: None,
            volumes: true,
            vfps_replicas: 3,
            client_reads: reads,
            restore_point_after_start: 2.5,
            ..Model::default()
        }))
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.0.lock().unwrap()
    }
}

fn field<'a>(manifest: &'a str, key: &str) -> Vec<&'a str> {
    manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix(key))
        .map(str::trim)
        .collect()
}

impl Model {
    fn healthy(&self) -> bool {
        matches!(self.cluster, Some((_, 0)))
    }

    fn apply(&mut self, manifest: &str) -> anyhow::Result<String> {
        if manifest.contains("${") {
            anyhow::bail!("unrendered placeholder in {manifest}");
        }
        if manifest.contains("kind: Backup") {
            let name = field(manifest, "name:")[0].to_owned();
            self.backups.insert(name, 1);
        } else if manifest.contains("kind: Cluster") {
            if self.cluster.is_some() || self.volumes {
                self.violations
                    .push("the recovery Cluster applied over the old one or its volumes".into());
            }
            if self.vfps_replicas > 0 {
                self.violations
                    .push("the recovery Cluster applied while vfps serves".into());
            }
            let target = field(manifest, "recoveryTarget:").join(" ");
            if target.contains("targetImmediate") && !target.contains("backupID") {
                // CloudNativePG's webhook.
                anyhow::bail!("admission webhook denied the request: BackupID is missing");
            }
            let servers = field(manifest, "serverName:");
            let [source, new] = servers[..] else {
                anyhow::bail!("a recovery Cluster names {servers:?}");
            };
            if source == new || !manifest.contains("recovery:") {
                self.violations.push(format!(
                    "a Cluster that is no recovery into a new history: {servers:?}"
                ));
            }
            self.cluster = Some((new.to_owned(), 3));
            self.volumes = true;
            self.first_recoverability = None;
        } else if manifest.contains("kind: Job") {
            let name = field(manifest, "name:")
                .into_iter()
                .find(|n| n.starts_with("vfps-restore"))
                .unwrap_or_default()
                .to_owned();
            let job = match name.as_str() {
                "vfps-restore-drill" => {
                    // Its load began 10 s ago: the ledger's seconds 0 and 1
                    // are long before the destruction.
                    self.client_start = unix_now() - 10.0;
                    FakeJob {
                        log: format!("----LOAD WINDOW START unix={:.3}----\n", self.client_start),
                        done: None,
                    }
                }
                "vfps-restore-hold" => {
                    if !self.healthy() {
                        self.violations
                            .push("the hold written before the Cluster was healthy".into());
                    }
                    if self.hold_fails {
                        FakeJob {
                            log: "Error: the database refused the hold".into(),
                            done: Some(false),
                        }
                    } else {
                        self.held = true;
                        FakeJob {
                            log: "restore hold written".into(),
                            done: Some(true),
                        }
                    }
                }
                "vfps-restore-confirm" => {
                    if !self.read_back_said {
                        self.violations
                            .push("the restore confirmed before the read-back".into());
                    }
                    let times = ClientTimes {
                        start_unix: self.client_start,
                        held_unix: if self.stale_hold {
                            self.client_start + 1.0
                        } else {
                            unix_now()
                        },
                        read_back_unix: unix_now(),
                        served_again_unix: unix_now() + self.served_after,
                    };
                    let drill = self.jobs.get_mut("vfps-restore-drill").unwrap();
                    drill.log.push_str(&format!(
                        "{}\n0,1,0,0,1,1\n{}\n",
                        markers::BEGIN_MARKER,
                        markers::END_MARKER
                    ));
                    drill
                        .log
                        .push_str(&render_report(&times, &self.client_reads).unwrap());
                    drill.done = Some(true);
                    FakeJob {
                        log: "restore confirmed".into(),
                        done: Some(true),
                    }
                }
                other => anyhow::bail!("an unexpected Job {other:?}"),
            };
            self.jobs.insert(name, job);
        }
        Ok(String::new())
    }

    fn cluster_json(&mut self) -> anyhow::Result<String> {
        let Some((server, reads)) = self.cluster.as_mut() else {
            anyhow::bail!(
                "Error from server (NotFound): clusters.postgresql.cnpg.io \"vfps-db\" not found"
            );
        };
        *reads = reads.saturating_sub(1);
        let healthy = *reads == 0;
        Ok(json!({
            "spec": {"instances": 3, "backup": {"barmanObjectStore": {"serverName": server}}},
            "status": {
                "instances": 3,
                "readyInstances": if healthy { 3 } else { 1 },
                "phase": if healthy { "Cluster in healthy state" } else { "Setting up primary" },
                "currentPrimary": "vfps-db-1",
                "targetPrimary": "vfps-db-1",
                "firstRecoverabilityPoint": self.first_recoverability,
            }
        })
        .to_string())
    }

    fn pods(&self, names: &[String]) -> String {
        json!({"items": names.iter().map(|n| json!({
            "metadata": {"name": n, "uid": n},
            "spec": {"nodeName": "node"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })).collect::<Vec<Value>>()})
        .to_string()
    }
}

impl Runner for FakeCluster {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        let mut m = self.model();
        m.commands.push(format!("{program} {}", args.join(" ")));
        match args {
            ["apply", "-f", "-"] => m.apply(input.unwrap_or_default()),
            ["get", "cluster", ..] => m.cluster_json(),
            ["get", "backup", name, ..] => {
                let name = (*name).to_owned();
                let left = m.backups.get_mut(&name).expect("an applied Backup");
                *left = left.saturating_sub(1);
                let phase = if *left == 0 { "completed" } else { "running" };
                if *left == 0 {
                    // CloudNativePG's backup maintenance, a moment later.
                    m.first_recoverability = Some("2026-12-06T00:15:00Z".into());
                }
                Ok(json!({"status": {"phase": phase, "backupId": "20261206T001500"}}).to_string())
            }
            ["get", "deployment", ..] => {
                let n = m.vfps_replicas;
                Ok(json!({"spec": {"replicas": n}, "status": {
                    "readyReplicas": n, "updatedReplicas": n, "replicas": n}})
                .to_string())
            }
            ["scale", _, "-n", "vfps", replicas] => {
                let n: u64 = replicas.trim_start_matches("--replicas=").parse()?;
                if n > 0 && !m.held {
                    m.violations
                        .push("vfps started on a restored database without its hold".into());
                }
                m.vfps_replicas = n;
                Ok(String::new())
            }
            ["get", "pods", "-n", "vfps", "-l", selector, ..] => {
                let names: Vec<String> = if selector.contains("component=api") {
                    (0..m.vfps_replicas).map(|i| format!("vfps-{i}")).collect()
                } else if selector.contains("instanceRole=primary") {
                    if m.healthy() {
                        vec!["vfps-db-1".into()]
                    } else {
                        vec![]
                    }
                } else if selector.starts_with("cnpg.io/cluster") {
                    if m.cluster.is_some() {
                        (1..=3).map(|i| format!("vfps-db-{i}")).collect()
                    } else {
                        vec![]
                    }
                } else {
                    vec![]
                };
                Ok(m.pods(&names))
            }
            ["delete", "cluster", ..] => {
                if m.vfps_replicas > 0 {
                    m.violations
                        .push("the database destroyed while vfps serves".into());
                }
                m.cluster = None;
                Ok(String::new())
            }
            ["delete", "pvc", ..] => {
                m.volumes = false;
                Ok(String::new())
            }
            ["delete", "job", name, ..] => {
                m.jobs.remove(*name);
                Ok(String::new())
            }
            ["logs", job, ..] => {
                let name = job.trim_start_matches("job/").to_owned();
                // The client reads back once the restored service is held and served.
                if name == "vfps-restore-drill"
                    && m.held
                    && m.vfps_replicas > 0
                    && !m.read_back_said
                {
                    m.read_back_said = true;
                    let j = m.jobs.get_mut(&name).unwrap();
                    j.log.push_str(&format!("{READ_BACK_DONE}\n"));
                }
                Ok(m.jobs.get(&name).map(|j| j.log.clone()).unwrap_or_default())
            }
            ["get", "job", name, ..] => {
                let Some(j) = m.jobs.get(*name) else {
                    anyhow::bail!("Error from server (NotFound): jobs.batch {name:?} not found");
                };
                let condition = match j.done {
                    Some(true) => json!([{"type": "Complete", "status": "True"}]),
                    Some(false) => json!([{"type": "Failed", "status": "True"}]),
                    None => json!([]),
                };
                Ok(json!({"status": {"conditions": condition}}).to_string())
            }
            ["exec", ..] => Ok(format!(
                "{:.3}\n",
                m.client_start + m.restore_point_after_start
            )),
            other => anyhow::bail!("the simulated cluster does not know {other:?}"),
        }
    }
}

fn kube(cluster: FakeCluster) -> Kube<FakeCluster> {
    let mut k = Kube::new(cluster, &assets());
    k.poll = Duration::from_millis(5);
    k.heal_timeout = Duration::from_secs(5);
    k
}

fn plan() -> DrillPlan {
    DrillPlan {
        name: ScenarioName::new(crate::scenario::drill::NAME),
        duration_seconds: 30,
        warmup_seconds: 0,
        writes_after_backup_seconds: 0,
        to: DrillTarget::Latest,
        budgets: RestoreBudgets {
            max_lost_writes: 0,
            max_lost_seconds: 0.0,
            max_rto_seconds: 60.0,
        },
    }
}

fn acked(second: u64, original: &str, pseudonym: &str) -> Entry {
    Entry {
        slot: second,
        second,
        status: Status::Ok,
        original: original.into(),
        pseudonym: Some(pseudonym.into()),
        code: None,
        acked_unix_ms: None,
    }
}

/// Two writes before the restore point (second 0 and 1), read back as given.
fn reads(second_read: Restored) -> Vec<ReadBack> {
    vec![
        ReadBack::redacted(&acked(0, "rs-a", "p-a"), &Restored::Kept("p-a".into())),
        ReadBack::redacted(&acked(1, "rs-b", "p-b"), &second_read),
    ]
}

async fn drill_on(
    cluster: FakeCluster,
    dir: &Path,
) -> (Kube<FakeCluster>, crate::driver::artifacts::DrillOutcome) {
    let k = kube(cluster);
    let load = super::load_config(dir);
    let outcome = drill::run(&k, &super::kind_args(), &plan(), &load, dir)
        .await
        .unwrap();
    (k, outcome)
}

#[tokio::test]
async fn the_drill_restores_the_cluster_from_the_bucket_and_p9_judges_the_clients_report() {
    let dir = vfps_testkit::scratch_dir("kind-drill");
    let (k, outcome) = drill_on(FakeCluster::new(reads(Restored::Kept("p-b".into()))), &dir).await;
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(outcome.verdict.passed(), "{}", outcome.verdict.summary);
    assert_eq!(outcome.measured.unwrap().lost_writes, 0);
    let (server, _) = m.cluster.clone().unwrap();
    assert!(server.starts_with("vfps-db-r"), "archives anew: {server}");
    assert_eq!(m.vfps_replicas, 3, "vfps serves again");
    let order: Vec<&str> = m
        .commands
        .iter()
        .filter_map(|c| {
            [
                ("apply", "apply"),
                ("delete cluster", "delete cluster"),
                ("delete pvc", "delete pvc"),
                ("scale", "scale"),
            ]
            .iter()
            .find(|(p, _)| c.starts_with(&format!("kubectl {p}")))
            .map(|(_, n)| *n)
        })
        .collect();
    assert_eq!(
        order,
        [
            "apply", // the client
            "apply", // the base backup
            "scale", // vfps stopped
            "delete cluster",
            "delete pvc",
            "apply", // the recovery Cluster
            "apply", // the hold
            "scale", // vfps back
            "apply", // the confirmation
        ]
    );
    let written = crate::driver::artifacts::read_drill_outcome(&dir)
        .unwrap()
        .expect("restore-drill.json");
    assert!(written.verdict.passed());
    assert!(
        written
            .steps
            .iter()
            .any(|(s, _)| s.contains("base backup 20261206T001500")),
        "{:?}",
        written.steps
    );
    let own = dir.join(crate::scenario::drill::NAME);
    let client_log = std::fs::read_to_string(own.join("drill-client.log")).unwrap();
    for secret in ["rs-a", "p-a", "rs-b", "p-b"] {
        assert!(!client_log.contains(secret), "{secret} in the client's log");
    }
    assert!(own.join("load-timeline.csv").exists());
}

#[tokio::test]
async fn a_changed_or_forgotten_pseudonym_in_the_clients_report_fails_p9() {
    for read in [Restored::Kept("p-other".into()), Restored::Forgotten] {
        let dir = vfps_testkit::scratch_dir("kind-drill-changed");
        let (k, outcome) = drill_on(FakeCluster::new(reads(read.clone())), &dir).await;
        assert!(k.runner.model().violations.is_empty());
        assert!(
            !outcome.verdict.passed(),
            "{read:?} passed: {}",
            outcome.verdict.summary
        );
    }
}

#[tokio::test]
async fn a_hold_that_fails_leaves_vfps_stopped_and_the_drill_invalid_naming_it() {
    let dir = vfps_testkit::scratch_dir("kind-drill-hold");
    let cluster = FakeCluster::new(reads(Restored::Kept("p-b".into())));
    cluster.model().hold_fails = true;
    let (k, outcome) = drill_on(cluster, &dir).await;
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(!outcome.verdict.passed());
    assert!(
        outcome.verdict.summary.contains("restore hold")
            && outcome.verdict.summary.contains("refused the hold"),
        "{}",
        outcome.verdict.summary
    );
    assert_eq!(m.vfps_replicas, 0, "no replica serves an unheld restore");
}

#[tokio::test]
async fn a_restore_without_a_completed_base_backup_is_refused_before_anything_is_deleted() {
    let cluster = FakeCluster::new(Vec::new());
    cluster.model().first_recoverability = None;
    let k = kube(cluster);
    let e = k
        .restore(RestoreTo::Latest, None, "ci", &|_| {})
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("no completed base backup"),
        "{e:#}"
    );
    // A target older than the archive's first point, the base backup alone
    // without the backup's id (CloudNativePG would refuse the Cluster once
    // the old one is gone), a target in the future: refused too.
    k.runner.model().first_recoverability = Some("2026-12-06T00:00:00Z".into());
    let e = k
        .restore(
            RestoreTo::Time(crate::backup::plan::parse_utc("2026-12-05T23:00:00Z").unwrap()),
            None,
            "ci",
            &|_| {},
        )
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("older than"), "{e:#}");
    let e = k
        .restore(RestoreTo::BackupOnly, None, "ci", &|_| {})
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("--backup-id"), "{e:#}");
    let e = k
        .restore(
            RestoreTo::Time(unix_now() as i64 + 3600),
            None,
            "ci",
            &|_| {},
        )
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("in the future"), "{e:#}");
    // vfps wanting no replicas: an earlier restore did not finish.
    k.runner.model().vfps_replicas = 0;
    let e = k
        .restore(RestoreTo::Latest, None, "ci", &|_| {})
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("wants no replicas"), "{e:#}");
    k.runner.model().vfps_replicas = 3;
    let m = k.runner.model();
    assert!(
        !m.commands
            .iter()
            .any(|c| c.contains(" delete ") || c.contains(" scale ")),
        "{:?}",
        m.commands
    );
    assert!(m.cluster.is_some() && m.vfps_replicas == 3);
}

#[test]
fn the_recovery_cluster_restores_the_target_into_a_new_history() {
    let template = std::fs::read_to_string(assets().join("cnpg-restore.yaml")).unwrap();
    let latest =
        render_recovery_cluster(&template, "vfps-db", "vfps-db-r1", RestoreTo::Latest, None)
            .unwrap();
    assert!(
        latest.contains("recoveryTarget: {targetTLI: latest}"),
        "{latest}"
    );
    assert!(
        latest.contains("serverName: vfps-db\n") && latest.contains("serverName: vfps-db-r1\n")
    );
    assert_eq!(
        recovery_target(
            RestoreTo::Time(crate::backup::plan::parse_utc("2026-12-05T09:30:00Z").unwrap()),
            None
        )
        .unwrap(),
        "{targetTime: \"2026-12-05T09:30:00Z\"}"
    );
    assert_eq!(
        recovery_target(RestoreTo::BackupOnly, Some("20261206T001500")).unwrap(),
        "{targetImmediate: true, backupID: \"20261206T001500\"}"
    );
    let e = render_recovery_cluster(&template, "vfps-db", "vfps-db", RestoreTo::Latest, None)
        .unwrap_err();
    assert!(format!("{e:#}").contains("new server name"), "{e:#}");
}

#[tokio::test]
async fn the_simulated_cluster_catches_a_restore_out_of_order() {
    let k = kube(FakeCluster::new(Vec::new()));
    let template = std::fs::read_to_string(assets().join("cnpg-restore.yaml")).unwrap();
    let recovery =
        render_recovery_cluster(&template, "vfps-db", "vfps-db-r1", RestoreTo::Latest, None)
            .unwrap();
    // Over the live Cluster and its volumes, while vfps serves; then vfps
    // started without the hold.
    k.apply(&recovery).await.unwrap();
    k.kubectl(&["scale", "deployment/vfps", "-n", "vfps", "--replicas=3"])
        .await
        .unwrap();
    let m = k.runner.model();
    assert_eq!(m.violations.len(), 3, "{:?}", m.violations);
}

#[tokio::test]
async fn a_hold_older_than_the_drill_makes_it_invalid_not_a_pass() {
    let dir = vfps_testkit::scratch_dir("kind-drill-stale-hold");
    let cluster = FakeCluster::new(reads(Restored::Kept("p-b".into())));
    cluster.model().stale_hold = true;
    let (_k, outcome) = drill_on(cluster, &dir).await;
    assert!(!outcome.verdict.passed());
    assert!(
        outcome.verdict.summary.contains("older than this drill"),
        "{}",
        outcome.verdict.summary
    );
}

#[tokio::test]
async fn a_restored_cluster_that_serves_too_late_fails_p9_on_its_rto() {
    let dir = vfps_testkit::scratch_dir("kind-drill-slow");
    let cluster = FakeCluster::new(reads(Restored::Kept("p-b".into())));
    // The plan's RTO budget is 60 s.
    cluster.model().served_after = 90.0;
    let (_k, outcome) = drill_on(cluster, &dir).await;
    assert!(!outcome.verdict.passed());
    assert!(
        outcome.verdict.summary.contains("RTO"),
        "{}",
        outcome.verdict.summary
    );
}
