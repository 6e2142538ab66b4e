//! Faults of the replica running a CSV job (the run's jobs: `RESILIENCE_JOB_ROWS`):
//! - [`kill`] (`vfps-job-runner-kill`): SIGKILL of the replica that holds a
//!   running job's lease, once the job has checkpointed progress (on
//!   Kubernetes a one-shot pod kill of that pod, by name).
//! - [`pause`] (`vfps-job-runner-pause`): that replica stopped (SIGSTOP) past
//!   the job's lease, then resumed: its late writes must be fenced out.
//!
//! Proof by behaviour: the job is taken over — its fencing epoch rises and it
//! runs on (or finishes) under the new holder. What the takeover resumed from
//! is P7's to judge.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Faults, Knobs, Recorder, RunningJob};
use crate::scenario::Planned;

/// A running job with checkpointed progress and most of its input still
/// ahead (so it is still running when the fault lands), held by a replica
/// that is there now (on Kubernetes a job may still name a pod an earlier
/// fault killed, until its lease runs out), waited for until `until`.
async fn job_in_progress<F: Faults>(f: &F, until: Instant) -> anyhow::Result<RunningJob> {
    loop {
        let jobs = f.jobs_now().await.unwrap_or_default();
        let replicas = f.replicas().await.unwrap_or_default();
        if let Some(job) = jobs
            .into_iter()
            .filter(|j| j.running && j.rows > 0 && replicas.iter().any(|r| r == instance_of(j)))
            .find(|j| j.bytes_done.saturating_mul(10) <= j.bytes_total.saturating_mul(6))
        {
            return Ok(job);
        }
        if Instant::now() >= until {
            bail!("no CSV job with checkpointed progress was running (set RESILIENCE_JOB_ROWS)");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until job `id` is held under a higher epoch than `epoch`: its new
/// holder and epoch.
async fn taken_over<F: Faults>(
    f: &F,
    id: &str,
    epoch: i64,
    until: Instant,
) -> anyhow::Result<RunningJob> {
    loop {
        let jobs = f.jobs_now().await.unwrap_or_default();
        match jobs.into_iter().find(|j| j.id == id) {
            Some(j) if j.epoch > epoch => return Ok(j),
            Some(j) if !j.running => return Err(Outran(id.to_owned()).into()),
            _ => {}
        }
        if Instant::now() >= until {
            bail!("job {id} was not taken over (still epoch {epoch})");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The instance named by the job's runner (`<instance>/<pid>`; empty when
/// nobody holds it).
fn instance_of(job: &RunningJob) -> &str {
    job.runner.split('/').next().unwrap_or_default()
}

/// The replica running the job (a runner names itself
/// `<VFPS_INSTANCE_NAME>/<pid>`, the instance named as its replica: the
/// local replica's name, the pod's host name on Kubernetes).
async fn replica_of<F: Faults>(f: &F, job: &RunningJob) -> anyhow::Result<String> {
    let replicas = f.replicas().await?;
    let instance = instance_of(job);
    replicas
        .iter()
        .find(|r| *r == instance)
        .cloned()
        .with_context(|| {
            format!(
                "job {} runs on {:?}, which is none of the replicas {replicas:?}",
                job.id, job.runner
            )
        })
}

pub async fn kill<F: Faults>(
    f: &F,
    planned: &Planned,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    let margin = Duration::from_secs(10);
    next_job_if_outran(f, planned, rec, until, margin, || {
        kill_once(f, planned, rec, until)
    })
    .await
}

/// Runs `attempt` on a ready topology; when its job outran the fault, the
/// next job is faulted while `margin` still fits before `until`.
async fn next_job_if_outran<F, A, Fut>(
    f: &F,
    planned: &Planned,
    rec: &Recorder,
    until: Instant,
    margin: Duration,
    mut attempt: A,
) -> anyhow::Result<()>
where
    F: Faults,
    A: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    loop {
        f.wait_replicas_ready(f.heal_timeout()).await?;
        match attempt().await {
            Err(e) if e.is::<Outran>() && Instant::now() + margin < until => {
                rec.note(&planned.name, format!("{e}; trying the next job"))
                    .await;
            }
            other => return other,
        }
    }
}

/// The faulted job ended before the fault reached it.
#[derive(Debug, thiserror::Error)]
#[error("job {0} ended before the fault reached it")]
struct Outran(String);

async fn kill_once<F: Faults>(
    f: &F,
    planned: &Planned,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    let scenario = &planned.name;
    let job = job_in_progress(f, until).await?;
    let replica = replica_of(f, &job).await?;
    let victim = f
        .kill_named_replica(&replica)
        .await
        .with_context(|| format!("killing {replica}, the runner of job {}", job.id))?;
    rec.fault(
        scenario,
        format!(
            "killed {} running job {} (epoch {}, {} rows checkpointed)",
            victim.name, job.id, job.epoch, job.rows
        ),
    )
    .await;
    let resumed = taken_over(f, &job.id, job.epoch, Instant::now() + f.heal_timeout()).await;
    f.wait_replaced(&victim).await?;
    let resumed = resumed?;
    rec.heal(
        scenario,
        format!(
            "healed: job {} taken over by {} (epoch {}); {} replaced",
            job.id, resumed.runner, resumed.epoch, victim.name
        ),
    )
    .await;
    Ok(())
}

pub async fn pause<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    next_job_if_outran(f, planned, rec, until, knobs.vfps_pause, || {
        pause_once(f, planned, knobs, rec, until)
    })
    .await
}

async fn pause_once<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    let scenario = &planned.name;
    let job = job_in_progress(f, until).await?;
    let replica = replica_of(f, &job).await?;
    let resume_at = Instant::now() + knobs.vfps_pause;
    f.pause_replica(&replica).await?;
    let silent = !f.replica_answers(&replica).await;
    rec.fault(
        scenario,
        format!(
            "paused {replica} running job {} (epoch {}, {} rows checkpointed) for {:?}",
            job.id, job.epoch, job.rows, knobs.vfps_pause
        ),
    )
    .await;
    // The job's lease runs out while its holder is stopped (the pause outlasts
    // it): another replica takes the job before the holder resumes.
    let resumed = taken_over(f, &job.id, job.epoch, resume_at).await;
    tokio::time::sleep_until(resume_at).await;
    let back = f.resume_replica(&replica).await;
    if !silent {
        back?;
        bail!("the pause did not take effect: {replica} answered HTTP while stopped");
    }
    back?;
    let resumed = resumed?;
    f.wait_replicas_ready(f.heal_timeout())
        .await
        .with_context(|| format!("{replica} after it resumed"))?;
    rec.heal(
        scenario,
        format!(
            "healed: job {} taken over by {} (epoch {}); {replica} resumed, its late writes fenced",
            job.id, resumed.runner, resumed.epoch
        ),
    )
    .await;
    Ok(())
}
