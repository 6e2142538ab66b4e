//! `vfps-chaos kind …`: the driver steps on a kind cluster, and `render`, which
//! writes the manifests the driver applies for offline validation.
//!
//! The load runs in the cluster (the `stress-test` image as a Job, reaching the
//! replicas through the headless Service); the scenarios run here, on the Job's
//! clock, so failures are attributed per scenario as on the local platform.

use std::{path::Path, time::Duration};

use anyhow::Context;

use super::{
    assets,
    chaos::{partition_burst, pod_kill_schedule},
    drill, evidence, gray, install,
    job::{
        self, job_finished, job_log, render_job, tail, unix_now, wait_load_start, with_progress,
        JOB_DEADLINE_MARGIN_SECONDS,
    },
    objects, KindArgs, Kube, Runner, LOADGEN_JOB, LOADGEN_NAMESPACE,
};
use crate::{
    backup::RestoreTo,
    config::LoadConfig,
    driver::{artifacts, Collected, DriveArgs, Driver},
    nemesis::{self, Knobs, Recorder},
    report::{self, markers},
    scenario::ScenarioPlan,
    target::Target,
};

/// The kind platform's driver.
pub struct KindDriver<R> {
    pub kube: Kube<R>,
    pub args: KindArgs,
    /// This machine's inotify limits (instances, watches), checked by `up`.
    pub inotify: Option<(u64, u64)>,
}

impl<R: Runner> Driver for KindDriver<R> {
    async fn up(&self) -> anyhow::Result<()> {
        install::up(&self.kube, &self.args, self.inotify).await
    }

    /// The load Job, then every planned scenario on the Job's clock; waits for
    /// the Job's verification. Whether the Job passed.
    async fn scenarios(
        &self,
        plan: &ScenarioPlan,
        knobs: &Knobs,
        load: &LoadConfig,
    ) -> anyhow::Result<bool> {
        let kube = &self.kube;
        load.validate()?;
        let dir = load.dir();
        artifacts::write_plan(dir, plan)?;
        eprintln!(
            "{} scenarios: load window {} s (sum of durations + {} s margin)",
            plan.scenarios.len(),
            plan.load_seconds(),
            plan.margin_seconds
        );
        // Preconditions: a healthy cluster before the first fault.
        kube.wait_db_healthy(kube.heal_timeout).await?;
        kube.wait_objects_healthy(kube.heal_timeout).await?;
        kube.wait_replicas_ready(kube.heal_timeout).await?;
        let job = render_job(
            &kube.asset("loadgen-job.yaml")?,
            plan,
            load,
            self.args.stress_test_tag(),
        )?;
        report::write_file(dir, "loadgen-job.yaml", &job)?;
        kube.kubectl(&[
            "delete",
            "job",
            LOADGEN_JOB,
            "-n",
            LOADGEN_NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
        ])
        .await?;
        kube.apply(&job).await?;
        let started_unix = wait_load_start(kube, Duration::from_secs(600)).await?;
        let behind = Duration::from_secs_f64((unix_now() - started_unix).max(0.0));
        let origin = tokio::time::Instant::now()
            .checked_sub(behind)
            .unwrap_or_else(tokio::time::Instant::now);
        eprintln!("load window began {:.1} s ago", behind.as_secs_f64());
        let rec = Recorder::new(origin);
        // A load generator that dies ends the run: chaos without load proves nothing.
        let generator_failed = async {
            loop {
                tokio::time::sleep(kube.poll).await;
                if let Ok(Some(false)) = job_finished(kube).await {
                    break;
                }
            }
        };
        let result = tokio::select! {
            r = with_progress(kube, nemesis::run(kube, plan, knobs, &rec)) => r,
            () = generator_failed => {
                rec.harness("the load generator Job failed").await;
                Err(anyhow::anyhow!(
                    "the load generator Job failed during the scenarios:\n{}",
                    tail(&job_log(kube).await, 20)
                ))
            }
        };
        // A partition or a schedule must never outlive the run.
        if result.is_err() {
            if let Err(e) = kube.cleanup_chaos().await {
                eprintln!("cleanup of the chaos objects: {e:#}");
            }
        }
        artifacts::write_chaos(
            dir,
            &rec.events().await,
            &result,
            rec.elapsed().as_secs_f64(),
        )?;
        let finish_timeout = Duration::from_secs(
            plan.load_seconds() + load.verification.settle_seconds + JOB_DEADLINE_MARGIN_SECONDS,
        );
        let until = tokio::time::Instant::now() + finish_timeout;
        let passed = with_progress(kube, async {
            loop {
                match job_finished(kube).await {
                    Ok(Some(ok)) => break ok,
                    Ok(None) | Err(_) if tokio::time::Instant::now() < until => {
                        tokio::time::sleep(kube.poll).await;
                    }
                    Ok(None) | Err(_) => {
                        eprintln!(
                            "the load generator Job did not finish within {finish_timeout:?}"
                        );
                        break false;
                    }
                }
            }
        })
        .await;
        report::write_file(dir, "resilience.log", job_log(kube).await)?;
        result?;
        // After the window and its verification: the drill destroys what
        // they judged (scenario/drill.rs).
        let drill_passed = match &plan.drill {
            Some(d) => super::drill::run(kube, &self.args, d, load, dir)
                .await?
                .verdict
                .passed(),
            None => true,
        };
        Ok(passed && drill_passed)
    }

