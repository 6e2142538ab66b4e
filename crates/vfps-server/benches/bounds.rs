//! What the worst requests the bounds allow cost the server in memory: the
//! `vfps` binary on a test PostgreSQL, its resident memory when idle (after a
//! warm-up call) against its peak (`VmHWM`) after each of:
//!
//! - a batch Bundle of 10 `$pseudonymize-multiple` entries with `count`
//!   1000: the most pseudonyms one request may make (10,000);
//! - a batch Bundle of 10 with `count` 0 of those originals: the most one
//!   request may answer;
//! - a batch Bundle and a transaction of 1000 `$pseudonymize` entries, each
//!   original 2 KiB (the longest) and each entry padded to the 4 MiB body
//!   bound;
//! - the request the bounds were made for (300 entries of `count` 1000,
//!   300,000 pseudonyms from a 95 kB body), refused.
//!
//! Each is sent `BENCH_REPEAT` (3) times. Target: peak < 256 MiB over idle.

#![allow(clippy::unwrap_used)]

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

fn mib(k: u64) -> f64 {
    k as f64 / 1024.0
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    http: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn multiple(original: &str, count: i64) -> Value {
    json!({"request": {"method": "POST", "url": "$pseudonymize-multiple"},
           "resource": {"resourceType": "Parameters", "parameter": [
               {"name": "context", "valueIdentifier": {"value": "multi"}},
               {"name": "original", "valueIdentifier": {"value": original}},
               {"name": "count", "valueInteger": count}]}})
}

/// A `$pseudonymize` entry of a 2 KiB original, padded (an ignored
/// `fullUrl`) so that 1000 of them fill the 4 MiB body bound.
fn long(i: usize) -> Value {
    let original = format!("{i:08}{}", "o".repeat(2040));
    json!({"fullUrl": format!("urn:uuid:{}", "f".repeat(1900)),
           "request": {"method": "POST", "url": "$pseudonymize"},
           "resource": {"resourceType": "Parameters", "parameter": [
               {"name": "context", "valueIdentifier": {"value": "single"}},
               {"name": "original", "valueIdentifier": {"value": original}}]}})
}

/// A request's body for one repetition.
type Body = Box<dyn Fn(u64) -> String>;

fn bundle(kind: &str, entries: Vec<Value>) -> String {
    json!({"resourceType": "Bundle", "type": kind, "entry": entries}).to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let repeat = env_or("BENCH_REPEAT", 3);
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let (http_port, grpc_port, metrics_port) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["serve", "--listen-address", "127.0.0.1"])
        .env("ConnectionStrings__PostgreSQL", &db.connection_string)
        .env("ForceRunDatabaseMigrations", "true")
        .env("VFPS_HTTP_PORT", http_port.to_string())
        .env("VFPS_GRPC_PORT", grpc_port.to_string())
        .env("VFPS_METRICS_PORT", metrics_port.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let server = Server {
        child,
        http: format!("http://127.0.0.1:{http_port}"),
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let started = Instant::now();
    while client
        .get(format!("{}/readyz", server.http))
        .send()
        .await
        .map_or(true, |r| !r.status().is_success())
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "vfps did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, multi) in [("single", false), ("multi", true)] {
        let r = client
            .post(format!("{}/v1/namespaces", server.http))
            .json(&json!({"name": name, "pseudonymGenerationMethod": "PSEUDONYM_GENERATION_METHOD_FULL_RANDOM_HEX_ENCODED",
                          "pseudonymLength": 32, "multiPseudonym": multi}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let post = |body: String| {
        let (client, url) = (client.clone(), format!("{}/v1/fhir", server.http));
        async move {
            let r = client
                .post(url)
                .header("content-type", "application/fhir+json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let bytes = r.bytes().await.unwrap().len();
            (status, bytes)
        }
    };
    // Warm-up: a connection, the namespace caches, one small Bundle.
    post(bundle("batch", vec![multiple("warm-up", 1)])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = kib(pid, "VmRSS");
    println!("vfps idle: {:.1} MiB resident", mib(idle));

    let mut cases: Vec<(&str, Body, u16)> = vec![
        (
            "10 x $pseudonymize-multiple count 1000 (10,000 made)",
            Box::new(|r| {
                bundle(
                    "batch",
                    (0..10)
                        .map(|i| multiple(&format!("r{r}-o{i}"), 1000))
                        .collect(),
                )
            }),
            200,
        ),
        (
            "10 x $pseudonymize-multiple count 0 (10,000 answered)",
            Box::new(|r| {
                bundle(
                    "batch",
                    (0..10)
                        .map(|i| multiple(&format!("r{r}-o{i}"), 0))
                        .collect(),
                )
            }),
            200,
        ),
        (
            "batch of 1000 x $pseudonymize, 2 KiB originals, 4 MiB body",
            Box::new(|r| {
                bundle(
                    "batch",
                    (0..1000).map(|i| long(r as usize * 10_000 + i)).collect(),
                )
            }),
            200,
        ),
        (
            "transaction of 1000 x $pseudonymize, 2 KiB originals, 4 MiB body",
            Box::new(|r| {
                bundle(
                    "transaction",
                    (0..1000)
                        .map(|i| long(r as usize * 10_000 + 5000 + i))
                        .collect(),
                )
            }),
            200,
        ),
        (
            "300 x count 1000 (300,000 asked: refused)",
            Box::new(|r| {
                bundle(
                    "batch",
                    (0..300)
                        .map(|i| multiple(&format!("a{r}-{i}"), 1000))
                        .collect(),
                )
            }),
            413,
        ),
    ];
    let mut worst = 0u64;
    for (what, body, expected) in cases.drain(..) {
        // The count-0 case reads what the first made, repetition by
        // repetition; every other repetition makes new originals.
        for round in 0..repeat {
            let body = body(round);
            let sent = body.len();
            let t = Instant::now();
            let (status, answered) = post(body).await;
            assert_eq!(status, expected, "{what}");
            assert!(
                expected != 200 || answered > 1_000_000,
                "{what}: entries failed"
            );
            let hwm = kib(pid, "VmHWM");
            worst = worst.max(hwm);
            println!(
                "{what}: {:.1} MiB sent, {:.1} MiB answered in {:.2} s; peak so far {:.1} MiB, now {:.1} MiB",
                sent as f64 / 1048576.0,
                answered as f64 / 1048576.0,
                t.elapsed().as_secs_f64(),
                mib(hwm),
                mib(kib(pid, "VmRSS")),
            );
        }
    }
    let over = worst.saturating_sub(idle);
    println!(
        "peak {:.1} MiB against idle {:.1} MiB: {:.1} MiB over idle = {:.2}x of the 256 MiB target (target < 1.00)",
        mib(worst),
        mib(idle),
        mib(over),
        mib(over) / 256.0
    );
    drop(server);
}
