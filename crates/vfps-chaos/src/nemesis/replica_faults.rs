//! Faults of one vfps replica, the one the seed drew:
//! - [`pause`] (`vfps-pod-pause`): its process stopped (SIGSTOP) past the call
//!   deadline, then resumed. Calls in flight there end indeterminate; the
//!   client must move on to the other replicas. Proof: the replica stops
//!   answering HTTP while paused and answers again after.
//! - [`cut`] (`vfps-partition`): cut off from the database only. It must leave
//!   rotation (not ready) after its readiness grace while the others carry the
//!   load. Proof: a TCP connect from it to the primary times out while the cut
//!   holds and is answered after; it reports not ready during the cut and ready
//!   after.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Connect, Faults, Knobs, Pod, Recorder};
use crate::scenario::Planned;

/// The replica the seed drew for the scenario's first fault.
async fn drawn<F: Faults>(f: &F, planned: &Planned) -> anyhow::Result<String> {
    let replicas = f.replicas().await?;
    if replicas.is_empty() {
        bail!("no vfps replica to fault");
    }
    Ok(replicas[planned.draw.replica(0, replicas.len())].clone())
}

pub async fn pause<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    let scenario = &planned.name;
    f.wait_replicas_ready(f.heal_timeout()).await?;
    let replica = drawn(f, planned).await?;
    let resume_at = Instant::now() + knobs.vfps_pause;
    f.pause_replica(&replica).await?;
    // Proven by behaviour: a stopped process answers nothing (the kernel may
    // still complete a TCP handshake for it).
    let silent = !f.replica_answers(&replica).await;
    rec.fault(
        scenario,
        format!("paused {replica} for {:?}", knobs.vfps_pause),
    )
    .await;
    tokio::time::sleep_until(resume_at).await;
    let still_silent = !f.replica_answers(&replica).await;
    let resumed = f.resume_replica(&replica).await;
    if !(silent && still_silent) {
        resumed?;
        bail!("the pause did not take effect: {replica} answered HTTP while stopped");
    }
    resumed?;
    f.wait_replicas_ready(f.heal_timeout())
        .await
        .with_context(|| format!("{replica} after it resumed"))?;
    rec.heal(scenario, format!("healed: {replica} resumed and ready"))
        .await;
    Ok(())
}

pub async fn cut<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    let scenario = &planned.name;
    f.wait_db_healthy(f.heal_timeout()).await?;
    f.wait_replicas_ready(f.heal_timeout()).await?;
    let replica = drawn(f, planned).await?;
    let primary = f.primary().await?.context("no database primary")?;
    let started = Instant::now();
    let until = started + knobs.vfps_partition;
    let held = async {
        f.cut_replica(&replica, knobs.vfps_partition).await?;
        rec.fault(
            scenario,
            format!(
                "cut {replica} off from the database for {:?}",
                knobs.vfps_partition
            ),
        )
        .await;
        let c = f
            .connect(Pod::Replica(&replica), Pod::Instance(&primary))
            .await?;
        if c != Connect::TimedOut {
            bail!(
                "the cut did not hold: a connect from {replica} to {} was {c:?}",
                primary.name
            );
        }
        // It must leave rotation within the hold; the others stay ready.
        let left = loop {
            if !f.replica_ready(&replica).await {
                break Some(started.elapsed());
            }
            if Instant::now() >= until {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        match left {
            Some(after) => {
                rec.note(
                    scenario,
                    format!("{replica} not ready after {:.1} s", after.as_secs_f64()),
                )
                .await;
            }
            None => bail!(
                "{replica} stayed ready for the whole {:?} without its database",
                knobs.vfps_partition
            ),
        }
        tokio::time::sleep_until(until).await;
        Ok(())
    }
    .await;
    let healed = f.heal_replica_cut(&replica).await;
    held?;
    healed?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f
            .connect(Pod::Replica(&replica), Pod::Instance(&primary))
            .await?
        {
            Connect::Connected | Connect::Refused => break,
            Connect::TimedOut if Instant::now() < deadline => {}
            Connect::TimedOut => {
                bail!("the cut outlived its heal: {replica} still cannot reach the database")
            }
        }
    }
    f.wait_replicas_ready(f.heal_timeout())
        .await
        .with_context(|| format!("{replica} after the cut healed"))?;
    rec.heal(
        scenario,
        format!("healed: {replica} reaches the database and is ready"),
    )
    .await;
    Ok(())
}
