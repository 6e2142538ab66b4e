//! The restore on Kubernetes (`vfps-chaos kind restore`, docs/backup.md) and
//! `db-restore-drill` on it (scenario/drill.rs says why the drill runs after
//! the load window).
//!
//! The restore: the vfps Deployment scaled to none (no replica may write to
//! the restored database before its hold, nor serve it from caches it filled
//! on the lost one), the CloudNativePG `Cluster` and its volumes deleted, a new
//! `Cluster` of the same name bootstrapped from the bucket alone
//! (`cnpg-restore.yaml`: the newest base backup before the target, then every
//! archived WAL segment), archiving under a new server name, `vfps restore
//! hold` run as a Job (`restore-job.yaml`), and the Deployment scaled back.
//! Refused before anything is deleted when the Cluster has no completed base
//! backup in its archive, or the target is older than its first one.
//!
//! The drill: the client Job (`drill-job.yaml`, `vfps-chaos drill-client`,
//! crate::drill) writes in a namespace of its own while the driver takes a
//! base backup (a `Backup` object), lets writes follow it, and restores. The
//! client sees the hold (a new original refused), reads every ledger entry
//! back and says so; the driver runs `vfps restore confirm` as a Job; the
//! client's first new original acknowledged ends its report. P9 judges the
//! report (redacted) on the client's clock.

use std::{path::Path, time::Duration};

use anyhow::{bail, Context};

use super::{
    assets::render_asset,
    cluster::pods_of,
    job::{self, finished_of, log_of, tail, unix_now, wait_finished_of, wait_start_of, JobRef},
    KindArgs, Kube, Runner, CNPG_CLUSTER, DEPLOYMENT, LOADGEN_NAMESPACE, NAMESPACE, VFPS_PODS,
};
use crate::{
    backup::RestoreTo,
    checker::restore::Measured,
    config::LoadConfig,
    drill::{self, ClientTimes, ReadBack, Steps, Timing, READ_BACK_DONE},
    driver::artifacts::DrillOutcome,
    report,
    scenario::drill::DrillPlan,
};

/// The drill's client Job.
pub(crate) const DRILL_JOB: JobRef<'static> = JobRef {
    name: "vfps-restore-drill",
    namespace: LOADGEN_NAMESPACE,
};
/// The database pods: every instance of the Cluster.
const DB_PODS: &str = "cnpg.io/cluster=vfps-db";
/// How long a base backup may take.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a `vfps restore` Job may take, its pod's start included.
const RESTORE_JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// `recoveryTarget` of `cnpg-restore.yaml` for a target. The base backup
/// alone needs the backup's id: CloudNativePG refuses `targetImmediate`
/// without `backupID`.
pub fn recovery_target(to: RestoreTo, backup_id: Option<&str>) -> anyhow::Result<String> {
    Ok(match to {
        RestoreTo::Latest => "{targetTLI: latest}".into(),
        RestoreTo::Time(t) => format!("{{targetTime: \"{}\"}}", crate::backup::plan::format_utc(t)),
        RestoreTo::BackupOnly => match backup_id {
            Some(id) => format!("{{targetImmediate: true, backupID: \"{id}\"}}"),
            None => bail!(
                "a restore to the base backup alone needs the backup's id (--backup-id): CloudNativePG refuses targetImmediate without backupID"
            ),
        },
    })
}

/// The recovery Cluster: `source` the history restored, `new_server` the
/// one it archives to.
pub fn render_recovery_cluster(
    template: &str,
    source: &str,
    new_server: &str,
    to: RestoreTo,
    backup_id: Option<&str>,
) -> anyhow::Result<String> {
    if source == new_server {
        bail!("the restored Cluster must archive under a new server name, not {source:?}");
    }
    render_asset(
        template,
        &[
            ("SOURCE_SERVER_NAME", source.to_owned()),
            ("RESTORED_SERVER_NAME", new_server.to_owned()),
            ("RECOVERY_TARGET", recovery_target(to, backup_id)?),
        ],
    )
    .context("cnpg-restore.yaml")
}

