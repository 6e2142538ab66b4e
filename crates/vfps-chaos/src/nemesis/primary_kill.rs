//! Primary kills: on a healthy cluster only, the primary is killed, a new one
//! must be elected on a higher timeline, the old instance comes back and the
//! cluster is healthy again — repeated while the window has room, at least once.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Faults, Instance, Recorder};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let mut failovers = 0;
    loop {
        f.wait_db_healthy(f.heal_timeout()).await?;
        // Room for a failover and a rejoin (up to ~20 s here); always at least one kill.
        if failovers > 0 && Instant::now() + Duration::from_secs(22) > until {
            return Ok(failovers);
        }
        let old = f
            .primary()
            .await?
            .context("no pod is labelled as the database primary: cannot kill it")?;
        let before = f
            .timeline()
            .await?
            .context("the primary reports no timeline")?;
        f.kill_primary(&old).await?;
        rec.fault(
            scenario,
            format!("killed primary {} (timeline {before})", old.name),
        )
        .await;
        let (new, timeline) = wait_promoted(f, &old, before).await?;
        let how = if new.name == old.name {
            format!(
                "{} restarted and primary again on timeline {timeline}",
                new.name
            )
        } else {
            format!("promoted {} on timeline {timeline}", new.name)
        };
        rec.note(scenario, how).await;
        f.restore_instance(&old).await?;
        f.wait_db_healthy(f.heal_timeout()).await?;
        super::wait_standby(f, &old).await?;
        rec.heal(
            scenario,
            format!("healed: {} back as a standby, cluster healthy", old.name),
        )
        .await;
        failovers += 1;
    }
}

/// After `old` was killed on timeline `before`: a new incarnation leads on a
/// higher timeline — a promotion, not the same process still answering.
pub async fn wait_promoted<F: Faults>(
    f: &F,
    old: &Instance,
    before: u64,
) -> anyhow::Result<(Instance, u64)> {
    let deadline = Instant::now() + f.heal_timeout();
    loop {
        if let (Ok(Some(p)), Ok(Some(t))) = (f.primary().await, f.timeline().await) {
            if p != *old && t > before {
                return Ok((p, t));
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "no primary on a timeline above {before} within {:?} after killing {}",
                f.heal_timeout(),
                old.name
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
