//! Throughput benchmark: vfps Create/s over gRPC against PostgreSQL, side by side
//! with `pgbench` running the same single-row upsert with the same number of
//! clients against the same server, in the same run. Also Get/s with p50/p99 and
//! Create/s on SQLite.
//!
//! Then, once, at the first concurrency: Creates while a namespace of 500,000
//! pseudonyms is deleted (the other namespace's Create/s during the delete
//! against just before it), and Creates mixed with namespace churn and invalid
//! input (no valid Create may fail).
//!
//! `cargo bench -p vfps-server --bench throughput` (env: `BENCH_CLIENTS`, a
//! comma-separated list of concurrencies, default `32,128`; `BENCH_SECONDS`,
//! default 10; `BENCH_BIG_NAMESPACE`, rows of the deleted namespace, default
//! 500000). The PostgreSQL cluster is durable (fsync on, synchronous_commit on),
//! as in production; each phase gets a fresh database and server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};
use vfps_server::config::Flags;

const UPSERT: &str = "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
  VALUES ('bench', gen_random_uuid()::text, md5(random()::text), now(), now())
  ON CONFLICT DO NOTHING;";

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Server {
    grpc: String,
    shutdown: CancellationToken,
}

async fn start(env: Vec<(String, String)>) -> Server {
    let running = vfps_server::startup::spawn(env, Flags::default())
        .await
        .unwrap();
    let grpc = format!("http://{}", running.grpc_addr);
    let shutdown = running.shutdown;
    let mut ns = loop {
        if let Ok(c) = NamespaceServiceClient::connect(grpc.clone()).await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = ns
            .create(NamespaceServiceCreateRequest {
                name: "bench".into(),
                pseudonym_generation_method: 5,
                pseudonym_length: 32,
                ..Default::default()
            })
            .await;
        if r.is_ok() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Server { grpc, shutdown }
}

/// Runs `clients` closed-loop workers for `seconds`; returns (ops, latencies in µs).
async fn drive<F, Fut>(clients: usize, seconds: u64, op: F) -> (u64, Vec<u32>)
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (op, stop, count, latencies) =
            (op.clone(), stop.clone(), count.clone(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                if op(c, i).await {
                    mine.push(started.elapsed().as_micros() as u32);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
            latencies.lock().unwrap().extend(mine);
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let mut l = std::mem::take(&mut *latencies.lock().unwrap());
    l.sort_unstable();
    (count.load(Ordering::Relaxed), l)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn channels(grpc: &str, n: usize) -> Vec<PseudonymServiceClient<Channel>> {
    (0..n)
        .map(|_| {
            PseudonymServiceClient::new(
                Channel::from_shared(grpc.to_owned())
                    .unwrap()
                    .connect_lazy(),
            )
        })
        .collect()
}

async fn creates(
    grpc: &str,
    clients: usize,
    seconds: u64,
    keep: Option<Arc<Mutex<Vec<String>>>>,
) -> (u64, Vec<u32>) {
    let chans = Arc::new(channels(grpc, 4));
    drive(clients, seconds, move |c, _| {
        let mut client = chans[c % chans.len()].clone();
        let keep = keep.clone();
        async move {
            match client
                .create(PseudonymServiceCreateRequest {
                    namespace: "bench".into(),
                    original_value: uuid::Uuid::new_v4().to_string(),
                })
                .await
            {
                Ok(r) => {
                    if let Some(keep) = keep {
                        let mut k = keep.lock().unwrap();
                        if k.len() < 200_000 {
                            k.push(r.into_inner().pseudonym.unwrap().pseudonym_value);
                        }
                    }
                    true
                }
                Err(_) => false,
            }
        }
    })
    .await
}

fn pgbench(
    cluster: &vfps_testkit::PgCluster,
    db: &vfps_testkit::TestDatabase,
    clients: usize,
    seconds: u64,
) -> f64 {
    let script = std::env::temp_dir().join(format!("vfps-bench-{}.sql", std::process::id()));
    std::fs::write(&script, UPSERT).unwrap();
    let out = std::process::Command::new(cluster.bindir().join("pgbench"))
        .args([
            "-n",
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port().to_string(),
            "-U",
            &db.name,
        ])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &seconds.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg(&db.name)
        .env("PGPASSWORD", "pw")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .expect("pgbench printed tps")
}

/// One row of results at one concurrency.
struct Row {
    clients: usize,
    vfps_create: f64,
    create_latency: (f64, f64),
    pgbench_tps: f64,
    vfps_get: f64,
    get_latency: (f64, f64),
    sqlite_create: f64,
    sqlite_latency: (f64, f64),
}

/// A fresh database on `cluster` and a server on it, with namespace `bench`;
/// `cached`: with the namespace cache.
async fn postgres_server(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    cached: bool,
) -> (vfps_testkit::TestDatabase, Server) {
    let db = cluster.create_database().unwrap();
    let server = start(vec![
        (
            "ConnectionStrings__PostgreSQL".into(),
            format!(
                "{};Maximum Pool Size={}",
                db.connection_string,
                clients.clamp(4, 64)
            ),
        ),
        ("ForceRunDatabaseMigrations".into(), "true".into()),
        (
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            cached.to_string(),
        ),
    ])
    .await;
    (db, server)
}

/// Creates of fresh originals into `bench` by `clients` workers until `stop`;
/// returns when each succeeded, and how many valid Creates failed.
async fn timed_creates(grpc: &str, clients: usize, stop: Arc<AtomicBool>) -> (Vec<Instant>, u64) {
    let chans = channels(grpc, 4);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (mut client, stop) = (chans[c % chans.len()].clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut failed) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                let r = client
                    .create(PseudonymServiceCreateRequest {
                        namespace: "bench".into(),
                        original_value: uuid::Uuid::new_v4().to_string(),
                    })
                    .await;
                match r {
                    Ok(_) => done.push(Instant::now()),
                    Err(_) => failed += 1,
                }
            }
            (done, failed)
        }));
    }
    let (mut done, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (d, f) = t.await.unwrap();
        done.extend(d);
        failed += f;
    }
    done.sort_unstable();
    (done, failed)
}

