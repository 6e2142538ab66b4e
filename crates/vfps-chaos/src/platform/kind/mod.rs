//! The Kubernetes platform: kind, CloudNativePG, Chaos Mesh and the Helm chart,
//! driven through `kubectl` (and `kind`, `helm` for `up`/`down`).
//!
//! The faults are the Chaos Mesh objects in `tests/chaos/ha/chaos/` (pod kill on a
//! Schedule, a one-shot PodChaos on the primary, a NetworkChaos partition) plus
//! `kubectl rollout restart` and `kubectl drain`. Every command goes through a
//! [`Runner`], so the driver's logic is tested against a simulated cluster where
//! no Kubernetes API can run.
//!
//! # Layout
//! - this file: [`Runner`], [`Kube`] (the cluster through `kubectl`).
//! - [`cluster`]: what the driver reads of the cluster — pods, the CloudNativePG
//!   status, readiness.
//! - [`chaos`]: the Chaos Mesh objects and the shared scenarios' faults here.
//! - [`gray`]: the one-shot gray faults (isolation, standby kill, replica cut,
//!   delay) and the probes run inside the database pods.
//! - [`install`]: `up` (kind, the operators, the images, the database, the
//!   object store, vfps) and `down`.
//! - [`objects`]: the object store of CSV jobs (Garage, one node per zone):
//!   its install and its node kill.
//! - [`drill`]: the restore (`kind restore`) and the restore drill: a base
//!   backup, the Cluster destroyed and recovered from the bucket, `vfps
//!   restore` as Jobs, the drill's client Job.
//! - [`job`]: the load generator as a Job: its manifest, its log, its clock.
//! - [`jobs`]: the service's CSV jobs, read from the database primary.
//! - [`evidence`]: the cluster's state and logs into the run directory.
//! - [`driver`]: `vfps-chaos kind …`, the driver steps and `render`.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::sync::Mutex;

pub mod assets;
pub mod chaos;
pub mod cluster;
pub mod drill;
pub mod driver;
pub mod evidence;
pub mod gray;
pub mod install;
pub mod job;
pub mod jobs;
pub mod objects;

pub use cluster::{CnpgStatus, Pod};

/// Namespace of vfps and its database.
pub const NAMESPACE: &str = "vfps";
/// Namespace of the load generator Job.
pub const LOADGEN_NAMESPACE: &str = "vfps-loadgen";
pub const LOADGEN_JOB: &str = "vfps-loadgen";
/// The CloudNativePG `Cluster`.
pub const CNPG_CLUSTER: &str = "vfps-db";
/// The vfps Deployment (Helm release `vfps`).
pub const DEPLOYMENT: &str = "vfps";
/// vfps's API pods: the Deployment's own selector. `app.kubernetes.io/name`
/// alone also selects the release's helm test pod.
pub(crate) const VFPS_PODS: &str =
    "app.kubernetes.io/name=vfps,app.kubernetes.io/instance=vfps,app.kubernetes.io/component=api";
pub(crate) const PRIMARY_POD: &str = "cnpg.io/cluster=vfps-db,cnpg.io/instanceRole=primary";
/// What `kubectl drain` may take before the drain counts as failed.
pub const DRAIN_TIMEOUT: &str = "120s";

/// Runs a command: `Ok(stdout)` on exit 0, an error naming the command and
/// carrying its output otherwise.
#[allow(async_fn_in_trait)] // used through generics inside this crate only
pub trait Runner: Sync {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String>;
}

/// The real thing: child processes.
pub struct Shell;

impl Runner for Shell {
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(if input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The kind topology, reached through `kubectl`.
pub struct Kube<R> {
    runner: R,
    /// `tests/chaos/ha`.
    assets: PathBuf,
    /// Between two observations of the cluster.
    pub poll: Duration,
    /// How long a heal (replacement pod, failover, rejoin, rollout) may take.
    pub heal_timeout: Duration,
    /// The vfps pods after the last heal: a kill is one of them going away.
    known: Mutex<Vec<Pod>>,
    /// The database round trip measured before the delay was injected, and
    /// the least a delayed one adds: the heal is proven against them.
    delay_proof: Mutex<Option<gray::DelayProof>>,
}

impl<R: Runner> Kube<R> {
    pub fn new(runner: R, assets: &Path) -> Self {
        Self {
            runner,
            assets: assets.to_owned(),
            poll: Duration::from_secs(2),
            heal_timeout: Duration::from_secs(300),
            known: Mutex::new(Vec::new()),
            delay_proof: Mutex::new(None),
        }
    }

    pub async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        self.runner.run(program, args, None).await
    }

    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.runner.run("kubectl", args, None).await
    }

    pub(crate) async fn get_json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl(&a).await?;
        serde_json::from_str(&out).with_context(|| format!("kubectl {}: not JSON", a.join(" ")))
    }

    pub fn asset(&self, relative: &str) -> anyhow::Result<String> {
        let path = self.assets.join(relative);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    }

    pub async fn apply(&self, manifest: &str) -> anyhow::Result<()> {
        self.runner
            .run("kubectl", &["apply", "-f", "-"], Some(manifest))
            .await
            .map(|_| ())
    }

    /// Deletes what a manifest names and waits until it is gone.
    pub async fn delete(&self, manifest: &str) -> anyhow::Result<()> {
        self.runner
            .run(
                "kubectl",
                &["delete", "--ignore-not-found", "--wait=true", "-f", "-"],
                Some(manifest),
            )
            .await
            .map(|_| ())
    }
}

/// Settings of a kind run beyond the load's.
#[derive(Debug, Clone, clap::Args)]
pub struct KindArgs {
    /// Name of the kind cluster.
    #[arg(long, env = "CLUSTER_NAME", default_value = "vfps-ha")]
    pub cluster_name: String,
    /// Tag of the vfps image under test (`ghcr.io/miracum/vfps`).
    #[arg(long, env = "IMAGE_TAG", default_value = "ci")]
    pub image_tag: String,
    /// Tag of the load generator image (`ghcr.io/miracum/vfps/stress-test`); default:
    /// the vfps image's. A released vfps is tested with the checkout's generator,
    /// which speaks this driver's protocol (the load window's start marker).
    #[arg(long, env = "STRESS_TEST_TAG")]
    pub stress_test_tag: Option<String>,
    /// The Kubernetes chaos assets (kind-config, cnpg-cluster, values, Job, chaos/).
    #[arg(long, env = "VFPS_CHAOS_ASSETS", default_value_os_t = crate::checkout::default(crate::checkout::KIND_ASSETS))]
    pub assets: PathBuf,
    /// The Helm chart of vfps.
    #[arg(long, env = "VFPS_CHART", default_value_os_t = crate::checkout::default(crate::checkout::CHART))]
    pub chart: PathBuf,
}

impl KindArgs {
    pub fn stress_test_tag(&self) -> &str {
        self.stress_test_tag.as_deref().unwrap_or(&self.image_tag)
    }
}

#[cfg(test)]
mod tests;
