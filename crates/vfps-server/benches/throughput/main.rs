//! Throughput benchmark: vfps Create/s over gRPC against PostgreSQL, side by side
//! with `pgbench` running the same single-row upsert with the same number of
//! clients against the same server, in the same run; vfps Get/s against pgbench
//! running the same lookup SELECT; the server's CPU-seconds per 1,000 Creates;
//! Create/s on SQLite; cold start to ready and resident memory under load.
//! The server is the real `vfps` binary in its own process (so its CPU time and
//! memory are its own); pgbench uses prepared statements (its fastest mode).
//!
//! Then, once, at the first concurrency: Creates while a namespace of 500,000
//! pseudonyms is deleted (the other namespace's Create/s during the delete
//! against just before it), and Creates mixed with namespace churn and invalid
//! input (no valid Create may fail).
//!
//! `cargo bench -p vfps-server --bench throughput` (env: `BENCH_CLIENTS`, a
//! comma-separated list of concurrencies, default `1,32,64`; `BENCH_RUNS`,
//! measurements per concurrency, default 3, printed as median and spread; `BENCH_SECONDS`,
//! default 10; `BENCH_BIG_NAMESPACE`, rows of the deleted namespace, default
//! 500000; `BENCH_PHASES`, see [`Phases`]). The PostgreSQL cluster is durable
//! (fsync on, synchronous_commit on), as in production; each phase gets a fresh
//! database and server.
//!
//! `BENCH_PHASES=ab` compares two servers (two builds, or two settings) in
//! turns on one database instead: see [`Ab`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ab;
#[path = "../common/mod.rs"]
mod common;
mod measure;
mod pgbench;
mod row;
mod tracing;
mod under_load;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use ab::{ab, b_over_a, spread_cell};
use common::{env_or, spawn_binary, Server};
use measure::{
    cpu_seconds, histogram, machine_busy_seconds, mean_since, median, memory_mib, percentile,
    CpuMark, CpuSplit, Latencies,
};
use pgbench::{
    batch_upsert, insert_lookup_rows, lookup_key, pgbench, BATCH_CLIENTS, BATCH_ROWS, LOOKUP,
    UPSERT,
};
use row::{budget_per_1000, create_target, gets, measure, CreateTime, Row, GET_TARGET};
use tonic::transport::Channel;
use tracing::{tracing_env, tracing_overhead};
use under_load::{delete_under_load, mixed};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};

/// Which parts of the benchmark run (`BENCH_PHASES`, comma-separated, default
/// all but `ab`): `throughput` (Create and Get against pgbench, SQLite,
/// footprint under load), `tracing`, `delete`, `mixed`; and `ab` (two servers
/// compared in turns, see [`Ab`]).
struct Phases {
    throughput: bool,
    tracing: bool,
    delete: bool,
    mixed: bool,
    ab: bool,
}

impl Phases {
    const DEFAULT: [&str; 4] = ["throughput", "tracing", "delete", "mixed"];
    const KNOWN: [&str; 5] = ["throughput", "tracing", "delete", "mixed", "ab"];

    fn from_env() -> Self {
        let listed = std::env::var("BENCH_PHASES").unwrap_or_else(|_| Self::DEFAULT.join(","));
        let listed: Vec<&str> = listed.split(',').map(str::trim).collect();
        for p in &listed {
            assert!(
                Self::KNOWN.contains(p),
                "BENCH_PHASES: unknown phase {p:?} (known: {})",
                Self::KNOWN.join(", ")
            );
        }
        let on = |p: &str| listed.contains(&p);
        Self {
            throughput: on("throughput"),
            tracing: on("tracing"),
            delete: on("delete"),
            mixed: on("mixed"),
            ab: on("ab"),
        }
    }
}

/// Spawns the `vfps` binary on free loopback ports; answers it and the time
/// from spawn until `/readyz` answered 200.
async fn spawn_ready(env: &[(String, String)]) -> (Server, Duration) {
    spawn_binary(env!("CARGO_BIN_EXE_vfps"), env).await
}