fn rate_between(done: &[Instant], from: Instant, to: Instant) -> f64 {
    let n = done.iter().filter(|t| **t >= from && **t < to).count();
    n as f64 / (to - from).as_secs_f64()
}

/// Creates into `bench` while a namespace of `rows` pseudonyms is deleted.
struct DeleteUnderLoad {
    rows: u64,
    delete: Duration,
    before: f64,
    during: f64,
    failed: u64,
}

async fn delete_under_load(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    rows: u64,
) -> DeleteUnderLoad {
    // Without caches: with them the delete's answer also waits the cache lease,
    // which would stretch the window measured.
    let (db, server) = postgres_server(cluster, clients, false).await;
    let mut ns = NamespaceServiceClient::connect(server.grpc.clone())
        .await
        .unwrap();
    ns.create(NamespaceServiceCreateRequest {
        name: "big".into(),
        pseudonym_generation_method: 5,
        pseudonym_length: 32,
        ..Default::default()
    })
    .await
    .unwrap();
    eprintln!("[{clients} clients] filling namespace big with {rows} pseudonyms ...");
    cluster
        .psql(
            &db.name,
            &format!(
                "INSERT INTO pseudonyms SELECT 'big', 'o' || g, md5(g::text), now(), now() \
                 FROM generate_series(1, {rows}) g"
            ),
        )
        .unwrap();
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] Creates into bench while big is deleted ...");
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move { timed_creates(&grpc, clients, stop).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    ns.delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name: "big".into() })
        .await
        .unwrap();
    let ended = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, failed) = load.await.unwrap();
    server.shutdown.cancel();
    let left = cluster
        .psql(
            &db.name,
            "SELECT count(*) FROM pseudonyms WHERE namespace = 'big'",
        )
        .unwrap();
    assert_eq!(left.trim(), "0", "orphans of the deleted namespace");
    let window = (ended - started).max(Duration::from_millis(100));
    DeleteUnderLoad {
        rows,
        delete: ended - started,
        before: rate_between(&done, started - Duration::from_secs(2), started),
        during: rate_between(&done, started, started + window),
        failed,
    }
}