/// `vfps restore <args>` as a Job named after `action`.
pub fn render_restore_job(
    template: &str,
    action: &str,
    args: &[&str],
    image_tag: &str,
) -> anyhow::Result<String> {
    render_asset(
        template,
        &[
            ("ACTION", action.to_owned()),
            ("ARGS", serde_json::to_string(args)?),
            ("IMAGE_TAG", image_tag.to_owned()),
        ],
    )
    .context("restore-job.yaml")
}

/// The drill's client Job with the run's load settings and the drill's window.
pub fn render_drill_job(
    template: &str,
    plan: &DrillPlan,
    load: &LoadConfig,
    stress_test_tag: &str,
) -> anyhow::Result<String> {
    let deadline = plan.duration_seconds
        + drill::HOLD_TIMEOUT.as_secs()
        + drill::CONFIRM_TIMEOUT.as_secs()
        + job::JOB_DEADLINE_MARGIN_SECONDS;
    render_asset(
        template,
        &[
            ("STRESS_TEST_TAG", stress_test_tag.to_owned()),
            ("DRILL_DEADLINE_SECONDS", deadline.to_string()),
            (
                "RESILIENCE_RATE_PER_SECOND",
                load.workload.rate_per_second.to_string(),
            ),
            (
                "RESILIENCE_CALL_DEADLINE_SECONDS",
                load.workload.call_deadline_seconds.to_string(),
            ),
            (
                "RESILIENCE_MAX_IN_FLIGHT",
                load.workload.max_in_flight.to_string(),
            ),
            (
                "RESILIENCE_SEED",
                load.workload.seed.unwrap_or_default().to_string(),
            ),
            (
                "DURATION_DB_RESTORE_DRILL",
                plan.duration_seconds.to_string(),
            ),
        ],
    )
    .context("drill-job.yaml")
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct KindRestored {
    /// When the last database pod was gone (Unix seconds).
    pub destroyed_unix: f64,
    /// From the deletion of the Cluster to vfps ready again on the held database.
    pub took: Duration,
    /// The history restored, and the one the new Cluster archives to.
    pub source: String,
    pub new_server: String,
}

impl<R: Runner> Kube<R> {
    /// The server name the Cluster archives under (its name when unset), and
    /// the first point its archive can restore (`status.firstRecoverabilityPoint`,
    /// set once a base backup completed); `None` when there is none (yet).
    pub async fn archive(&self) -> anyhow::Result<(String, Option<i64>)> {
        let c = self
            .get_json(&["cluster", CNPG_CLUSTER, "-n", NAMESPACE])
            .await
            .context("the Cluster to restore")?;
        let store = &c["spec"]["backup"]["barmanObjectStore"];
        if store.is_null() {
            bail!(
                "Cluster {CNPG_CLUSTER} has no spec.backup.barmanObjectStore: nothing is archived, nothing can be restored (cnpg-backup.yaml)"
            );
        }
        let server = store["serverName"]
            .as_str()
            .unwrap_or(CNPG_CLUSTER)
            .to_owned();
        let first = c["status"]["firstRecoverabilityPoint"]
            .as_str()
            .and_then(crate::backup::plan::parse_utc);
        Ok((server, first))
    }

    /// A base backup now (`cnpg-base-backup.yaml`); its id once completed.
    pub async fn base_backup(&self, name: &str) -> anyhow::Result<String> {
        self.apply(&render_asset(
            &self.asset("cnpg-base-backup.yaml")?,
            &[("BACKUP_NAME", name.to_owned())],
        )?)
        .await?;
        let until = tokio::time::Instant::now() + BACKUP_TIMEOUT;
        loop {
            let b = self.get_json(&["backup", name, "-n", NAMESPACE]).await?;
            let st = &b["status"];
            match st["phase"].as_str().unwrap_or_default() {
                "completed" => {
                    return Ok(st["backupId"].as_str().unwrap_or(name).to_owned());
                }
                "failed" => bail!(
                    "base backup {name} failed: {}",
                    st["error"].as_str().unwrap_or("no reason given")
                ),
                phase if tokio::time::Instant::now() >= until => bail!(
                    "base backup {name} did not complete within {BACKUP_TIMEOUT:?} (phase {phase:?})"
                ),
                _ => tokio::time::sleep(self.poll).await,
            }
        }
    }

    /// The replicas the vfps Deployment wants.
    async fn vfps_replicas(&self) -> anyhow::Result<u64> {
        let d = self
            .get_json(&["deployment", DEPLOYMENT, "-n", NAMESPACE])
            .await?;
        Ok(d["spec"]["replicas"].as_u64().unwrap_or(1))
    }

    /// Scales the vfps Deployment.
    async fn scale_vfps(&self, replicas: u64) -> anyhow::Result<()> {
        self.kubectl(&[
            "scale",
            &format!("deployment/{DEPLOYMENT}"),
            "-n",
            NAMESPACE,
            &format!("--replicas={replicas}"),
        ])
        .await?;
        Ok(())
    }

    /// Waits until no pod matches `selector`.
    async fn wait_pods_gone(&self, selector: &str, what: &str) -> anyhow::Result<()> {
        crate::platform::net::wait_every(what, self.heal_timeout, self.poll, || async {
            self.get_json(&["pods", "-n", NAMESPACE, "-l", selector])
                .await
                .is_ok_and(|l| pods_of(&l).is_empty())
        })
        .await
    }

    /// `vfps restore <args>` as a Job; its output.
    pub async fn restore_job(
        &self,
        action: &str,
        args: &[&str],
        image_tag: &str,
    ) -> anyhow::Result<String> {
        let manifest =
            render_restore_job(&self.asset("restore-job.yaml")?, action, args, image_tag)?;
        let name = format!("vfps-restore-{action}");
        let job = JobRef {
            name: &name,
            namespace: NAMESPACE,
        };
        self.kubectl(&[
            "delete",
            "job",
            &name,
            "-n",
            NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
        ])
        .await?;
        self.apply(&manifest).await?;
        wait_finished_of(self, job, RESTORE_JOB_TIMEOUT)
            .await
            .with_context(|| format!("vfps restore {}", args.join(" ")))
    }

    /// Restores the Cluster in place from its bucket to `to` (the module's
    /// doc says how); vfps serves the held database when it returns.
    /// `backup_id`: a base backup known to have completed (the drill's own,
    /// or the operator's for `backup-only`); without it the Cluster must
    /// report a first recoverability point.
    pub async fn restore(
        &self,
        to: RestoreTo,
        backup_id: Option<&str>,
        image_tag: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> anyhow::Result<KindRestored> {
        let (source, first) = self.archive().await?;
        match (first, backup_id) {
            (None, None) => bail!(
                "Cluster {CNPG_CLUSTER} reports no completed base backup in its archive (status.firstRecoverabilityPoint is empty): a restore would have nothing to start from"
            ),
            (Some(first), _) => {
                if let RestoreTo::Time(t) = to {
                    if t < first {
                        bail!(
                            "the target {} is older than the archive's first recoverability point {}",
                            crate::backup::plan::format_utc(t),
                            crate::backup::plan::format_utc(first)
                        );
                    }
                }
            }
            (None, Some(_)) => {}
        }
        if let RestoreTo::Time(t) = to {
            if t as f64 > unix_now() {
                bail!(
                    "the target {} is in the future: recovery would end before it and fail",
                    crate::backup::plan::format_utc(t)
                );
            }
        }
        let template = self.asset("cnpg-restore.yaml")?;
        let started = std::time::Instant::now();
        let new_server = format!("{CNPG_CLUSTER}-r{}", unix_now() as u64);
        // Rendered before anything is deleted: a bad asset refuses here.
        let recovery = render_recovery_cluster(&template, &source, &new_server, to, backup_id)?;
        let replicas = self.vfps_replicas().await?;
        if replicas == 0 {
            bail!(
                "the vfps Deployment wants no replicas, so the restore would not know how many to start again on the held database (an earlier restore that did not finish?): scale it to its replicas first"
            );
        }
        self.scale_vfps(0).await?;
        self.wait_pods_gone(VFPS_PODS, "every vfps replica stopped")
            .await?;
        progress("vfps stopped");
        self.kubectl(&[
            "delete",
            "cluster",
            CNPG_CLUSTER,
            "-n",
            NAMESPACE,
            "--wait=true",
            "--timeout=300s",
        ])
        .await?;
        self.kubectl(&[
            "delete",
            "pvc",
            "-n",
            NAMESPACE,
            "-l",
            DB_PODS,
            "--wait=true",
            "--timeout=300s",
        ])
        .await?;
        self.wait_pods_gone(DB_PODS, "every database instance gone")
            .await?;
        let destroyed_unix = unix_now();
        progress(&format!(
            "Cluster {CNPG_CLUSTER} and its volumes deleted; recovering from {source:?}"
        ));
        self.apply(&recovery).await?;
        self.wait_db_healthy(self.heal_timeout).await?;
        progress(&format!(
            "recovered, {} instances healthy, archiving as {new_server:?}",
            self.cnpg_status().await.map(|s| s.wanted).unwrap_or(0)
        ));
        let out = self
            .restore_job(
                "hold",
                &["restore", "hold", "--to", &to.to_string()],
                image_tag,
            )
            .await?;
        progress(&format!("hold written: {}", out.trim()));
        self.scale_vfps(replicas).await?;
        self.wait_replicas_ready(self.heal_timeout).await?;
        progress("vfps serves the held database");
        Ok(KindRestored {
            destroyed_unix,
            took: started.elapsed(),
            source,
            new_server,
        })
    }

    /// The restored database's newest write before `destroyed_unix`.
    async fn restore_point(&self, destroyed_unix: f64) -> anyhow::Result<f64> {
        let sql = drill::restore_point_sql(destroyed_unix);
        drill::parse_restore_point(&self.psql_on_primary(&sql, "the restore point").await?)
    }

    /// Deletes the drill's client Job (`wait`: until it is gone).
    async fn delete_drill_job(&self, wait: bool) -> anyhow::Result<()> {
        self.kubectl(&[
            "delete",
            "job",
            DRILL_JOB.name,
            "-n",
            DRILL_JOB.namespace,
            "--ignore-not-found",
            &format!("--wait={wait}"),
        ])
        .await
        .map(|_| ())
    }
}

/// Runs the drill and leaves its outcome in `dir` (`crate::drill::finish`).
pub async fn run<R: Runner>(
    kube: &Kube<R>,
    args: &KindArgs,
    plan: &DrillPlan,
    load: &LoadConfig,
    dir: &Path,
) -> anyhow::Result<DrillOutcome> {
    let own = dir.join(plan.name.as_str());
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let mut steps = Steps::new(plan);
    let result = drill_on(kube, args, plan, load, &own, &mut steps).await;
    // The client's log, whatever happened: what it saw is the evidence.
    report::write_file(&own, "drill-client.log", log_of(kube, DRILL_JOB).await)?;
    if result.is_err() {
        // It would probe for its hold or its confirmation until its deadline.
        if let Err(e) = kube.delete_drill_job(false).await {
            eprintln!("the drill's client Job: {e:#}");
        }
    }
    drill::finish(dir, plan, result, steps.done)
}

async fn drill_on<R: Runner>(
    kube: &Kube<R>,
    args: &KindArgs,
    plan: &DrillPlan,
    load: &LoadConfig,
    own: &Path,
    steps: &mut Steps,
) -> anyhow::Result<(crate::checker::Verdict, Measured)> {
    let manifest = render_drill_job(
        &kube.asset("drill-job.yaml")?,
        plan,
        load,
        args.stress_test_tag(),
    )?;
    report::write_file(own, "drill-job.yaml", &manifest)?;
    kube.delete_drill_job(true).await?;
    kube.apply(&manifest).await?;
    let start_unix = wait_start_of(kube, DRILL_JOB, Duration::from_secs(600)).await?;
    let at = |unix: f64| unix - start_unix;
    let since = |secs: u64| {
        let due = start_unix + secs as f64;
        Duration::from_secs_f64((due - unix_now()).max(0.0))
    };
    tokio::time::sleep(since(plan.warmup_seconds)).await;
    let backup_started = std::time::Instant::now();
    let name = format!("vfps-db-drill-{}", unix_now() as u64);
    let id = kube.base_backup(&name).await.context("the base backup")?;
    let backup_seconds = backup_started.elapsed().as_secs_f64();
    steps.step(at(unix_now()), &format!("base backup {id}"));
    tokio::time::sleep(Duration::from_secs(plan.writes_after_backup_seconds)).await;
    let restored = kube
        .restore(plan.to.restore_to(), Some(&id), &args.image_tag, &|what| {
            eprintln!("{}: {what}", plan.name);
        })
        .await
        .context("the restore")?;
    steps.step(
        at(restored.destroyed_unix),
        "every database instance and its storage destroyed",
    );
    steps.step(
        at(unix_now()),
        &format!(
            "restored from {:?}, replicas back, held, vfps ready; archiving as {:?}",
            restored.source, restored.new_server
        ),
    );
    let restore_point_unix = kube.restore_point(restored.destroyed_unix).await?;
    // The client reads back under the hold; the confirmation waits for it.
    let until = tokio::time::Instant::now() + drill::HOLD_TIMEOUT;
    loop {
        let log = log_of(kube, DRILL_JOB).await;
        if log.contains(READ_BACK_DONE) {
            break;
        }
        if finished_of(kube, DRILL_JOB).await.ok().flatten().is_some() {
            bail!(
                "the drill's client ended before it read back:\n{}",
                tail(&log, 20)
            );
        }
        if tokio::time::Instant::now() >= until {
            bail!(
                "the drill's client did not read back within {:?}:\n{}",
                drill::HOLD_TIMEOUT,
                tail(&log, 20)
            );
        }
        tokio::time::sleep(kube.poll).await;
    }
    steps.step(
        at(unix_now()),
        "every ledger entry read back under the hold",
    );
    kube.restore_job("confirm", &["restore", "confirm"], &args.image_tag)
        .await?;
    steps.step(at(unix_now()), "restore confirmed");
    let log = wait_finished_of(kube, DRILL_JOB, drill::CONFIRM_TIMEOUT).await?;
    let (times, reads) =
        drill::parse_report(&log).context("the drill's client printed no report")??;
    if times.held_unix < restored.destroyed_unix {
        bail!(
            "the drill's client was refused a new original {:.1} s before the database was destroyed: a restore hold older than this drill (an earlier restore never confirmed?), not this restore's",
            restored.destroyed_unix - times.held_unix
        );
    }
    if let Some(timeline) = report::markers::extract_timeline(&log) {
        report::write_file(own, "load-timeline.csv", timeline)?;
    }
    steps.step(at(times.served_again_unix), "a new original acknowledged");
    Ok(judge_report(
        plan,
        &times,
        &reads,
        backup_seconds,
        restored.took.as_secs_f64(),
        restored.destroyed_unix,
        restore_point_unix,
    ))
}

/// P9 over the client's redacted report, on the client's clock.
pub fn judge_report(
    plan: &DrillPlan,
    times: &ClientTimes,
    reads: &[ReadBack],
    backup_seconds: f64,
    restore_seconds: f64,
    destroyed_unix: f64,
    restore_point_unix: f64,
) -> (crate::checker::Verdict, Measured) {
    let entries: Vec<_> = reads.iter().map(|r| r.entry.clone()).collect();
    let restored: Vec<_> = reads.iter().map(|r| r.restored.clone()).collect();
    drill::judge(
        plan,
        &entries,
        &restored,
        &Timing {
            // The kind drill makes no mistakes yet (docs/backup.md).
            mistakes: Vec::new(),
            backup_seconds,
            restore_seconds,
            destroyed_at: destroyed_unix - times.start_unix,
            restore_point: restore_point_unix - times.start_unix,
            served_again_at: times.served_again_unix - times.start_unix,
            origin_unix: times.start_unix,
        },
    )
}
