//! `up` and `down` on Kubernetes: the kind cluster (3 zone-labelled workers),
//! the images, CloudNativePG and Chaos Mesh, the database, the object store of
//! CSV jobs, vfps from its chart —
//! to a steady state before any chaos — and the cluster's deletion.

use std::time::Duration;

use anyhow::{bail, Context};

use super::{KindArgs, Kube, Runner, DEPLOYMENT, LOADGEN_NAMESPACE, NAMESPACE};

/// The vfps image under test.
pub const IMAGE: &str = "ghcr.io/miracum/vfps";
/// The load generator's image.
pub const STRESS_TEST_IMAGE: &str = "ghcr.io/miracum/vfps/stress-test";

/// Reads the inotify limits kind needs for a 4-node cluster; the message says how
/// to fix them.
pub fn inotify_problem(instances: u64, watches: u64) -> Option<String> {
    (instances < 512 || watches < 524_288).then(|| {
        format!(
            "inotify limits too low for a 4-node kind cluster (fs.inotify.max_user_instances={instances}, \
             fs.inotify.max_user_watches={watches}); fix: sudo sysctl -w fs.inotify.max_user_instances=512 \
             fs.inotify.max_user_watches=524288"
        )
    })
}

fn read_limit(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/fs/inotify/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// This machine's inotify limits (instances, watches).
pub fn inotify_limits() -> Option<(u64, u64)> {
    // Where there is no /proc/sys/fs/inotify (not Linux: Docker Desktop runs kind
    // in its own VM), there is nothing to check here.
    Some((
        read_limit("max_user_instances")?,
        read_limit("max_user_watches")?,
    ))
}

/// `up`: the cluster, the operators, the images, the database, the object
/// store, vfps — to a steady state (3 ready instances, a healthy object store,
/// a completed rollout) before any chaos.
pub async fn up<R: Runner>(
    kube: &Kube<R>,
    args: &KindArgs,
    limits: Option<(u64, u64)>,
) -> anyhow::Result<()> {
    if let Some(problem) = limits.and_then(|(i, w)| inotify_problem(i, w)) {
        bail!(problem);
    }
    crate::checkout::require(&args.assets, crate::checkout::KIND_ASSETS)?;
    crate::checkout::require(&args.chart, crate::checkout::CHART)?;
    let started = std::time::Instant::now();
    let step = |what: &str| eprintln!("up: {what} ({:.0} s)", started.elapsed().as_secs_f64());
    let versions = Versions::parse(&kube.asset("versions.env")?)?;
    let config = args.assets.join("kind-config.yaml").display().to_string();
    let existing = kube.run("kind", &["get", "clusters"]).await?;
    if existing.lines().any(|l| l.trim() == args.cluster_name) {
        step("the kind cluster exists; reusing it");
    } else {
        kube.run(
            "kind",
            &[
                "create",
                "cluster",
                "--name",
                &args.cluster_name,
                "--config",
                &config,
                "--image",
                &versions.kind_node_image,
                "--wait",
                "120s",
            ],
        )
        .await?;
        step("kind cluster created (1 control-plane, 3 zone-labelled workers)");
    }
    let images = [
        format!("{IMAGE}:{}", args.image_tag),
        format!("{STRESS_TEST_IMAGE}:{}", args.stress_test_tag()),
    ];
    refuse_foreign_image(kube, &images[0]).await?;
    load_images(kube, &args.cluster_name, &images).await?;
    step("images loaded");
    for (name, url) in [
        ("cnpg", "https://cloudnative-pg.github.io/charts"),
        ("chaos-mesh", "https://charts.chaos-mesh.org"),
    ] {
        kube.run("helm", &["repo", "add", "--force-update", name, url])
            .await?;
    }
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "cnpg",
            "cnpg/cloudnative-pg",
            "--version",
            &versions.cnpg_chart,
            "-n",
            "cnpg-system",
            "--create-namespace",
            "--wait",
        ],
    )
    .await?;
    step("CloudNativePG installed");
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "chaos-mesh",
            "chaos-mesh/chaos-mesh",
            "--version",
            &versions.chaos_mesh_chart,
            "-n",
            "chaos-mesh",
            "--create-namespace",
            "--wait",
            "--set",
            "dashboard.create=false",
            "--set",
            "chaosDaemon.runtime=containerd",
            "--set",
            "chaosDaemon.socketPath=/run/containerd/containerd.sock",
        ],
    )
    .await?;
    step("Chaos Mesh installed");
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
    ))
    .await?;
    kube.apply(&kube.asset("cnpg-cluster.yaml")?).await?;
    // While CloudNativePG bootstraps the database.
    kube.install_objects(&versions.garage_image, Duration::from_secs(600))
        .await?;
    step("object store: 3 Garage nodes, one per zone, bucket and vfps's key made");
    kube.install_backup().await?;
    step("continuous backup: the database archives to the bucket vfps-backup (cnpg-backup.yaml)");
    kube.wait_db_healthy(Duration::from_secs(900)).await?;
    step("CloudNativePG: 3 ready instances");
    let values = args
        .assets
        .join("vfps-ha-values.yaml")
        .display()
        .to_string();
    let chart = args.chart.display().to_string();
    kube.run(
        "helm",
        &[
            "upgrade",
            "--install",
            "vfps",
            &chart,
            "-n",
            NAMESPACE,
            "-f",
            &values,
            "--set",
            &format!("image.tag={}", args.image_tag),
            "--wait",
            "--timeout",
            "10m",
        ],
    )
    .await?;
    kube.kubectl(&[
        "rollout",
        "status",
        &format!("deployment/{DEPLOYMENT}"),
        "-n",
        NAMESPACE,
        "--timeout=300s",
    ])
    .await?;
    kube.wait_replicas_ready(Duration::from_secs(300)).await?;
    create_tokens(kube).await?;
    step("access tokens of the run made (authorization is on)");
    step("steady state: 3 ready database instances, a healthy object store, vfps rolled out");
    Ok(())
}

