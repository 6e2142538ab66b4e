//! Network partitions: every replica cut off from the database for a burst, on
//! a healthy cluster only; the cut is removed after every burst, even one that
//! failed to apply. Proof: a TCP connect from each replica to the primary times
//! out while the cut holds, and is answered after the heal.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Connect, Faults, Instance, Knobs, Pod, Recorder};
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
        let primary = f.primary().await?.context("no database primary")?;
        let replicas = f.replicas().await?;
        let next = Instant::now() + knobs.partition_every;
        let applied = async {
            f.partition(knobs.partition_burst).await?;
            let heal_at = Instant::now() + knobs.partition_burst;
            rec.fault(
                scenario,
                "applied: vfps pods cut off from the database pods",
            )
            .await;
            every_connect(f, &replicas, &primary, false).await?;
            rec.note(
                scenario,
                "proven: every replica's connect to the primary times out",
            )
            .await;
            tokio::time::sleep_until(heal_at).await;
            anyhow::Ok(())
        }
        .await;
        // A partition must never outlive its burst, even one that failed to apply.
        let healed = f.heal_partition().await;
        applied?;
        healed?;
        every_connect(f, &replicas, &primary, true).await?;
        rec.heal(scenario, "healed: partition removed, connects answered")
            .await;
        bursts += 1;
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next).await;
    }
    Ok(bursts)
}

/// Every replica's connect to the primary times out (`open` false), or is
/// answered within 10 s (`open` true).
async fn every_connect<F: Faults>(
    f: &F,
    replicas: &[String],
    primary: &Instance,
    open: bool,
) -> anyhow::Result<()> {
    for r in replicas {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = f.connect(Pod::Replica(r), Pod::Instance(primary)).await?;
            let timed_out = c == Connect::TimedOut;
            if timed_out != open {
                break;
            }
            if !open {
                bail!(
                    "the partition did not hold: a connect from {r} to {} was {c:?}",
                    primary.name
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "the partition outlived its heal: {r} still cannot reach {}",
                    primary.name
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}
