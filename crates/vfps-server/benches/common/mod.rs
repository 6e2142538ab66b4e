//! What the benchmarks share: the real `vfps` binary in a process of its
//! own on free loopback ports, and the CSV job round trip (upload, start,
//! wait).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

pub fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `vfps` process on free loopback ports; killed when dropped.
pub struct Server {
    pub http: String,
    pub grpc: String,
    /// The Prometheus endpoint.
    pub metrics: String,
    pub child: std::process::Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The `vfps` binary of this build, ready.
pub async fn start(env: &[(String, String)]) -> Server {
    spawn_binary(env!("CARGO_BIN_EXE_vfps"), env).await.0
}

/// The `vfps` binary at `binary` on free loopback ports; answers it and the
/// time from spawn until `/readyz` answered 200.
pub async fn spawn_binary(binary: &str, env: &[(String, String)]) -> (Server, Duration) {
    let port = || vfps_testkit::free_port().unwrap().to_string();
    let (http, grpc, metrics) = (port(), port(), port());
    let started = Instant::now();
    let child = std::process::Command::new(binary)
        .args(["serve", "--listen-address", "127.0.0.1"])
        .args(["--http-port", &http, "--grpc-port", &grpc])
        .args(["--metrics-port", &metrics])
        .envs(env.iter().cloned())
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the vfps binary starts");
    let server = Server {
        http: format!("http://127.0.0.1:{http}"),
        grpc: format!("http://127.0.0.1:{grpc}"),
        metrics: format!("http://127.0.0.1:{metrics}/metrics"),
        child,
    };
    let client = reqwest::Client::new();
    loop {
        if let Ok(r) = client.get(format!("{}/readyz", server.http)).send().await {
            if r.status().is_success() {
                return (server, started.elapsed());
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "vfps never became ready"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub async fn post(server: &Server, path: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", server.http))
        .json(&body)
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

pub async fn namespace(server: &Server, name: &str) {
    let r = post(
        server,
        "/v1/namespaces",
        json!({"name": name, "pseudonymGenerationMethod": 5, "pseudonymLength": 32}),
    )
    .await;
    assert_eq!(r["namespace"]["name"], name, "{r}");
}

/// `rows` rows of `id,name,ref,note`: two columns of distinct values to map,
/// and a note of `note_bytes`.
pub fn write_input(path: &Path, rows: u64, note_bytes: usize, distinct_names: u64) {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    out.write_all(b"id,name,ref,note\n").unwrap();
    let note = "x".repeat(note_bytes);
    for i in 0..rows {
        writeln!(out, "{i},name-{},ref-{i},{note}", i % distinct_names).unwrap();
    }
    out.flush().unwrap();
}

/// Uploads `file` as a job mapping `name` and `ref` into `ns`, starts it,
/// and waits for it; answers the finished job.
pub async fn run_job(
    server: &Server,
    file: &Path,
    ns: &str,
    on_progress: impl Fn(&Value),
) -> Value {
    let created = post(
        server,
        "/v1/csv-jobs",
        json!({"columnMappings": [
            {"sourceColumn": "name", "namespace": ns},
            {"sourceColumn": "ref", "namespace": ns}],
         "hasHeaderRow": true}),
    )
    .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let url = created["upload"]["url"].as_str().unwrap();
    let size = std::fs::metadata(file).unwrap().len();
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(
        tokio::fs::File::open(file).await.unwrap(),
        256 * 1024,
    ));
    let r = reqwest::Client::new()
        .put(format!("{}{url}", server.http))
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let started = post(server, &format!("/v1/csv-jobs/{id}:start"), json!({})).await;
    assert!(started["job"]["id"].is_string(), "{started}");
    let client = reqwest::Client::new();
    loop {
        let job: Value = client
            .get(format!("{}/v1/csv-jobs/{id}", server.http))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        on_progress(&job["job"]);
        match job["job"]["state"].as_str().unwrap() {
            "CSV_JOB_STATE_COMPLETED" => return job["job"].clone(),
            "CSV_JOB_STATE_FAILED" | "CSV_JOB_STATE_CANCELLED" => panic!("job ended: {job}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
