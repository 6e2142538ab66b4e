//! The paused primary: every process of the primary stopped (SIGSTOP) for
//! longer than the leader TTL, then resumed — a VM pause, a long GC or I/O
//! stall. A standby must take over while it sleeps, and the old primary, waking
//! up still believing it leads, must step down and rejoin as a standby without
//! taking the new primary's writes with it. Repeated while the window has room,
//! at least once.
//!
//! Proof: a new leader on a higher timeline while the old one is paused; after
//! the resume the old one is a standby by its own account (PostgreSQL in
//! recovery, receiving WAL) and the primary's timeline never goes back (a timeline that goes back is the split brain that discards every
//! write the promoted primary acknowledged).

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Faults, Instance, Knobs, Recorder};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let mut pauses = 0;
    loop {
        f.wait_db_healthy(f.heal_timeout()).await?;
        // Room for a pause, a rejoin and a settled cluster; at least one.
        if pauses > 0 && Instant::now() + knobs.db_pause + Duration::from_secs(15) > until {
            return Ok(pauses);
        }
        once(f, scenario, knobs, rec).await?;
        pauses += 1;
    }
}

/// One pause: the old primary is always resumed, whatever the proofs found.
async fn once<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    let old = f.primary().await?.context("no database primary to pause")?;
    let before = f
        .timeline()
        .await?
        .context("the primary reports no timeline")?;
    let resume_at = Instant::now() + knobs.db_pause;
    let stopped = f.pause_instance(&old).await?;
    rec.fault_at(
        scenario,
        stopped,
        format!(
            "paused {} (timeline {before}) for {:?}",
            old.name, knobs.db_pause
        ),
    )
    .await;
    let promoted = promoted_while_paused(f, &old, before, resume_at).await;
    if let Ok((new, timeline)) = &promoted {
        rec.note(
            scenario,
            format!(
                "promoted {} (timeline {timeline}) while {} slept",
                new.name, old.name
            ),
        )
        .await;
    }
    tokio::time::sleep_until(resume_at).await;
    let resumed = f.resume_instance(&old).await;
    let (_, timeline) = promoted?;
    resumed?;
    rec.note(scenario, format!("resumed {}", old.name)).await;
    f.wait_db_healthy(f.heal_timeout()).await?;
    super::wait_standby(f, &old).await?;
    let after = f.timeline().await?.context("no primary after the resume")?;
    if after < timeline {
        bail!(
            "the primary's timeline went back from {timeline} to {after} after {} resumed: \
             the promoted primary's writes were discarded (split brain)",
            old.name
        );
    }
    let leader = f.primary().await?.context("no primary after the resume")?;
    if leader.name == old.name && after == before {
        bail!("{} leads again on its old timeline {before}", old.name);
    }
    rec.heal(
        scenario,
        format!(
            "healed: {} rejoined as a standby; primary {} on timeline {after}",
            old.name, leader.name
        ),
    )
    .await;
    Ok(())
}

/// A primary other than `old` on a timeline above `before`, before `deadline`.
async fn promoted_while_paused<F: Faults>(
    f: &F,
    old: &Instance,
    before: u64,
    deadline: Instant,
) -> anyhow::Result<(Instance, u64)> {
    loop {
        if let (Ok(Some(p)), Ok(Some(t))) = (f.primary().await, f.timeline().await) {
            if p.name != old.name && t > before {
                return Ok((p, t));
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "no standby was promoted while {} was paused: the pause did not take effect, \
                 or it was shorter than the leader TTL",
                old.name
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
