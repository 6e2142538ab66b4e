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

/// A job worth faulting now: running, with checkpointed progress and a tenth
/// of its input or more still ahead (so it is still running when the fault
/// lands: once its holder is stopped it cannot end before a takeover), held
/// by a replica that is there now (on Kubernetes a job may still name a pod
/// an earlier fault killed, until its lease runs out).
///
/// The input left is what bounds the wait: a scenario that starts late in a
/// job waits for the next one (after the workload's pause between jobs and
/// its first checkpoint), so the less of a job it passes over, the less of
/// its window it spends waiting. A job that still ends first is the
/// scenario's to retry on the next one ([`Outran`]).
fn worth_faulting(job: &RunningJob, replicas: &[String]) -> bool {
    job.running
        && job.rows > 0
        && replicas.iter().any(|r| r == instance_of(job))
        && job.bytes_done.saturating_mul(10) <= job.bytes_total.saturating_mul(9)
}

/// A job [`worth_faulting`], waited for until `until`.
async fn job_in_progress<F: Faults>(f: &F, until: Instant) -> anyhow::Result<RunningJob> {
    loop {
        let jobs = f.jobs_now().await.unwrap_or_default();
        let replicas = f.replicas().await.unwrap_or_default();
        if let Some(job) = jobs.into_iter().find(|j| worth_faulting(j, &replicas)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(runner: &str, running: bool, rows: i64, percent_done: i64) -> RunningJob {
        RunningJob {
            id: "j".into(),
            running,
            runner: runner.into(),
            epoch: 1,
            rows,
            bytes_done: percent_done * 10_000,
            bytes_total: 1_000_000,
        }
    }

    /// A job past the middle of its input is faulted rather than waited past:
    /// a run's jobs take longer than a scenario's window under load.
    #[test]
    fn a_running_job_is_faulted_until_its_last_tenth() {
        let replicas = ["vfps-app-a".to_owned(), "vfps-app-c".to_owned()];
        for percent in [1, 35, 63, 90] {
            assert!(
                worth_faulting(&job("vfps-app-c/26028", true, 100, percent), &replicas),
                "{percent} % done"
            );
        }
        for (passed_over, why) in [
            (job("vfps-app-c/26028", true, 100, 91), "in its last tenth"),
            (job("vfps-app-c/26028", true, 0, 1), "no checkpoint yet"),
            (job("vfps-app-c/26028", false, 100, 50), "not running"),
            (job("vfps-app-b/26000", true, 100, 50), "its holder is gone"),
            (job("", true, 100, 50), "nobody holds it"),
        ] {
            assert!(!worth_faulting(&passed_over, &replicas), "{why}");
        }
    }
}