    /// The Job's log and what it reported (a missing timeline or summary fails
    /// the run and says why in `failures.txt`), the cluster's state and logs.
    async fn collect(&self, _plan: &ScenarioPlan, load: &LoadConfig) -> anyhow::Result<Collected> {
        let kube = &self.kube;
        let dir = load.dir();
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut log = job_log(kube).await;
        if log.is_empty() {
            // The Job may be gone; `scenarios` saved its log.
            log = std::fs::read_to_string(dir.join("resilience.log")).unwrap_or_default();
        }
        report::write_file(dir, "resilience.log", &log)?;
        evidence::capture_state(kube, dir).await?;
        let missing = |why: &str| -> anyhow::Error {
            match artifacts::append_failure(dir, why) {
                Ok(()) => anyhow::anyhow!("{why}"),
                Err(e) => e.context(why.to_owned()),
            }
        };
        let Some(timeline) = markers::extract_timeline(&log) else {
            return Err(missing(
                "no timeline between the markers in resilience.log: the load generator did not report",
            ));
        };
        report::write_file(dir, "load-timeline.csv", timeline)?;
        let summary =
            match markers::extract_summary(&log) {
                Some(Ok(s)) => s,
                Some(Err(e)) => return Err(anyhow::anyhow!(e)),
                None => return Err(missing(
                    "no summary in resilience.log: the load generator did not finish verification",
                )),
            };
        if !dir.join("chaos.json").exists() {
            anyhow::bail!("no chaos.json: `scenarios` did not run for this run directory");
        }
        Ok(Collected {
            erased_rows: None,
            at_rest: None,
            load: summary,
            postgres_logs: vec![("cnpg".into(), dir.join("cnpg-instances.log"))]
                .into_iter()
                .filter(|(_, p)| p.exists())
                .collect(),
            // CloudNativePG has no leader key in what is collected: its
            // instances' PostgreSQL lines tell the promotion.
            ha_logs: Vec::new(),
        })
    }

    async fn capture_state(&self, dir: &Path) {
        if let Err(e) = evidence::capture_state(&self.kube, dir).await {
            eprintln!("capture: {e:#}");
        }
    }

    async fn down(&self) -> anyhow::Result<()> {
        install::down(&self.kube, &self.args).await
    }
}

