//! The object store of CSV jobs: Garage, three nodes, one pod per zone
//! (`vfps-s3-<z>`), replication factor 3, one bucket and one key. Each replica
//! talks to its own zone's node, as it would to a zone-local endpoint; a
//! node's loss leaves the other two a quorum.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context};

use super::{
    network::{pid_file, read_pid, write_pid},
    s3_ip, Local, ZONES,
};
use crate::platform::net::{alive, cmd, kill, wait_for};

/// The pinned Garage `scripts/install-garage.sh` installs.
const GARAGE_VERSION: &str = "2.5.0";
pub const S3_PORT: u16 = 3900;
const RPC_PORT: u16 = 3901;
pub const BUCKET: &str = "vfps-jobs";
pub const REGION: &str = "garage";

/// The replica's S3 endpoint: its zone's node.
pub fn s3_url(zone: &str) -> String {
    format!("http://{}:{S3_PORT}", s3_ip(zone))
}

/// The `garage` binary: `$VFPS_GARAGE_BIN`, else the pinned install.
fn garage_bin() -> PathBuf {
    std::env::var_os("VFPS_GARAGE_BIN").map_or_else(
        || {
            PathBuf::from(format!(
                "/opt/vfps-chaos/garage-{GARAGE_VERSION}/bin/garage"
            ))
        },
        PathBuf::from,
    )
}

/// The key vfps's replicas use, as `up` made it.
#[derive(Debug, Clone)]
pub struct S3Key {
    pub id: String,
    pub secret: String,
}

impl Local {
    fn objects_dir(&self, zone: &str) -> PathBuf {
        self.opts.base.join(format!("s3-{zone}"))
    }

    fn key_file(&self) -> PathBuf {
        self.opts.base.join("s3-key")
    }

    /// The key `up` made (id, then secret, one per line).
    pub fn s3_key(&self) -> anyhow::Result<S3Key> {
        let text = std::fs::read_to_string(self.key_file()).context("the object store's key")?;
        let mut lines = text.lines();
        match (lines.next(), lines.next()) {
            (Some(id), Some(secret)) => Ok(S3Key {
                id: id.to_owned(),
                secret: secret.to_owned(),
            }),
            _ => bail!("{} is not a key", self.key_file().display()),
        }
    }