async fn start(env: Vec<(String, String)>) -> Server {
    start_binary(env!("CARGO_BIN_EXE_vfps"), env).await
}

/// [`start`] for the `vfps` binary at `binary`; a namespace `bench` that
/// exists already (another server on the same database made it) is kept.
async fn start_binary(binary: &str, env: Vec<(String, String)>) -> Server {
    let (server, _) = spawn_binary(binary, &env).await;
    let grpc = server.grpc.clone();
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
        let exists = matches!(&r, Err(e) if e.code() == tonic::Code::AlreadyExists);
        if r.is_ok() || exists || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server
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

/// A fresh database on `cluster` and a server on it, with namespace `bench`;
/// `cached`: with the namespace cache.
async fn postgres_server(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    extra_env: Vec<(String, String)>,
) -> (vfps_testkit::TestDatabase, Server) {
    let db = cluster.create_database().unwrap();
    let env = postgres_env(&db, clients, extra_env);
    let server = start(env).await;
    (db, server)
}

/// The environment of a server on `db` sized for `clients`, and `extra_env`.
fn postgres_env(
    db: &vfps_testkit::TestDatabase,
    clients: usize,
    extra_env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "ConnectionStrings__PostgreSQL".into(),
            format!(
                "{};Maximum Pool Size={}",
                db.connection_string,
                clients.clamp(4, 64)
            ),
        ),
        ("ForceRunDatabaseMigrations".into(), "true".into()),
    ];
    env.extend(extra_env);
    env
}

/// The upstream namespace cache switched on for reads too.
fn cached_reads() -> Vec<(String, String)> {
    vec![(
        "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
        "true".into(),
    )]
}