/// `render`: the manifests the driver applies, with this run's settings, for
/// validation without a cluster (`scripts/validate-k8s.sh`); prints the load
/// window.
pub fn render(
    drive_args: &DriveArgs,
    args: &KindArgs,
    load: &LoadConfig,
    out: &Path,
) -> anyhow::Result<()> {
    // The Job would run with them: refused here as `kind run` refuses them.
    load.validate()?;
    let seed = load.workload.seed.unwrap_or_else(rand::random);
    let (plan, knobs) = crate::driver::plan(drive_args, Target::Kind, Some(seed))?;
    let read = |rel: &str| {
        let p = args.assets.join(rel);
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))
    };
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let files = [
        (
            "loadgen-job.yaml",
            job::render_job(
                &read("loadgen-job.yaml")?,
                &plan,
                load,
                args.stress_test_tag(),
            )?,
        ),
        (
            "vfps-pod-kill.yaml",
            pod_kill_schedule(&read("chaos/vfps-pod-kill.yaml")?, knobs.pod_kill_interval)
                .map_err(anyhow::Error::msg)?,
        ),
        (
            "db-network-partition-burst.yaml",
            partition_burst(
                &read("chaos/db-network-partition.yaml")?,
                knobs.partition_burst,
            )
            .map_err(anyhow::Error::msg)?,
        ),
        (
            "db-primary-isolation.yaml",
            assets::render_asset(
                &read(gray::ISOLATION.asset)?,
                &[("DURATION", assets::chaos_duration(knobs.isolation))],
            )?,
        ),
        (
            "db-standby-kill.yaml",
            // The driver names the standby it picked at run time.
            assets::render_asset(
                &read(gray::STANDBY_KILL.asset)?,
                &[("STANDBY", "vfps-db-2".to_owned())],
            )?,
        ),
        (
            "vfps-partition.yaml",
            // The replica is drawn from the seed at run time.
            assets::render_asset(
                &read(gray::REPLICA_CUT.asset)?,
                &[
                    ("REPLICA", "vfps-5d8f7c9b6-x2x7q".to_owned()),
                    ("DURATION", assets::chaos_duration(knobs.vfps_partition)),
                ],
            )?,
        ),
        (
            "db-network-delay.yaml",
            assets::render_asset(
                &read(gray::DELAY.asset)?,
                &[
                    ("LATENCY", assets::millis(crate::nemesis::delay::DELAY)),
                    ("JITTER", assets::millis(crate::nemesis::delay::JITTER)),
                    ("DURATION", assets::chaos_duration(knobs.delay)),
                ],
            )?,
        ),
        (
            "vfps-runner-kill.yaml",
            // The job's runner is read from vfps's database at run time.
            assets::render_asset(
                &read(gray::REPLICA_KILL.asset)?,
                &[("POD", "vfps-5d8f7c9b6-x2x7q".to_owned())],
            )?,
        ),
        (
            "objects-pod-kill.yaml",
            // The node is drawn from the seed at run time.
            assets::render_asset(
                &read(objects::OBJECTS_KILL.asset)?,
                &[("POD", "garage-1".to_owned())],
            )?,
        ),
        (
            "garage.yaml",
            objects::manifest(
                &read("garage.yaml")?,
                &install::Versions::parse(&read("versions.env")?)?.garage_image,
            )?,
        ),
        ("plan.json", serde_json::to_string_pretty(&plan)?),
    ];
    // The restore's and the drill's objects (platform/kind/drill.rs), with the
    // plan's drill or the default one; the names the driver picks at run time
    // drawn as it draws them.
    let drill_plan = match &plan.drill {
        Some(d) => d.clone(),
        None => crate::scenario::drill::DrillPlan::from_env(&|k| std::env::var(k).ok())?,
    };
    let restore = read("cnpg-restore.yaml")?;
    let restore_job = read("restore-job.yaml")?;
    let source = "vfps-db";
    let restored = "vfps-db-r1764900000";
    let drill_files = [
        (
            "drill-job.yaml",
            drill::render_drill_job(
                &read("drill-job.yaml")?,
                &drill_plan,
                load,
                args.stress_test_tag(),
            )?,
        ),
        (
            "cnpg-base-backup.yaml",
            assets::render_asset(
                &read("cnpg-base-backup.yaml")?,
                &[("BACKUP_NAME", "vfps-db-drill-1764900000".to_owned())],
            )?,
        ),
        (
            "cnpg-restore-latest.yaml",
            drill::render_recovery_cluster(&restore, source, restored, RestoreTo::Latest, None)?,
        ),
        (
            "cnpg-restore-time.yaml",
            drill::render_recovery_cluster(
                &restore,
                source,
                restored,
                RestoreTo::Time(1_764_900_000),
                None,
            )?,
        ),
        (
            "cnpg-restore-backup-only.yaml",
            drill::render_recovery_cluster(
                &restore,
                source,
                restored,
                RestoreTo::BackupOnly,
                Some("20251205T020000"),
            )?,
        ),
        (
            "restore-hold-job.yaml",
            drill::render_restore_job(
                &restore_job,
                "hold",
                &["restore", "hold", "--to", "latest"],
                &args.image_tag,
            )?,
        ),
        (
            "restore-confirm-job.yaml",
            drill::render_restore_job(
                &restore_job,
                "confirm",
                &["restore", "confirm"],
                &args.image_tag,
            )?,
        ),
    ];
    for (name, text) in files.into_iter().chain(drill_files) {
        report::write_file(out, name, text)?;
    }
    println!("{}", plan.load_seconds());
    Ok(())
}