/// Refuses an image that is not this project's vfps (e.g. upstream's .NET
/// image, whose CLI knows neither `serve` nor `migrate --check --wait`: its
/// pods would never leave Init) before anything is loaded or installed.
async fn refuse_foreign_image<R: Runner>(kube: &Kube<R>, image: &str) -> anyhow::Result<()> {
    let answer = kube
        .run(
            "docker",
            &[
                "run",
                "--rm",
                "--entrypoint",
                "/usr/local/bin/vfps",
                image,
                "--version",
            ],
        )
        .await;
    match answer {
        Ok(out) if out.trim_start().starts_with("vfps ") => Ok(()),
        Ok(out) => bail!(
            "{image} is not an image of this vfps (`vfps --version` printed {:?}); build it with `docker buildx build --load -t {image} .` or pass this project's --image-tag",
            out.trim()
        ),
        Err(e) => bail!(
            "{image} is not an image of this vfps (it has no /usr/local/bin/vfps: {e:#}); upstream's .NET image cannot run this chart — build this project's with `docker buildx build --load -t {image} .`"
        ),
    }
}

/// Loads the images into every node, each saved for the one platform this
/// machine holds it for. `kind load docker-image` runs a plain `docker save`
/// and kind v0.27.0 imports with `ctr images import --all-platforms`: under
/// Docker's containerd image store a pulled multi-arch image (a released vfps)
/// is saved with its whole index while only this machine's platform was
/// pulled, and the import fails on the first missing blob. `docker image save
/// --platform` (Docker 28 and later) writes that platform alone.
async fn load_images<R: Runner>(
    kube: &Kube<R>,
    cluster: &str,
    images: &[String],
) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("vfps-kind-images-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let loaded = async {
        for (i, image) in images.iter().enumerate() {
            let platform = kube
                .run(
                    "docker",
                    &[
                        "image",
                        "inspect",
                        "--format",
                        "{{.Os}}/{{.Architecture}}{{with .Variant}}/{{.}}{{end}}",
                        image,
                    ],
                )
                .await?;
            let platform = platform.trim();
            let archive = dir.join(format!("image-{i}.tar")).display().to_string();
            kube.run(
                "docker",
                &["image", "save", "--platform", platform, "-o", &archive, image],
            )
            .await
            .with_context(|| {
                format!("cannot save {image} for {platform} alone (docker image save --platform needs Docker 28 or later)")
            })?;
            kube.run(
                "kind",
                &["load", "image-archive", "--name", cluster, &archive],
            )
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    let removed =
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove {}", dir.display()));
    loaded.and(removed)
}

/// `versions.env`: the pinned chart versions and images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub cnpg_chart: String,
    pub chaos_mesh_chart: String,
    pub kind_node_image: String,
    /// Garage, the object store of CSV jobs: pinned by its release tag.
    pub garage_image: String,
}

impl Versions {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let get = |key: &str| {
            text.lines()
                .filter_map(|l| l.trim().split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| anyhow::anyhow!("versions.env: {key} is not set"))
        };
        let kind_node_image = get("KIND_NODE_IMAGE")?;
        if !kind_node_image.contains("@sha256:") {
            bail!("versions.env: KIND_NODE_IMAGE={kind_node_image} is not pinned by digest");
        }
        let garage_image = get("GARAGE_IMAGE")?;
        let tag = garage_image
            .rsplit_once(':')
            .filter(|(name, _)| !name.is_empty() && !name.ends_with('/'))
            .map(|(_, tag)| tag);
        if !tag
            .is_some_and(|t| t.starts_with('v') && t[1..].starts_with(|c: char| c.is_ascii_digit()))
        {
            bail!(
                "versions.env: GARAGE_IMAGE={garage_image} is not pinned to a release tag (vX.Y.Z)"
            );
        }
        Ok(Self {
            cnpg_chart: get("CNPG_CHART_VERSION")?,
            chaos_mesh_chart: get("CHAOS_MESH_CHART_VERSION")?,
            kind_node_image,
            garage_image,
        })
    }
}

/// Where the load Job finds the run's tokens.
pub const TOKENS_SECRET: &str = "vfps-chaos-tokens";

/// The run's access tokens, made by `vfps tokens create` inside a vfps pod
/// (its database settings are the release's) and kept in a Secret that the
/// load Job mounts. The plaintext travels only through kubectl's pipes.
async fn create_tokens<R: Runner>(kube: &Kube<R>) -> anyhow::Result<()> {
    let deployment = format!("deployment/{DEPLOYMENT}");
    let mut data = String::new();
    for token in crate::platform::access::ALL {
        let mut args = vec![
            "exec",
            "-n",
            NAMESPACE,
            &deployment,
            "-c",
            "vfps",
            "--",
            "vfps",
            "tokens",
            "create",
        ];
        args.extend_from_slice(token.args);
        let out = kube.kubectl(&args).await?;
        let secret = crate::platform::access::secret_of(out.as_bytes())?;
        data.push_str(&format!("  {}: {secret}\n", token.file));
    }
    kube.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {LOADGEN_NAMESPACE}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: {TOKENS_SECRET}\n  namespace: {LOADGEN_NAMESPACE}\n\
         type: Opaque\nstringData:\n{data}"
    ))
    .await
}

/// `down`: deletes the kind cluster.
pub async fn down<R: Runner>(kube: &Kube<R>, args: &KindArgs) -> anyhow::Result<()> {
    kube.run("kind", &["delete", "cluster", "--name", &args.cluster_name])
        .await
        .map(|_| ())
}
