//! A real S3-compatible object store for tests: one Garage node (installed by
//! `scripts/install-garage.sh`) in a scratch directory on loopback, with a
//! bucket and a key allowed on it. The node is killed when the [`Garage`] is
//! dropped, and by a watchdog if the test process dies first.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use ring::rand::{SecureRandom, SystemRandom};

use crate::{free_port, scratch_dir};

/// The pinned Garage version `scripts/install-garage.sh` installs.
pub const VERSION: &str = "2.5.0";

/// The region Garage's S3 API is configured with.
pub const REGION: &str = "garage";

/// Where the `garage` binary is: `$VFPS_GARAGE_BIN`, else the pinned install.
pub fn binary() -> PathBuf {
    std::env::var_os("VFPS_GARAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/opt/vfps-chaos/garage-{VERSION}/bin/garage")))
}

/// One running Garage node with a bucket and a key.
pub struct Garage {
    child: Child,
    config: PathBuf,
    s3_port: u16,
    bucket: String,
    access_key: String,
    secret_key: String,
}

impl Garage {
    /// Starts a node, lays it out, makes bucket `vfps` and a key for it.
    /// Panics with what to run when the binary is missing or a step fails.
    pub async fn start() -> Garage {
        let bin = binary();
        assert!(
            bin.exists(),
            "no Garage at {} (run ./scripts/install-garage.sh, or set VFPS_GARAGE_BIN)",
            bin.display()
        );
        let dir = scratch_dir("garage");
        let s3_port = port();
        let config = write_config(&dir, s3_port);
        let log = std::fs::File::create(dir.join("garage.log")).expect("garage.log");
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("garage.log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        watch(child.id(), &dir);
        let mut garage = Garage {
            child,
            config,
            s3_port,
            bucket: "vfps".to_owned(),
            access_key: String::new(),
            secret_key: String::new(),
        };
        let node = garage.until_up(&dir).await;
        let node_id = node.split('@').next().unwrap_or_default().to_owned();
        garage.cli(&["layout", "assign", "-z", "zone-a", "-c", "1G", &node_id]);
        garage.cli(&["layout", "apply", "--version", "1"]);
        garage.cli(&["bucket", "create", "vfps"]);
        let key = garage.cli(&["key", "create", "vfps-tests"]);
        garage.access_key = field(&key, "Key ID");
        garage.secret_key = field(&key, "Secret key");
        garage.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            "vfps",
            "--key",
            "vfps-tests",
        ]);
        garage.until_serving().await;
        garage
    }

    /// The S3 endpoint, `http://127.0.0.1:<port>` (path-style addressing).
    pub fn s3_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    pub fn region(&self) -> &str {
        REGION
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The server's process id (to pause or kill it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `garage -c CONFIG ARGS…` against this node; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("garage {}: {e}", args.join(" ")));
        assert!(
            out.status.success(),
            "garage {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(binary());
        c.arg("-c")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// Waits for the node's RPC to answer; its `<id>@<addr>`. (`node id`
    /// reads the node's key from disk; `status` needs the RPC port.)
    async fn until_up(&mut self, dir: &Path) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "Garage exited ({status}): {}",
                    std::fs::read_to_string(dir.join("garage.log")).unwrap_or_default()
                );
            }
            let answers = self
                .command(&["status"])
                .output()
                .is_ok_and(|o| o.status.success());
            if answers {
                if let Ok(out) = self.command(&["node", "id", "-q"]).output() {
                    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                    if out.status.success() && id.contains('@') {
                        return id;
                    }
                }
            }
            assert!(Instant::now() < deadline, "Garage did not come up in 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the S3 API answers for the bucket (the layout takes a moment).
    async fn until_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = format!("127.0.0.1:{}", self.s3_port);
        loop {
            if s3_answers(&addr, &self.bucket).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Garage's S3 API did not serve in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port for one of the node's listeners.
fn port() -> u16 {
    free_port().expect("a free port on loopback")
}

fn write_config(dir: &Path, s3_port: u16) -> PathBuf {
    let mut secret = [0u8; 32];
    SystemRandom::new().fill(&mut secret).expect("random bytes");
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let (rpc, admin) = (port(), port());
    let config = format!(
        "metadata_dir = \"{meta}\"\n\
         data_dir = \"{data}\"\n\
         db_engine = \"sqlite\"\n\
         replication_factor = 1\n\
         rpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
         rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
         rpc_secret = \"{secret}\"\n\
         \n[s3_api]\n\
         s3_region = \"{REGION}\"\n\
         api_bind_addr = \"127.0.0.1:{s3_port}\"\n\
         \n[admin]\n\
         api_bind_addr = \"127.0.0.1:{admin}\"\n",
        meta = dir.join("meta").display(),
        data = dir.join("data").display(),
    );
    let path = dir.join("garage.toml");
    std::fs::write(&path, config).expect("garage.toml");
    // Garage refuses a configuration (it holds the RPC secret) others can read.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// Kills the node once the test process is gone, however it ended.
fn watch(pid: u32, dir: &Path) {
    let script = format!(
        "while [ -d /proc/{me} ]; do sleep 0.5; done; kill -9 {pid} 2>/dev/null; rm -rf {dir}",
        me = std::process::id(),
        dir = dir.display(),
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// `Name: value` from the CLI's key listing.
fn field(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no {name:?} in Garage's answer: {text}"))
}

/// Whether an unsigned HEAD of the bucket gets an S3 answer (403 is fine: the
/// API is up; a connection error or a 5xx is not).
async fn s3_answers(addr: &str, bucket: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let request = format!("HEAD /{bucket} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .is_some_and(|code| code < 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_listing_is_read_by_field_name() {
        let text = "==== ACCESS KEY INFORMATION ====\nKey ID:              GK31c2\nKey name:            vfps\nSecret key:          b892c0\n";
        assert_eq!(field(text, "Key ID"), "GK31c2");
        assert_eq!(field(text, "Secret key"), "b892c0");
    }

    #[tokio::test]
    #[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
    async fn a_node_serves_its_bucket() {
        let g = Garage::start().await;
        assert!(s3_answers(&format!("127.0.0.1:{}", g.s3_port), g.bucket()).await);
        assert!(g.access_key().starts_with("GK"), "{}", g.access_key());
        assert!(!g.secret_key().is_empty());
    }
}
