//! A node drain: a node without the database primary, on a healthy cluster
//! with every replica ready only (a drain while one is still starting takes a
//! second one out), held drained a while and always uncordoned, whatever the
//! drain did.

use anyhow::Context;

use super::{Faults, Knobs, Recorder};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    f.wait_db_healthy(f.heal_timeout()).await?;
    f.wait_replicas_ready(f.heal_timeout()).await?;
    let node = f.drain_target().await?;
    let drained = f.drain(&node).await;
    if drained.is_ok() {
        rec.fault(scenario, format!("drained node {node}")).await;
        tokio::time::sleep(knobs.drain_hold).await;
    }
    // Always back in service, whatever the drain did.
    let back = f.uncordon(&node).await;
    drained.with_context(|| format!("drain of node {node}"))?;
    back?;
    f.wait_db_healthy(f.heal_timeout()).await?;
    f.wait_replicas_ready(f.heal_timeout()).await?;
    rec.heal(
        scenario,
        format!("healed: node {node} uncordoned, cluster healthy"),
    )
    .await;
    Ok(())
}
