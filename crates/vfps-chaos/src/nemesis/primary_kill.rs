//! Primary kills: on a healthy cluster only, the primary is killed, a new one
//! must be elected, the old instance comes back and the cluster is healthy
//! again — repeated while the window has room, at least once.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Faults, Recorder};
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
        // Room for a failover and a rejoin; always at least one kill.
        if failovers > 0 && Instant::now() + Duration::from_secs(15) > until {
            return Ok(failovers);
        }
        let old = f
            .primary()
            .await?
            .context("no pod is labelled as the database primary: cannot kill it")?;
        f.kill_primary(&old).await?;
        rec.fault(scenario, format!("killed primary {}", old.name))
            .await;
        let deadline = Instant::now() + f.heal_timeout();
        let new = loop {
            if let Some(n) = f.primary().await.ok().flatten().filter(|n| *n != old) {
                break n;
            }
            if Instant::now() >= deadline {
                bail!(
                    "no new primary within {:?} after killing {}",
                    f.heal_timeout(),
                    old.name
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let how = if new.name == old.name {
            format!("{} restarted and primary again", new.name)
        } else {
            format!("promoted {}", new.name)
        };
        rec.note(scenario, how).await;
        f.restore_instance(&old).await?;
        f.wait_db_healthy(f.heal_timeout()).await?;
        rec.heal(
            scenario,
            format!("healed: {} back, cluster healthy", old.name),
        )
        .await;
        failovers += 1;
    }
}
