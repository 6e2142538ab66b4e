//! Network partitions: every replica cut off from the database for a burst, on
//! a healthy cluster only; the cut is removed after every burst, even one that
//! failed to apply.

use tokio::time::Instant;

use super::{Faults, Knobs, Recorder};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let mut bursts = 0;
    while bursts == 0 || Instant::now() + knobs.partition_burst < until {
        f.wait_db_healthy(f.heal_timeout()).await?;
        let next = Instant::now() + knobs.partition_every;
        let applied = f.partition(knobs.partition_burst).await;
        if applied.is_ok() {
            rec.fault(
                scenario,
                "applied: vfps pods cannot reach the database pods",
            )
            .await;
            tokio::time::sleep(knobs.partition_burst).await;
        }
        // A partition must never outlive its burst, even one that failed to apply.
        let healed = f.heal_partition().await;
        applied?;
        healed?;
        rec.heal(scenario, "healed: partition removed").await;
        bursts += 1;
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next).await;
    }
    Ok(bursts)
}