/// Creates mixed with namespace churn (side namespaces created, filled and
/// deleted) and invalid input (NUL characters, unknown namespaces, malformed
/// page tokens).
struct Mixed {
    creates: f64,
    failed_valid: u64,
    churn_cycles: u64,
    bad_calls: u64,
    bad_misanswered: u64,
}

async fn mixed(cluster: &vfps_testkit::PgCluster, clients: usize, seconds: u64) -> Mixed {
    let (_db, server) = postgres_server(cluster, clients, true).await;
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] Creates with namespace churn and invalid input ...");
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move { timed_creates(&grpc, clients, stop).await }
    });
    let churn = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move {
            let channel = Channel::from_shared(grpc).unwrap().connect_lazy();
            let mut ns = NamespaceServiceClient::new(channel.clone());
            let mut ps = PseudonymServiceClient::new(channel);
            let mut cycles = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("side-{cycles}");
                ns.create(NamespaceServiceCreateRequest {
                    name: name.clone(),
                    pseudonym_generation_method: 3,
                    pseudonym_length: 36,
                    ..Default::default()
                })
                .await
                .unwrap();
                for i in 0..50 {
                    ps.create(PseudonymServiceCreateRequest {
                        namespace: name.clone(),
                        original_value: format!("s{i}"),
                    })
                    .await
                    .unwrap();
                }
                ns.delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name })
                    .await
                    .unwrap();
                cycles += 1;
            }
            cycles
        }
    });
    let bad = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move {
            let mut ps =
                PseudonymServiceClient::new(Channel::from_shared(grpc).unwrap().connect_lazy());
            let (mut calls, mut misanswered) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let nul = ps
                    .create(PseudonymServiceCreateRequest {
                        namespace: "bench".into(),
                        original_value: format!("bad\u{0}{calls}"),
                    })
                    .await;
                let unknown = ps
                    .create(PseudonymServiceCreateRequest {
                        namespace: "no-such-namespace".into(),
                        original_value: "x".into(),
                    })
                    .await;
                let token = ps
                    .list(vfps_proto::v1::PseudonymServiceListRequest {
                        namespace: "bench".into(),
                        page_size: 5,
                        page_token: "not a token".into(),
                        include_total_size: false,
                    })
                    .await;
                for (r, want) in [
                    (nul.err().map(|e| e.code()), tonic::Code::InvalidArgument),
                    (unknown.err().map(|e| e.code()), tonic::Code::NotFound),
                    (token.err().map(|e| e.code()), tonic::Code::InvalidArgument),
                ] {
                    calls += 1;
                    if r != Some(want) {
                        misanswered += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (calls, misanswered)
        }
    });
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, failed_valid) = load.await.unwrap();
    let churn_cycles = churn.await.unwrap();
    let (bad_calls, bad_misanswered) = bad.await.unwrap();
    server.shutdown.cancel();
    Mixed {
        creates: done.len() as f64 / seconds as f64,
        failed_valid,
        churn_cycles,
        bad_calls,
        bad_misanswered,
    }
}