/// The pseudonym value of lookup row `k`: `encode(sha256(k), 'hex')`.
fn hex_sha256(k: &str) -> String {
    use std::fmt::Write;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(k.as_bytes());
    digest.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Cold start to ready on a fresh SQLite file, `runs` times: the median and
/// the slowest.
async fn cold_start(runs: usize) -> (Duration, Duration) {
    let mut times = Vec::new();
    for i in 0..runs {
        let dir = std::env::temp_dir().join(format!("vfps-bench-cold-{}-{i}", std::process::id()));
        let (server, took) = spawn_ready(&[(
            "VFPS_SQLITE_PATH".into(),
            dir.join("cold.sqlite").display().to_string(),
        )])
        .await;
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        times.push(took);
    }
    times.sort_unstable();
    (times[times.len() / 2], times[times.len() - 1])
}

#[tokio::main]
async fn main() {
    let levels: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .unwrap_or_else(|_| "1,32,64".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("BENCH_CLIENTS is a list of integers")
        })
        .collect();
    let seconds = env_or("BENCH_SECONDS", 10);
    let phases = Phases::from_env();
    eprintln!("benchmark: concurrency {levels:?}, {seconds} s per phase; PostgreSQL with fsync and synchronous_commit on");
    eprintln!("cold start to ready (SQLite, fresh file) ...");
    let (cold_median, cold_max) = cold_start(7).await;
    let cluster = vfps_testkit::PgCluster::start_with(
        "fsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n",
    )
    .unwrap();
    let runs = env_or("BENCH_RUNS", 3).max(1) as usize;
    let mut by_level: Vec<Vec<Row>> = Vec::new();
    for clients in levels.iter().filter(|_| phases.throughput) {
        let mut rows = Vec::new();
        for run in 1..=runs {
            eprintln!("[{clients} clients] run {run} of {runs}");
            rows.push(measure(&cluster, *clients, seconds).await);
        }
        by_level.push(rows);
    }
    let first = levels.iter().copied().find(|c| *c > 1).unwrap_or(32);
    let traced = if phases.tracing {
        tracing_overhead(&cluster, first, seconds, runs).await
    } else {
        Vec::new()
    };
    let big = if phases.delete {
        Some(delete_under_load(&cluster, first, env_or("BENCH_BIG_NAMESPACE", 500_000)).await)
    } else {
        None
    };
    let mix = if phases.mixed {
        Some(mixed(&cluster, first, seconds).await)
    } else {
        None
    };
    if phases.ab {
        for clients in &levels {
            let r = ab(&cluster, *clients).await;
            let m = |v: &[[f64; 2]], i: usize| median(v.iter().map(|p| p[i]).collect());
            println!("| clients | call | A calls/s | B calls/s | **B / A** (median, range over {} turns) | A server CPU-s / 1000 | B server CPU-s / 1000 | **B / A** CPU |", r.creates.len());
            println!("|---|---|---|---|---|---|---|---|");
            for (call, rates, cpu) in [
                ("Create", &r.creates, &r.create_cpu),
                ("Get", &r.gets, &r.get_cpu),
            ] {
                println!(
                    "| {clients} | {call} | {:.0} | {:.0} | {} | {:.4} | {:.4} | {} |",
                    m(rates, 0),
                    m(rates, 1),
                    b_over_a(rates),
                    m(cpu, 0),
                    m(cpu, 1),
                    b_over_a(cpu),
                );
            }
            println!();
        }
    }
    if !by_level.is_empty() {
        println!("Medians of {runs} runs; ratios as median (min–max).");
        println!();
        println!("| clients | vfps Create/s (PostgreSQL, gRPC) | pgbench upsert tps | **Create ratio** (target) | server CPU-s / 1000 Creates | vfps Get/s (p50 / p99 ms) | pgbench SELECT tps | **Get ratio** (target {GET_TARGET}) | vfps re-Create/s of existing originals (p50 / p99 ms) | vfps Create/s (SQLite) |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for rows in &by_level {
            let clients = rows[0].clients;
            let m = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
            let spread = |f: fn(&Row) -> f64| spread_cell(rows.iter().map(f).collect(), 2);
            let target = create_target(clients);
            println!(
            "| {clients} | {:.0} (p50 {:.1} / p99 {:.1} ms) | {:.0} | {} (≥ {target}) | {:.3} | {:.0} ({:.2} / {:.2}) | {:.0} | {} | {:.0} ({:.2} / {:.2}) | {:.0} (p50 {:.1} / p99 {:.1} ms) |",
            m(|r| r.vfps_create),
            m(|r| r.create_latency.0),
            m(|r| r.create_latency.1),
            m(|r| r.pgbench_tps),
            spread(|r| r.vfps_create / r.pgbench_tps),
            m(|r| r.create_cpu.server),
            m(|r| r.vfps_get),
            m(|r| r.get_latency.0),
            m(|r| r.get_latency.1),
            m(|r| r.pgbench_select_tps),
            spread(|r| r.vfps_get / r.pgbench_select_tps),
            m(|r| r.vfps_recreate),
            m(|r| r.recreate_latency.0),
            m(|r| r.recreate_latency.1),
            m(|r| r.sqlite_create),
            m(|r| r.sqlite_latency.0),
            m(|r| r.sqlite_latency.1),
        );
        }
        println!();
        println!("Ceilings, in the same runs. gRPC: health Checks/s with the same clients and channels, a call that touches no database. Database alone: at one client pgbench's one-row upsert; at more, the rows/s it inserts in {BATCH_ROWS}-row upserts with {BATCH_CLIENTS} pgbench clients (the coalescer's large batches without gRPC). A Create cannot beat `1 / (1/gRPC + 1/database)`: one caller waits for the two round trips one after the other, many share the two cores between the two costs (an estimate: it assumes each part alone keeps the cores busy). A Get likewise at one client; at more, the gRPC ceiling alone (Gets could be batched, so pgbench's SELECT is no floor). A target above its ceiling ratio is out of reach on this machine whatever the service's own code costs.");
        println!();
        println!("| clients | gRPC health Check/s | database alone | **Create ceiling / pgbench upsert** (target) | vfps Create / its ceiling | **Get ceiling / pgbench SELECT** (target {GET_TARGET}) | vfps Get / its ceiling |");
        println!("|---|---|---|---|---|---|---|");
        for rows in &by_level {
            let clients = rows[0].clients;
            let m = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
            let target = create_target(clients);
            let database = if clients == 1 {
                format!("{:.0} upserts/s, one row each", m(|r| r.pgbench_tps))
            } else {
                format!(
                    "{:.0} rows/s in {BATCH_ROWS}-row upserts",
                    m(|r| r.db_ceiling)
                )
            };
            println!(
                "| {clients} | {:.0} | {database} | **{:.2}** (≥ {target}) | {:.2} | **{:.2}** | {:.2} |",
                m(|r| r.grpc_ceiling),
                m(|r| r.create_ceiling() / r.pgbench_tps),
                m(|r| r.vfps_create / r.create_ceiling()),
                m(|r| r.get_ceiling() / r.pgbench_select_tps),
                m(|r| r.vfps_get / r.get_ceiling()),
            );
        }
        println!();
        println!("Where the cores went: CPU-seconds per 1,000 calls, whole machine (both cores, every process, the kernel), split into the benchmark's gRPC clients, the vfps server and the rest (PostgreSQL, loopback networking); pgbench's figure is the whole machine's too. Rows per statement: the mean batch of the phase.");
        println!();
        println!("| clients | call | machine CPU-s / 1000 | clients | server | rest | rows per statement | pgbench machine CPU-s / 1000 |");
        println!("|---|---|---|---|---|---|---|---|");
        for rows in &by_level {
            let clients = rows[0].clients;
            let m = |f: &dyn Fn(&Row) -> f64| median(rows.iter().map(f).collect());
            for (call, split, batch, pg) in [
                (
                    "Create",
                    &(|r: &Row| r.create_cpu) as &dyn Fn(&Row) -> CpuSplit,
                    &(|r: &Row| r.create_batch) as &dyn Fn(&Row) -> f64,
                    &(|r: &Row| r.pgbench_cpu) as &dyn Fn(&Row) -> f64,
                ),
                (
                    "Get",
                    &|r: &Row| r.get_cpu,
                    &|r: &Row| r.get_batch,
                    &|r: &Row| r.pgbench_select_cpu,
                ),
                (
                    "health Check",
                    &|r: &Row| r.health_cpu,
                    &|_: &Row| f64::NAN,
                    &|_: &Row| f64::NAN,
                ),
            ] {
                println!(
                    "| {clients} | {call} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.3} |",
                    m(&|r| split(r).machine),
                    m(&|r| split(r).bench),
                    m(&|r| split(r).server),
                    m(&|r| split(r).rest()),
                    m(batch),
                    m(pg),
                );
            }
        }
        println!();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        println!("The CPU budget of each target with more than one client: CPU-seconds per 1,000 calls the whole machine may spend to reach it with all {cores} cores busy ({cores} × 1,000 / (target × pgbench's rate)), against the floor a call costs without any of the service's own work: the benchmark's clients and the database's share (the rest) as measured in the phase, and a bare gRPC call's server side (the health Check's). A floor above the budget puts the target out of reach on this machine whatever the service's code costs; otherwise the service's own work must fit in the difference. One client is latency-bound: see the ceilings.");
        println!();
        println!("| clients | call | target | **budget** CPU-s / 1000 | **floor** (clients + bare call's server + database) | vfps today (machine CPU-s / 1000) | left for the service's own work |");
        println!("|---|---|---|---|---|---|---|");
        for rows in by_level.iter().filter(|rows| rows[0].clients > 1) {
            let clients = rows[0].clients;
            let m = |f: &dyn Fn(&Row) -> f64| median(rows.iter().map(f).collect());
            for (call, target, split, baseline) in [
                (
                    "Create",
                    create_target(clients),
                    &(|r: &Row| r.create_cpu) as &dyn Fn(&Row) -> CpuSplit,
                    &(|r: &Row| r.pgbench_tps) as &dyn Fn(&Row) -> f64,
                ),
                ("Get", GET_TARGET, &|r: &Row| r.get_cpu, &|r: &Row| {
                    r.pgbench_select_tps
                }),
            ] {
                let budget = m(&|r| budget_per_1000(cores, target, baseline(r)));
                let floor = m(&|r| {
                    let c = split(r);
                    c.bench + r.health_cpu.server + c.rest()
                });
                let left = if floor > budget {
                    "none: **out of reach** on this machine".to_owned()
                } else {
                    format!("{:.3}", budget - floor)
                };
                println!(
                    "| {clients} | {call} | {target} | {budget:.3} | {floor:.3} | {:.3} | {left} |",
                    m(&|r| split(r).machine),
                );
            }
        }
        println!();
        println!("Where a Create's time went, means in ms: as the client saw it (the gRPC hop both ways and the client's own scheduling included), in the server (request in to response out), waiting in the coalescer's queue for a batch, and the batch statement's round trip (its commit included). Little's law: clients / client time = Create/s.");
        println!();
        println!("| clients | client | server | queue wait | statement | rest of the server's time | gRPC hop and client |");
        println!("|---|---|---|---|---|---|---|");
        for rows in &by_level {
            let clients = rows[0].clients;
            let m = |f: &dyn Fn(&CreateTime) -> f64| {
                median(rows.iter().map(|r| f(&r.create_time)).collect())
            };
            println!(
                "| {clients} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                m(&|t| t.client_ms),
                m(&|t| t.server_ms),
                m(&|t| t.wait_ms),
                m(&|t| t.statement_ms),
                m(&|t| t.server_ms - t.wait_ms - t.statement_ms),
                m(&|t| t.client_ms - t.server_ms),
            );
        }
        println!();
    }
    if !traced.is_empty() {
        let rate = |i: usize| median(traced.iter().map(|t| t.rates[i]).collect());
        let cpu = |i: usize| median(traced.iter().map(|t| t.cpu_per_1000[i]).collect());
        let bench_cpu = |i: usize| median(traced.iter().map(|t| t.bench_cpu_per_1000[i]).collect());
        let ratio =
            |i: usize| spread_cell(traced.iter().map(|t| t.rates[i] / t.rates[0]).collect(), 2);
        println!("| clients | tracing | Create/s | **on / off** | server CPU-s / 1000 Creates | benchmark process (clients, collector) CPU-s / 1000 Creates |");
        println!("|---|---|---|---|---|---|");
        for (i, what) in [
            "off",
            "on, default sampler (every trace exported) (target ≥ 0.90)",
            "on, 10 % of traces",
        ]
        .iter()
        .enumerate()
        {
            let r = if i == 0 { "—".to_owned() } else { ratio(i) };
            println!(
                "| {first} | {what} | {:.0} | {r} | {:.3} | {:.3} |",
                rate(i),
                cpu(i),
                bench_cpu(i)
            );
        }
        println!();
    }
    println!("| footprint | figure | target |");
    println!("|---|---|---|");
    println!(
        "| cold start to ready (SQLite, median / slowest of 7) | {:.1} / {:.1} ms | < 100 ms |",
        cold_median.as_secs_f64() * 1000.0,
        cold_max.as_secs_f64() * 1000.0
    );
    for r in by_level
        .iter()
        .flatten()
        .filter(|r| r.clients == 32)
        .take(1)
    {
        println!(
            "| server RSS after 32-client Creates (now / peak) | {:.1} / {:.1} MiB | < 32 MiB |",
            r.rss.0, r.rss.1
        );
    }
    println!();
    if let Some(big) = big {
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
    }
    if let Some(mix) = mix {
        println!("| clients | Create/s with churn and invalid input | valid Creates failed | churn cycles (create, 50 Creates, delete) | invalid calls | answered with the wrong code |");
        println!("|---|---|---|---|---|---|");
        println!(
            "| {first} | {:.0} | {} | {} | {} | {} |",
            mix.creates, mix.failed_valid, mix.churn_cycles, mix.bad_calls, mix.bad_misanswered
        );
    }
}
