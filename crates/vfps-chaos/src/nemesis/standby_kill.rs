//! The synchronous standby killed under load: commits wait until the HA manager
//! names another synchronous standby, then go on; none may be lost. The killed
//! instance is brought back and the cluster must heal.
//!
//! Proof: while the killed instance is down, another instance holds the
//! synchronous role.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Faults, Recorder};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(f: &F, scenario: &ScenarioName, rec: &Recorder) -> anyhow::Result<()> {
    f.wait_db_healthy(f.heal_timeout()).await?;
    let standby = f
        .sync_standby()
        .await?
        .context("no synchronous standby to kill")?;
    f.kill_standby(&standby).await?;
    rec.fault(
        scenario,
        format!("killed synchronous standby {}", standby.name),
    )
    .await;
    let started = Instant::now();
    let deadline = started + f.heal_timeout();
    let successor = loop {
        if let Ok(Some(s)) = f.sync_standby().await {
            if s.name != standby.name {
                break s;
            }
        }
        if Instant::now() >= deadline {
            let _ = f.restore_instance(&standby).await;
            bail!(
                "no other instance became the synchronous standby within {:?} of killing {}",
                f.heal_timeout(),
                standby.name
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    rec.note(
        scenario,
        format!(
            "{} is the synchronous standby after {:.1} s",
            successor.name,
            started.elapsed().as_secs_f64()
        ),
    )
    .await;
    f.restore_instance(&standby).await?;
    f.wait_db_healthy(f.heal_timeout()).await?;
    rec.heal(
        scenario,
        format!("healed: {} back, cluster healthy", standby.name),
    )
    .await;
    Ok(())
}
