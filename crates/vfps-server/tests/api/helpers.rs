//! `spawn_app`: the real server on port 0 against PostgreSQL (a fresh database on
//! the test kit's cluster) or a temporary SQLite file.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest,
};
use vfps_server::config::Flags;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

pub struct TestApp {
    pub http: String,
    pub grpc: String,
    pub metrics: String,
    pub shutdown: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub namespaces: NamespaceServiceClient<Channel>,
    pub pseudonyms: PseudonymServiceClient<Channel>,
    pub http_client: reqwest::Client,
}

pub fn temp_sqlite() -> PathBuf {
    vfps_testkit::scratch_dir("api").join("vfps.sqlite")
}

/// Environment for a server on `backend`, with a few test-friendly settings.
/// Also returns the PostgreSQL database name, for tests that reach into it.
pub fn backend_env(backend: Backend) -> (Vec<(String, String)>, Option<String>) {
    let mut env = vec![
        ("VFPS_METRICS_COUNT_INTERVAL".to_owned(), "100ms".to_owned()),
        ("VFPS_MAX_CALL_DEADLINE".to_owned(), "10s".to_owned()),
    ];
    let mut database = None;
    match backend {
        Backend::Postgres => {
            let db = vfps_testkit::shared()
                .create_database()
                .expect("test database");
            env.push(("ConnectionStrings__PostgreSQL".into(), db.connection_string));
            env.push(("ForceRunDatabaseMigrations".into(), "true".into()));
            database = Some(db.name);
        }
        // On SQLite every test runs with originals sealed at rest (a key
        // file of its own), on PostgreSQL with plain ones: both paths run
        // the whole suite.
        Backend::Sqlite => {
            let sqlite = temp_sqlite();
            let keys = sqlite.with_file_name("vfps.keys");
            vfps_keys::source::FileKey::init(&keys).expect("a key file");
            env.push(("VFPS_SQLITE_PATH".into(), sqlite.display().to_string()));
            env.push(("VFPS_KEYS".into(), format!("file:{}", keys.display())));
        }
    }
    (env, database)
}

/// `env` (made for SQLite) on the PostgreSQL database at `connection_string`.
pub fn on_postgres(env: Vec<(String, String)>, connection_string: &str) -> Vec<(String, String)> {
    env.into_iter()
        .filter(|(k, _)| k != "VFPS_SQLITE_PATH")
        .chain([
            (
                "ConnectionStrings__PostgreSQL".to_owned(),
                connection_string.to_owned(),
            ),
            ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ])
        .collect()
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend_env(backend).0).await
}

pub async fn spawn_app_with(env: Vec<(String, String)>) -> TestApp {
    let app = spawn_app_unready(env).await;
    app.wait_ready().await;
    app
}

/// A server on `env`, not waited for: for tests of its readiness.
pub async fn spawn_app_unready(env: Vec<(String, String)>) -> TestApp {
    let running = vfps_server::startup::spawn(env, Flags::default())
        .await
        .expect("application starts");
    let http = format!("http://{}", running.http_addr);
    let grpc = format!("http://{}", running.grpc_addr);
    let metrics = format!("http://{}", running.metrics_addr);
    let channel = Channel::from_shared(grpc.clone()).unwrap().connect_lazy();
    TestApp {
        http,
        grpc,
        metrics,
        shutdown: running.shutdown,
        handle: running.handle,
        namespaces: NamespaceServiceClient::new(channel.clone()),
        pseudonyms: PseudonymServiceClient::new(channel),
        http_client: reqwest::Client::new(),
    }
}

impl TestApp {
    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = self
                .http_client
                .get(format!("{}/readyz", self.http))
                .send()
                .await
            {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server never became ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates a namespace with the given method and length.
    pub async fn namespace(&self, name: &str, method: i32, length: u32) {
        self.namespaces
            .clone()
            .create(NamespaceServiceCreateRequest {
                name: name.into(),
                pseudonym_generation_method: method,
                pseudonym_length: length,
                ..Default::default()
            })
            .await
            .expect("namespace created");
    }

    pub async fn create(
        &self,
        namespace: &str,
        original: &str,
    ) -> Result<vfps_proto::v1::Pseudonym, tonic::Status> {
        self.pseudonyms
            .clone()
            .create(PseudonymServiceCreateRequest {
                namespace: namespace.into(),
                original_value: original.into(),
            })
            .await
            .map(|r| r.into_inner().pseudonym.expect("pseudonym in response"))
    }

    /// GET on the HTTP port.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http_client
            .get(format!("{}{path}", self.http))
            .send()
            .await
            .unwrap()
    }

    /// GET on the HTTP port, answer as JSON.
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        self.get(path).await.json().await.unwrap()
    }

    /// POST JSON on the HTTP port, answer as JSON.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        self.http_client
            .post(format!("{}{path}", self.http))
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn metrics_text(&self) -> String {
        self.http_client
            .get(format!("{}/metrics", self.metrics))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// A `vfps` server process (the real binary), for multi-process tests.
pub struct ServerProcess {
    pub child: Child,
    pub http: String,
    pub grpc: String,
}

/// What a server process wrote to its log file (nothing without one).
fn log_text(log: Option<&Path>) -> String {
    log.map(|l| std::fs::read_to_string(l).unwrap_or_default())
        .unwrap_or_default()
}

impl ServerProcess {
    pub async fn start(env: &[(String, String)]) -> Self {
        Self::start_with_log(env, None).await
    }

    /// Started with its stderr (every log line) going to the file `log`.
    pub async fn start_logging(env: &[(String, String)], log: &Path) -> Self {
        Self::start_with_log(env, Some(log)).await
    }

    /// A port picked for the process can be taken by someone else before it
    /// binds it (an outgoing connection's source port): a process that exits
    /// before it is ready is started again on fresh ports, a few times.
    async fn start_with_log(env: &[(String, String)], log: Option<&Path>) -> Self {
        let mut exits = Vec::new();
        for _ in 0..3 {
            match Self::try_start(env, log).await {
                Ok(p) => return p,
                Err(status) => exits.push(status),
            }
        }
        panic!(
            "vfps exited before it was ready, each time: {exits:?}\n{}",
            log_text(log)
        );
    }

    /// The process once ready, or its exit status if it exited before.
    async fn try_start(
        env: &[(String, String)],
        log: Option<&Path>,
    ) -> Result<Self, std::process::ExitStatus> {
        let http_port = vfps_testkit::free_port().unwrap();
        let grpc_port = vfps_testkit::free_port().unwrap();
        let metrics_port = vfps_testkit::free_port().unwrap();
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::null(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_vfps"))
            .args(["serve", "--listen-address", "127.0.0.1"])
            .args(["--http-port", &http_port.to_string()])
            .args(["--grpc-port", &grpc_port.to_string()])
            .args(["--metrics-port", &metrics_port.to_string()])
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("vfps binary starts");
        let mut p = Self {
            child,
            http: format!("http://127.0.0.1:{http_port}"),
            grpc: format!("http://127.0.0.1:{grpc_port}"),
        };
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", p.http)).send().await {
                if r.status().is_success() {
                    return Ok(p);
                }
            }
            if let Some(status) = p.child.try_wait().expect("vfps process status") {
                return Err(status);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "vfps process never became ready\n{}",
                log_text(log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