    /// Three nodes started, connected and laid out, a bucket and a key.
    pub(super) async fn start_objects(&self) -> anyhow::Result<()> {
        let bin = garage_bin();
        if !bin.exists() {
            bail!(
                "no Garage at {} (run scripts/install-garage.sh, or set VFPS_GARAGE_BIN)",
                bin.display()
            );
        }
        let secret = hex::encode(rand::random::<[u8; 32]>());
        for z in ZONES {
            let dir = self.objects_dir(z);
            std::fs::create_dir_all(&dir)?;
            let config = format!(
                "metadata_dir = \"{d}/meta\"\ndata_dir = \"{d}/data\"\ndb_engine = \"sqlite\"\n\
                 replication_factor = 3\nrpc_bind_addr = \"{ip}:{RPC_PORT}\"\n\
                 rpc_public_addr = \"{ip}:{RPC_PORT}\"\nrpc_secret = \"{secret}\"\n\n\
                 [s3_api]\ns3_region = \"{REGION}\"\napi_bind_addr = \"{ip}:{S3_PORT}\"\n",
                d = dir.display(),
                ip = s3_ip(z),
            );
            let path = dir.join("garage.toml");
            // It holds the RPC secret.
            super::write_secret(&path, config.as_bytes())?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            self.start_objects_node(z).await?;
        }
        let mut ids = Vec::new();
        for z in ZONES {
            let id = wait_node_id(self, z).await?;
            ids.push(id);
        }
        for id in &ids[1..] {
            self.garage(ZONES[0], &["node", "connect", id]).await?;
        }
        for (z, id) in ZONES.iter().zip(&ids) {
            let short = id.split('@').next().unwrap_or_default();
            self.garage(ZONES[0], &["layout", "assign", "-z", z, "-c", "1G", short])
                .await?;
        }
        self.garage(ZONES[0], &["layout", "apply", "--version", "1"])
            .await?;
        self.garage(ZONES[0], &["bucket", "create", BUCKET]).await?;
        let key = self.garage(ZONES[0], &["key", "create", "vfps"]).await?;
        let field = |name: &str| {
            key.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_owned())
                })
                .with_context(|| format!("no {name:?} in Garage's answer"))
        };
        let (id, secret) = (field("Key ID")?, field("Secret key")?);
        self.garage(
            ZONES[0],
            &[
                "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", "vfps",
            ],
        )
        .await?;
        super::write_secret(&self.key_file(), format!("{id}\n{secret}\n").as_bytes())?;
        for z in ZONES {
            self.wait_objects_node(z, Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// Starts one node in its pod.
    pub async fn start_objects_node(&self, zone: &str) -> anyhow::Result<()> {
        let dir = self.objects_dir(zone);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.opts.base.join(format!("garage-{zone}.log")))?;
        let child = tokio::process::Command::new("ip")
            .args(["netns", "exec", &format!("vfps-s3-{zone}")])
            .arg(garage_bin())
            .arg("-c")
            .arg(dir.join("garage.toml"))
            .arg("server")
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start garage")?;
        write_pid(&format!("garage-{zone}"), child.id().unwrap_or_default())?;
        tokio::spawn(async move {
            let mut child = child;
            let _ = child.wait().await;
        });
        Ok(())
    }

    /// SIGKILLs one node; returns once it is gone.
    pub async fn kill_objects_pod(&self, zone: &str) -> anyhow::Result<u32> {
        let pid = read_pid(&pid_file(&format!("garage-{zone}")))
            .with_context(|| format!("no Garage recorded in zone {zone}"))?;
        kill(pid).await?;
        wait_for("Garage to exit", Duration::from_secs(10), || async {
            !alive(pid)
        })
        .await?;
        Ok(pid)
    }

    /// Whether a node's S3 API answers HTTP (any status: it is up).
    pub async fn objects_pod_answers(&self, zone: &str) -> bool {
        crate::platform::net::http_get(
            &format!("{}:{S3_PORT}", s3_ip(zone)),
            "/",
            Duration::from_millis(800),
        )
        .await
        .is_ok()
    }

    /// Waits until a node answers and sees both others (its own view: the
    /// others notice a restarted node only at their next ping).
    pub async fn wait_objects_node(&self, zone: &str, timeout: Duration) -> anyhow::Result<()> {
        wait_for("the object store node to serve", timeout, || async {
            self.objects_pod_answers(zone).await
                && self
                    .garage(zone, &["status"])
                    .await
                    .is_ok_and(|s| !s.contains("Failed nodes") && !s.contains("FAILED"))
        })
        .await
    }

    /// `garage -c <zone's config> ARGS…` inside the zone's pod.
    pub(super) async fn garage(&self, zone: &str, args: &[&str]) -> anyhow::Result<String> {
        let config = self.objects_dir(zone).join("garage.toml");
        let bin = garage_bin();
        let mut all = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            format!("vfps-s3-{zone}"),
            bin.display().to_string(),
            "-c".to_owned(),
            config.display().to_string(),
        ];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        cmd("ip", &all).await
    }
}

/// A node's `<id>@<addr>`, once its RPC answers (`node id` alone only reads
/// the node's key from disk).
async fn wait_node_id(local: &Local, zone: &str) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if local.garage(zone, &["status"]).await.is_ok() {
            if let Ok(out) = local.garage(zone, &["node", "id", "-q"]).await {
                if out.contains('@') {
                    return Ok(out.trim().to_owned());
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the object store node in zone {zone} did not come up in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
