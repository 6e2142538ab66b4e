//! What the MII FHIR interface costs against the gRPC API it stands beside,
//! one run, one PostgreSQL (fsync and synchronous commit on), one server:
//!
//! - a batch Bundle of `BENCH_BATCH` (1000) `$pseudonymize` entries against
//!   as many concurrent gRPC Creates: originals per second, as a ratio (target
//!   ≥ 0.8: a Bundle's entries run together through the coalesced writes);
//! - `$de-pseudonymize` per second against gRPC Get, `BENCH_CLIENTS` (16)
//!   closed-loop clients for `BENCH_SECONDS` (5);
//! - an erasure's latency (`$anonymize-original`) against a Create's, one at a
//!   time, median of `BENCH_ERASURES` (20). With caches on (as here, and as
//!   the chart runs) an erasure waits the cache lease (1 s) before its answer,
//!   so that no replica can answer the erased mapping afterwards.
//!
//! Each batch round alternates which goes first; the figure is the median of
//! `BENCH_ROUNDS` (5).

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use tonic::transport::Channel;
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};
use vfps_server::config::Flags;

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn parameters(namespace: &str, name: &str, value: &str) -> Value {
    json!({"resourceType": "Parameters", "parameter": [
        {"name": "context", "valueIdentifier": {"value": namespace}},
        {"name": name, "valueIdentifier": {"value": value}},
    ]})
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Bench {
    grpc: PseudonymServiceClient<Channel>,
    http: reqwest::Client,
    base: String,
    next: AtomicU64,
}

impl Bench {
    fn original(&self) -> String {
        format!("subject-{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Originals per second: `n` concurrent gRPC Creates.
    async fn grpc_creates(&self, n: usize) -> f64 {
        let started = Instant::now();
        let calls = (0..n).map(|_| {
            let mut c = self.grpc.clone();
            let original = self.original();
            async move {
                c.create(PseudonymServiceCreateRequest {
                    namespace: "bench".into(),
                    original_value: original,
                })
                .await
                .unwrap();
            }
        });
        futures::future::join_all(calls).await;
        n as f64 / started.elapsed().as_secs_f64()
    }

    /// Originals per second: one batch Bundle of `n` `$pseudonymize` entries.
    async fn bundle(&self, n: usize) -> f64 {
        let entries: Vec<Value> = (0..n)
            .map(|_| {
                json!({
                    "request": {"method": "POST", "url": "$pseudonymize"},
                    "resource": parameters("bench", "original", &self.original()),
                })
            })
            .collect();
        let body = json!({"resourceType": "Bundle", "type": "batch", "entry": entries});
        let started = Instant::now();
        let answer: Value = self
            .http
            .post(format!("{}/v1/fhir", self.base))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let ok = answer["entry"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["response"]["status"] == "201 Created")
            .count();
        assert_eq!(ok, n, "every entry answered");
        n as f64 / elapsed.as_secs_f64()
    }
}

/// Calls per second of `clients` closed-loop clients running `call` for `seconds`.
async fn closed_loop<F, Fut>(clients: usize, seconds: u64, call: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|k| {
            let (stop, done, call) = (stop.clone(), done.clone(), call.clone());
            tokio::spawn(async move {
                let mut i = k;
                while !stop.load(Ordering::Relaxed) {
                    call(i).await;
                    i += clients;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / seconds as f64
}

#[tokio::main]
async fn main() {
    let batch = env_or("BENCH_BATCH", 1000) as usize;
    let rounds = env_or("BENCH_ROUNDS", 5) as usize;
    let clients = env_or("BENCH_CLIENTS", 16) as usize;
    let seconds = env_or("BENCH_SECONDS", 5);
    let erasures = env_or("BENCH_ERASURES", 20) as usize;
    eprintln!("benchmark: FHIR batch of {batch} vs {batch} gRPC Creates ({rounds} rounds); $de-pseudonymize vs Get ({clients} clients, {seconds} s); {erasures} erasures vs Creates");
    let cluster = vfps_testkit::PgCluster::start_with(
        "fsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n",
    )
    .unwrap();
    let db = cluster.create_database().unwrap();
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            format!("{};Maximum Pool Size=32", db.connection_string),
        ),
        ("ForceRunDatabaseMigrations".into(), "true".into()),
        (
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into(),
        ),
    ];
    let running = vfps_server::startup::spawn(env, Flags::default())
        .await
        .unwrap();
    let grpc_url = format!("http://{}", running.grpc_addr);
    let channel = Channel::from_shared(grpc_url).unwrap().connect_lazy();
    NamespaceServiceClient::new(channel.clone())
        .create(NamespaceServiceCreateRequest {
            name: "bench".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 32,
            ..Default::default()
        })
        .await
        .unwrap();
    let bench = Arc::new(Bench {
        grpc: PseudonymServiceClient::new(channel),
        http: reqwest::Client::new(),
        base: format!("http://{}", running.http_addr),
        next: AtomicU64::new(0),
    });

    // Warm-up: connections, prepared statements, the namespace cache.
    bench.grpc_creates(batch).await;
    bench.bundle(batch).await;
    let (mut grpc_rates, mut bundle_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        eprintln!("round {}/{rounds} ...", round + 1);
        if round % 2 == 0 {
            grpc_rates.push(bench.grpc_creates(batch).await);
            bundle_rates.push(bench.bundle(batch).await);
        } else {
            bundle_rates.push(bench.bundle(batch).await);
            grpc_rates.push(bench.grpc_creates(batch).await);
        }
    }
    let (grpc_rate, bundle_rate) = (median(&mut grpc_rates), median(&mut bundle_rates));

    // Reverse lookups of pseudonyms made for the purpose.
    let known: Arc<Vec<String>> = Arc::new({
        let mut v = Vec::new();
        for i in 0..200 {
            let p = bench
                .grpc
                .clone()
                .create(PseudonymServiceCreateRequest {
                    namespace: "bench".into(),
                    original_value: format!("known-{i}"),
                })
                .await
                .unwrap()
                .into_inner()
                .pseudonym
                .unwrap()
                .pseudonym_value;
            v.push(p);
        }
        v
    });
    eprintln!("gRPC Get ...");
    let (b, k) = (bench.clone(), known.clone());
    let get_rate = closed_loop(clients, seconds, move |i| {
        let (mut c, p) = (b.grpc.clone(), k[i % k.len()].clone());
        async move {
            c.get(PseudonymServiceGetRequest {
                namespace: "bench".into(),
                pseudonym_value: p,
            })
            .await
            .unwrap();
        }
    })
    .await;
    eprintln!("FHIR $de-pseudonymize ...");
    let (b, k) = (bench.clone(), known.clone());
    let depseudonymize_rate = closed_loop(clients, seconds, move |i| {
        let (b, p) = (b.clone(), k[i % k.len()].clone());
        async move {
            let r = b
                .http
                .post(format!("{}/v1/fhir/$de-pseudonymize", b.base))
                .json(&parameters("bench", "pseudonym", &p))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        }
    })
    .await;

    eprintln!("erasures and Creates, one at a time ...");
    let (mut create_ms, mut erase_ms) = (Vec::new(), Vec::new());
    for i in 0..erasures {
        let original = format!("erased-{i}");
        let started = Instant::now();
        bench
            .grpc
            .clone()
            .create(PseudonymServiceCreateRequest {
                namespace: "bench".into(),
                original_value: original.clone(),
            })
            .await
            .unwrap();
        create_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        let r = bench
            .http
            .post(format!("{}/v1/fhir/$anonymize-original", bench.base))
            .json(&parameters("bench", "original", &original))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        erase_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let (create_p50, erase_p50) = (median(&mut create_ms), median(&mut erase_ms));

    println!("batch Bundle of {batch} $pseudonymize: {bundle_rate:.0} originals/s; {batch} concurrent gRPC Creates: {grpc_rate:.0}/s");
    println!(
        "  Bundle / gRPC = {:.2}x (target >= 0.8)",
        bundle_rate / grpc_rate
    );
    println!("$de-pseudonymize: {depseudonymize_rate:.0}/s; gRPC Get: {get_rate:.0}/s");
    println!(
        "  $de-pseudonymize / Get = {:.2}x",
        depseudonymize_rate / get_rate
    );
    println!("erasure ($anonymize-original) p50 {erase_p50:.1} ms; Create p50 {create_p50:.1} ms");
    println!(
        "  erasure / Create = {:.1}x (the erasure waits the 1 s cache lease)",
        erase_p50 / create_p50
    );
    running.shutdown.cancel();
}
