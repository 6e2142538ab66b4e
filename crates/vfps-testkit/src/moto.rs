//! moto's AWS (KMS and STS) on a loopback port: the stand-in for AWS behind
//! the real client code (`scripts/install-deps.sh` installs it, pinned, in
//! `VFPS_MOTO_DIR`, default `/opt/vfps-chaos/moto`). moto does not check
//! signatures; the signing is tested against AWS's vectors.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The credentials moto takes (any).
pub const ACCESS_KEY: &str = "AKIAMOTOTEST";
pub const SECRET_KEY: &str = "moto-test-secret";
pub const REGION: &str = "eu-central-1";

/// A moto server, ended when dropped.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    python: PathBuf,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Starts moto and waits until it answers.
    pub fn start() -> Self {
        let dir = std::env::var("VFPS_MOTO_DIR").unwrap_or_else(|_| "/opt/vfps-chaos/moto".into());
        let python = PathBuf::from(dir).join("bin/python");
        assert!(
            python.exists(),
            "moto is not installed ({} is missing): scripts/install-deps.sh installs it",
            python.display()
        );
        let port = crate::free_port().expect("a free port");
        let child = Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto starts");
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            python,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto never listened"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Runs `script` (Python, with `boto3` and `endpoint` defined) against
    /// this moto; its standard output.
    fn boto(&self, script: &str) -> String {
        let out = Command::new(&self.python)
            .args([
                "-c",
                &format!("import boto3\nendpoint = {:?}\n{script}", self.endpoint),
            ])
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_DEFAULT_REGION", REGION)
            .output()
            .expect("python runs");
        assert!(out.status.success(), "boto3 against moto: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A new symmetric KMS key: its ARN.
    pub fn kms_key(&self) -> String {
        self.boto(
            "kms = boto3.client('kms', endpoint_url=endpoint)\n\
             print(kms.create_key(KeySpec='SYMMETRIC_DEFAULT')['KeyMetadata']['Arn'])",
        )
    }

    /// The environment a client of this moto needs (static credentials).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_ENDPOINT_URL_KMS", self.endpoint.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }
}
