//! `objects-node-kill`: one node of the object store CSV jobs keep their files
//! in SIGKILLed (the one the seed drew), kept down for `OBJECTS_DOWN_SECONDS`,
//! then started again. The other two nodes are a quorum: jobs go on (a
//! replica whose own node is gone retries until it is back), and P7 judges
//! what they wrote. Proof: the node's S3 API stops answering while it is down
//! / answers again, and the store sees every node.
//!
//! Where a killed node comes back by itself (Kubernetes: the StatefulSet
//! re-creates the pod within seconds) it cannot be held down, so silence at
//! the end of the window proves nothing: the kill is proven by the node's
//! incarnation gone (the platform's `kill_objects_node` waits for that), the
//! heal by the node answering again in a healthy store.

use anyhow::bail;
use tokio::time::Instant;

use super::{Faults, Knobs, Recorder};
use crate::scenario::Planned;

pub async fn node_kill<F: Faults>(
    f: &F,
    planned: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    let scenario = &planned.name;
    let nodes = f.objects_nodes().await?;
    if nodes.is_empty() {
        bail!("this platform has no object store nodes to kill");
    }
    let node = &nodes[planned.draw.replica(0, nodes.len())];
    let back_at = Instant::now() + knobs.objects_down;
    f.kill_objects_node(node).await?;
    if f.objects_node_returns_by_itself() {
        rec.fault(
            scenario,
            format!("killed object store node {node}: that incarnation is gone"),
        )
        .await;
        // The jobs meet the store while the node restarts and catches up.
        tokio::time::sleep_until(back_at).await;
        f.restore_objects_node(node).await?;
        if !f.objects_node_answers(node).await {
            bail!("object store node {node} came back but its S3 API does not answer");
        }
        rec.heal(
            scenario,
            format!("healed: object store node {node} re-created and answering, every node seen"),
        )
        .await;
        return Ok(());
    }
    let silent = !f.objects_node_answers(node).await;
    rec.fault(
        scenario,
        format!(
            "killed object store node {node} for {:?}",
            knobs.objects_down
        ),
    )
    .await;
    tokio::time::sleep_until(back_at).await;
    let still_silent = !f.objects_node_answers(node).await;
    let restored = f.restore_objects_node(node).await;
    if !(silent && still_silent) {
        restored?;
        bail!("the kill did not take effect: object store node {node} answered while killed");
    }
    restored?;
    rec.heal(
        scenario,
        format!("healed: object store node {node} back, every node seen"),
    )
    .await;
    Ok(())
}
