//! Evidence of a Kubernetes run, best effort (a step that fails is written as
//! its error): pods, events, the CloudNativePG status, instance, vfps and
//! object store logs, chaos objects, a cluster dump, and the cnpg plugin's report when installed.

use std::path::Path;

use super::{Kube, Runner, CNPG_CLUSTER, NAMESPACE};
use crate::report::write_file;

/// One command's output into the run directory; a command that fails is
/// written as its error (the evidence says what could not be read).
async fn capture<R: Runner>(
    kube: &Kube<R>,
    dir: &Path,
    file: &str,
    args: &[&str],
) -> anyhow::Result<()> {
    let text = kube
        .kubectl(args)
        .await
        .unwrap_or_else(|e| format!("{e:#}"));
    write_file(dir, file, text)
}

/// The cluster's state and logs into the run directory: pods, events, the CNPG
/// status, instance, vfps and object store logs, chaos objects, a cluster dump. What the
/// cluster will not tell is written as its error; what cannot be written fails.
pub async fn capture_state<R: Runner>(kube: &Kube<R>, dir: &Path) -> anyhow::Result<()> {
    for (file, args) in [
        ("pods.txt", vec!["get", "pods", "-A", "-o", "wide"]),
        (
            "events.txt",
            vec!["get", "events", "-A", "--sort-by=.lastTimestamp"],
        ),
        (
            "cnpg-cluster.yaml",
            vec![
                "get",
                "cluster",
                CNPG_CLUSTER,
                "-n",
                NAMESPACE,
                "-o",
                "yaml",
            ],
        ),
        (
            "cnpg-instances.log",
            vec![
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                "cnpg.io/cluster=vfps-db",
                "--all-containers",
                "--prefix",
                "--tail=-1",
            ],
        ),
        (
            "vfps-api.log",
            vec![
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                "app.kubernetes.io/name=vfps",
                "--all-containers",
                "--prefix",
                "--tail=-1",
            ],
        ),
        (
            "objects.log",
            vec![
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                super::objects::GARAGE_PODS,
                "--all-containers",
                "--prefix",
                "--tail=-1",
            ],
        ),
        (
            "chaos-objects.yaml",
            vec![
                "get",
                "schedules,podchaos,networkchaos",
                "-n",
                NAMESPACE,
                "-o",
                "yaml",
            ],
        ),
    ] {
        capture(kube, dir, file, &args).await?;
    }
    let dump = dir.join("cluster-dump").display().to_string();
    let dumped = kube
        .kubectl(&[
            "cluster-info",
            "dump",
            "--all-namespaces",
            &format!("--output-directory={dump}"),
        ])
        .await;
    if let Err(e) = dumped {
        write_file(dir, "cluster-dump.error.txt", format!("{e:#}"))?;
    }
    // With the cnpg kubectl plugin installed: its support bundle, the first thing
    // to open after a P2 or P3 violation. Without it there is nothing to say.
    let report = dir.join("cnpg-report.zip").display().to_string();
    let bundled = kube
        .kubectl(&[
            "cnpg",
            "report",
            "cluster",
            CNPG_CLUSTER,
            "-n",
            NAMESPACE,
            "-f",
            &report,
        ])
        .await;
    if let Err(e) = bundled {
        tracing::debug!(error = %format!("{e:#}"), "no cnpg report (is the kubectl cnpg plugin installed?)");
    }
    Ok(())
}
