//! Replica kills: one replica at a time, each replaced and every replica ready
//! again before the next; at least one kill, or the fault never took effect.

use std::time::Duration;

use anyhow::bail;
use tokio::time::Instant;

use super::{Faults, Knobs, Recorder};
use crate::scenario::Planned;

pub async fn run<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let scenario = &planned.name;
    f.pod_kill_begin(knobs.pod_kill_interval).await?;
    let kills = async {
        let mut round = 0;
        while Instant::now() + Duration::from_secs(5) < until {
            let next = Instant::now() + knobs.pod_kill_interval;
            let Some(victim) = f
                .pod_kill_next(planned.draw.replica(round, 3), until)
                .await?
            else {
                break;
            };
            round += 1;
            rec.fault(scenario, format!("killed {}", victim.name)).await;
            f.wait_replaced(&victim).await?;
            rec.heal(
                scenario,
                format!("healed: {} replaced, every replica ready", victim.name),
            )
            .await;
            if !f.paces_pod_kills() {
                tokio::time::sleep_until(next.min(until)).await;
            }
        }
        if round == 0 {
            bail!("no vfps replica was killed in the window: the fault never took effect");
        }
        Ok(round as u32)
    }
    .await;
    let ended = f.pod_kill_end().await;
    let n = kills?;
    ended?;
    Ok(n)
}
