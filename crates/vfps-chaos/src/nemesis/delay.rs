//! Latency to the database (`db-network-delay`, where the platform can do it):
//! every replica's database traffic delayed 200 ms ± 50 ms for `DELAY_SECONDS`.
//! A gray fault: nothing fails, everything is slow; calls must not fail for it
//! beyond their deadline. Proof: the platform reports the delay injected, and
//! it is gone after the heal.

use std::time::Duration;

use super::{Faults, Knobs, Recorder};
use crate::scenario::ScenarioName;

pub const DELAY: Duration = Duration::from_millis(200);
pub const JITTER: Duration = Duration::from_millis(50);

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    f.wait_db_healthy(f.heal_timeout()).await?;
    let applied = f.delay_database(DELAY, JITTER, knobs.delay).await;
    if applied.is_ok() {
        rec.fault(
            scenario,
            format!(
                "database traffic delayed {DELAY:?} ± {JITTER:?} for {:?}",
                knobs.delay
            ),
        )
        .await;
        tokio::time::sleep(knobs.delay).await;
    }
    let healed = f.heal_delay().await;
    applied?;
    healed?;
    rec.heal(scenario, "healed: delay removed").await;
    Ok(())
}
