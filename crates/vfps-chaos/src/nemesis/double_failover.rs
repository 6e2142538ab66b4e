//! The double failover: the primary is killed, and the standby promoted in its
//! place is killed as soon as it leads — before the cluster has settled (its
//! synchronous standby chosen, the old primary back). Whatever the third
//! instance may do meanwhile, no acknowledged write may be lost; both killed
//! instances are then brought back and the cluster must heal.
//!
//! Proof: two promotions, each on a higher timeline than the last, and at the
//! end a primary on a timeline at least as high as the second.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{primary_kill::wait_promoted, Faults, Recorder};
use crate::scenario::ScenarioName;

/// How long the survivor gets to take over alone before the killed instances
/// come back (Patroni may rightly refuse: it was not the synchronous standby).
const ALONE: Duration = Duration::from_secs(10);

pub async fn run<F: Faults>(f: &F, scenario: &ScenarioName, rec: &Recorder) -> anyhow::Result<u32> {
    f.wait_db_healthy(f.heal_timeout()).await?;
    let first = f.primary().await?.context("no database primary to kill")?;
    let t0 = f
        .timeline()
        .await?
        .context("the primary reports no timeline")?;
    f.kill_primary(&first).await?;
    rec.fault(
        scenario,
        format!("killed primary {} (timeline {t0})", first.name),
    )
    .await;
    let (second, t1) = wait_promoted(f, &first, t0).await?;
    f.kill_primary(&second).await?;
    rec.fault(
        scenario,
        format!("killed {} just promoted (timeline {t1})", second.name),
    )
    .await;
    // The third instance alone: promoted, or (rightly) waiting.
    let deadline = Instant::now() + ALONE;
    let mut third = None;
    while Instant::now() < deadline {
        if let (Ok(Some(p)), Ok(Some(t))) = (f.primary().await, f.timeline().await) {
            if p.name != first.name && p.name != second.name && t > t1 {
                third = Some((p, t));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    rec.note(
        scenario,
        match &third {
            Some((p, t)) => format!("promoted {} on timeline {t}", p.name),
            None => {
                format!("no promotion within {ALONE:?}: the survivor waits for a killed instance")
            }
        },
    )
    .await;
    let a = f.restore_instance(&first).await;
    let b = f.restore_instance(&second).await;
    a?;
    b?;
    f.wait_db_healthy(f.heal_timeout()).await?;
    let end = f.timeline().await?.context("no primary after the heal")?;
    if end < t1 {
        bail!("the primary's timeline went back from {t1} to {end}: a promoted primary's writes were discarded");
    }
    let leader = f.primary().await?.context("no primary after the heal")?;
    rec.heal(
        scenario,
        format!(
            "healed: {} and {} back; primary {} on timeline {end}",
            first.name, second.name, leader.name
        ),
    )
    .await;
    Ok(if third.is_some() { 3 } else { 2 })
}