async fn measure(cluster: &vfps_testkit::PgCluster, clients: usize, seconds: u64) -> Row {
    let (db, server) = postgres_server(cluster, clients, true).await;

    eprintln!("[{clients} clients] warming up ...");
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] vfps Create (PostgreSQL) ...");
    let kept = Arc::new(Mutex::new(Vec::new()));
    let (n, lat) = creates(&server.grpc, clients, seconds, Some(kept.clone())).await;

    eprintln!("[{clients} clients] pgbench, same upsert, same clients ...");
    let pgbench_tps = pgbench(cluster, &db, clients, seconds);

    eprintln!("[{clients} clients] vfps Get (PostgreSQL) ...");
    let kept = Arc::new(std::mem::take(&mut *kept.lock().unwrap()));
    let chans = Arc::new(channels(&server.grpc, 4));
    let (g, glat) = drive(clients, seconds, move |c, i| {
        let mut client = chans[c % chans.len()].clone();
        let value = kept[((c as u64 * 7919 + i * 104_729) % kept.len() as u64) as usize].clone();
        async move {
            client
                .get(PseudonymServiceGetRequest {
                    namespace: "bench".into(),
                    pseudonym_value: value,
                })
                .await
                .is_ok()
        }
    })
    .await;
    server.shutdown.cancel();

    eprintln!("[{clients} clients] vfps Create (SQLite) ...");
    let dir = std::env::temp_dir().join(format!(
        "vfps-bench-sqlite-{}-{clients}",
        std::process::id()
    ));
    let sqlite = start(vec![
        (
            "VFPS_SQLITE_PATH".into(),
            dir.join("bench.sqlite").display().to_string(),
        ),
        (
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into(),
        ),
    ])
    .await;
    let (s, slat) = creates(&sqlite.grpc, clients, seconds, None).await;
    sqlite.shutdown.cancel();
    let _ = std::fs::remove_dir_all(&dir);

    let per_second = |n: u64| n as f64 / seconds as f64;
    Row {
        clients,
        vfps_create: per_second(n),
        create_latency: (percentile(&lat, 0.5), percentile(&lat, 0.99)),
        pgbench_tps,
        vfps_get: per_second(g),
        get_latency: (percentile(&glat, 0.5), percentile(&glat, 0.99)),
        sqlite_create: per_second(s),
        sqlite_latency: (percentile(&slat, 0.5), percentile(&slat, 0.99)),
    }
}

#[tokio::main]
async fn main() {
    let levels: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .unwrap_or_else(|_| "32,128".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("BENCH_CLIENTS is a list of integers")
        })
        .collect();
    let seconds = env_or("BENCH_SECONDS", 10);
    eprintln!("benchmark: concurrency {levels:?}, {seconds} s per phase; PostgreSQL with fsync and synchronous_commit on");
    let cluster = vfps_testkit::PgCluster::start_with(
        "fsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n",
    )
    .unwrap();
    let mut rows = Vec::new();
    for clients in &levels {
        rows.push(measure(&cluster, *clients, seconds).await);
    }
    let first = levels.first().copied().unwrap_or(32);
    let big = delete_under_load(&cluster, first, env_or("BENCH_BIG_NAMESPACE", 500_000)).await;
    let mix = mixed(&cluster, first, seconds).await;
    println!("| clients | vfps Create/s (PostgreSQL, gRPC) | pgbench upsert tps | **ratio** | vfps Get/s (p50 / p99 ms) | vfps Create/s (SQLite) |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.0} (p50 {:.1} / p99 {:.1} ms) | {:.0} | **{:.2}** | {:.0} ({:.2} / {:.2}) | {:.0} (p50 {:.1} / p99 {:.1} ms) |",
            r.clients,
            r.vfps_create,
            r.create_latency.0,
            r.create_latency.1,
            r.pgbench_tps,
            r.vfps_create / r.pgbench_tps,
            r.vfps_get,
            r.get_latency.0,
            r.get_latency.1,
            r.sqlite_create,
            r.sqlite_latency.0,
            r.sqlite_latency.1,
        );
    }
    println!();
    println!("| clients | deleted namespace | delete took | other namespace's Create/s before | during | **during / before** | failed Creates |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {first} | {} pseudonyms | {:.2} s | {:.0} | {:.0} | **{:.2}** | {} |",
        big.rows,
        big.delete.as_secs_f64(),
        big.before,
        big.during,
        big.during / big.before,
        big.failed
    );
    println!();
    println!("| clients | Create/s with churn and invalid input | valid Creates failed | churn cycles (create, 50 Creates, delete) | invalid calls | answered with the wrong code |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {first} | {:.0} | {} | {} | {} | {} |",
        mix.creates, mix.failed_valid, mix.churn_cycles, mix.bad_calls, mix.bad_misanswered
    );
}
