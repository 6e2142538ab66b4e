//! Network cuts: nftables rules inside a pod's namespace that drop every packet
//! to and from a set of addresses (timeouts, never resets). Each kind of cut has
//! its own table, so healing one leaves the others; a cut is proven by a TCP
//! connect that times out ([`super::probe`]), not by the rule being listed.

use super::ZONES;
use crate::platform::net::{cmd, cmd_quiet};

/// Every vfps pod cut off from every database pod (`db-network-partition`).
pub const PARTITION: &str = "vfps_chaos";
/// A database pod cut off from the other database pods (`db-primary-isolation`).
pub const ISOLATION: &str = "vfps_chaos_isolation";
/// One vfps pod cut off from the database (`vfps-partition`).
pub const REPLICA_CUT: &str = "vfps_chaos_replica_cut";

const TABLES: [&str; 3] = [PARTITION, ISOLATION, REPLICA_CUT];

/// Every pod namespace a cut may live in.
pub(super) fn pods() -> Vec<String> {
    ZONES
        .iter()
        .flat_map(|z| [format!("vfps-app-{z}"), format!("vfps-db-{z}")])
        .collect()
}

/// Drops every packet between pod `ns` and `addrs`, both ways, in `table`.
pub async fn apply(ns: &str, table: &str, addrs: &[String]) -> anyhow::Result<()> {
    let set = addrs.join(", ");
    let rules = format!(
        "table inet {table} {{ \
           chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}; \
           chain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}; \
         }}"
    );
    cmd("ip", &["netns", "exec", ns, "nft", &rules]).await?;
    Ok(())
}

/// Removes `table` from pod `ns`; fails if it is still there afterwards.
pub async fn remove(ns: &str, table: &str) -> anyhow::Result<()> {
    cmd_quiet(
        "ip",
        &["netns", "exec", ns, "nft", "delete", "table", "inet", table],
    )
    .await;
    if present(ns, table).await {
        anyhow::bail!("nftables table {table} still present in {ns} after removing it");
    }
    Ok(())
}

/// Whether `table` exists in pod `ns`.
pub async fn present(ns: &str, table: &str) -> bool {
    cmd(
        "ip",
        &["netns", "exec", ns, "nft", "list", "table", "inet", table],
    )
    .await
    .is_ok()
}

/// Every cut still in place, as (pod, table).
pub async fn remaining() -> Vec<(String, &'static str)> {
    let mut left = Vec::new();
    for ns in pods() {
        for t in TABLES {
            if present(&ns, t).await {
                left.push((ns.clone(), t));
            }
        }
    }
    left
}

/// Removes every cut there is (after a run, whatever happened in it).
pub async fn remove_all() -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for (ns, t) in remaining().await {
        if let Err(e) = remove(&ns, t).await {
            failed.push(format!("{e:#}"));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", failed.join("; "))
    }
}
