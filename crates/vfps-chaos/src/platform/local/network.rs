//! Pods as network namespaces on a bridge, the registry of every process the
//! platform started (by PID, in one fixed place), and `down`, which removes all
//! of it, also after a crash.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{app_ip, db_ip, BRIDGE, CONTROL_PLANE, ZONES};
use crate::platform::net::{alive, cmd, cmd_quiet, signal, wait_for};

pub(super) fn pid_file(name: &str) -> PathBuf {
    pids_dir().join(format!("{name}.pid"))
}

pub(super) fn write_pid(name: &str, pid: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(pids_dir())?;
    std::fs::write(pid_file(name), pid.to_string())?;
    Ok(())
}

pub(super) fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Where PIDs are recorded: one fixed place whatever the base directory, because
/// the network names are fixed too and a stale run must be found by the next one.
fn pids_dir() -> PathBuf {
    std::env::temp_dir().join("vfps-chaos-local-pids")
}

fn namespaces() -> Vec<String> {
    ZONES
        .iter()
        .flat_map(|z| {
            [
                format!("vfps-db-{z}"),
                format!("vfps-app-{z}"),
                format!("vfps-s3-{z}"),
            ]
        })
        .collect()
}

async fn add_pod(ns: &str, veth: &str, ip: &str) -> anyhow::Result<()> {
    cmd("ip", &["netns", "add", ns]).await?;
    cmd(
        "ip",
        &[
            "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ],
    )
    .await?;
    cmd("ip", &["link", "set", veth, "master", BRIDGE, "up"]).await?;
    cmd(
        "ip",
        &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
    )
    .await?;
    cmd("ip", &["-n", ns, "link", "set", "eth0", "up"]).await?;
    cmd("ip", &["-n", ns, "link", "set", "lo", "up"]).await?;
    Ok(())
}

/// The bridge on the control-plane address and a pod per database, replica
/// and object store node.
pub(super) async fn create() -> anyhow::Result<()> {
    cmd("ip", &["link", "add", BRIDGE, "type", "bridge"]).await?;
    cmd(
        "ip",
        &["addr", "add", &format!("{CONTROL_PLANE}/24"), "dev", BRIDGE],
    )
    .await?;
    cmd("ip", &["link", "set", BRIDGE, "up"]).await?;
    for z in ZONES {
        add_pod(&format!("vfps-db-{z}"), &format!("vfpsd{z}"), &db_ip(z)).await?;
        add_pod(&format!("vfps-app-{z}"), &format!("vfpsa{z}"), &app_ip(z)).await?;
        add_pod(
            &format!("vfps-s3-{z}"),
            &format!("vfpss{z}"),
            &super::s3_ip(z),
        )
        .await?;
    }
    Ok(())
}

/// Removes everything a previous run created: processes by recorded PID,
/// namespaces, the bridge, the base directory. Idempotent.
pub async fn down(base: &Path) {
    // Recorded PIDs first (replica supervisors, so nothing respawns; etcd).
    let registry = pids_dir();
    if let Ok(entries) = std::fs::read_dir(&registry) {
        for e in entries.flatten() {
            if let Some(pid) = read_pid(&e.path()) {
                if alive(pid) {
                    let _ = signal(pid, "KILL").await;
                }
            }
        }
    }
    // Everything inside our pods (Patroni, every PostgreSQL process, vfps),
    // found by namespace, so nothing survives even after a crash lost its PIDs.
    for ns in namespaces() {
        if let Ok(out) = cmd("ip", &["netns", "pids", &ns]).await {
            for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                let _ = signal(pid, "KILL").await;
            }
        }
    }
    let _ = wait_for("processes to exit", Duration::from_secs(10), || async {
        for ns in namespaces() {
            if cmd("ip", &["netns", "pids", &ns])
                .await
                .is_ok_and(|o| o.split_whitespace().next().is_some())
            {
                return false;
            }
        }
        std::fs::read_dir(pids_dir())
            .map(|es| {
                es.flatten()
                    .all(|e| read_pid(&e.path()).is_none_or(|p| !alive(p)))
            })
            .unwrap_or(true)
    })
    .await;
    for ns in namespaces() {
        cmd_quiet("ip", &["netns", "del", &ns]).await;
    }
    for z in ZONES {
        cmd_quiet("ip", &["link", "del", &format!("vfpsd{z}")]).await;
        cmd_quiet("ip", &["link", "del", &format!("vfpsa{z}")]).await;
        cmd_quiet("ip", &["link", "del", &format!("vfpss{z}")]).await;
    }
    cmd_quiet("ip", &["link", "del", BRIDGE]).await;
    let _ = std::fs::remove_dir_all(base);
    let _ = std::fs::remove_dir_all(registry);
}
