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

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{spawn_binary, Server};
use tonic::transport::Channel;
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};

const UPSERT: &str = "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
  VALUES ('bench', gen_random_uuid()::text, md5(random()::text), now(), now())
  ON CONFLICT DO NOTHING;";

/// Rows per statement and clients of the database's own ceiling: the same
/// rows inserted as vfps's coalescer would at its largest, with pgbench's cheap
/// client in place of gRPC.
const BATCH_ROWS: usize = 32;
const BATCH_CLIENTS: usize = 8;

/// [`UPSERT`] with [`BATCH_ROWS`] rows per statement.
fn batch_upsert() -> String {
    format!(
        "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
  SELECT 'bench', gen_random_uuid()::text, md5(random()::text), now(), now()
  FROM generate_series(1, {BATCH_ROWS}) ORDER BY 2
  ON CONFLICT DO NOTHING;"
    )
}

/// Rows `lookup-1` … `lookup-N` that Get and pgbench's SELECT look up, with the
/// pseudonym value `sha256(k)` in hex, computable on both sides.
const LOOKUP_ROWS: u64 = 100_000;

/// The lookup row (`1..=LOOKUP_ROWS`) client `c` reads on its `i`-th call:
/// spread over the rows, different per client.
fn lookup_key(c: usize, i: u64) -> u64 {
    (c as u64 * 7919 + i * 104_729) % LOOKUP_ROWS + 1
}

/// The lookup SELECT of a Get, as pgbench runs it.
const LOOKUP: &str = "\\set k random(1, 100000)
SELECT namespace, original_value, pseudonym_value, created_at, last_updated_at
  FROM pseudonyms WHERE namespace = 'bench' AND pseudonym_value = encode(sha256(:k::text::bytea), 'hex');";

/// Targets of the performance issue, printed next to each ratio.
const CREATE_TARGET_ONE: f64 = 0.85;
const CREATE_TARGET_MANY: f64 = 2.0;
const GET_TARGET: f64 = 1.5;

/// The Create target at `clients`.
fn create_target(clients: usize) -> f64 {
    if clients == 1 {
        CREATE_TARGET_ONE
    } else {
        CREATE_TARGET_MANY
    }
}

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

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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

/// User plus system CPU time of process `pid` so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
}

/// CPU-seconds spent so far by the benchmark process, the server and the whole
/// machine (every core, every process, the kernel): marks around a phase split
/// its cost between the clients, the server and everything else (PostgreSQL,
/// the kernel's loopback traffic).
#[derive(Clone, Copy)]
struct CpuMark {
    bench: f64,
    server: f64,
    machine: f64,
}

impl CpuMark {
    fn now(server: u32) -> Self {
        Self {
            bench: cpu_seconds(std::process::id()),
            server: cpu_seconds(server),
            machine: machine_busy_seconds(),
        }
    }

    /// CPU-seconds per 1,000 of `calls` since `self`.
    fn per_1000(self, server: u32, calls: u64) -> CpuSplit {
        let now = Self::now(server);
        let k = calls.max(1) as f64 / 1000.0;
        CpuSplit {
            bench: (now.bench - self.bench) / k,
            server: (now.server - self.server) / k,
            machine: (now.machine - self.machine) / k,
        }
    }
}

/// CPU-seconds per 1,000 calls of one phase.
#[derive(Clone, Copy, Default)]
struct CpuSplit {
    bench: f64,
    server: f64,
    machine: f64,
}

impl CpuSplit {
    /// Neither the benchmark nor the server: PostgreSQL, loopback networking.
    fn rest(&self) -> f64 {
        self.machine - self.bench - self.server
    }
}

/// Busy CPU time of all cores since boot (`/proc/stat`: everything but idle
/// and I/O wait).
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is within user).
    let busy: f64 = ticks.iter().take(8).sum::<f64>() - ticks[3] - ticks[4];
    busy / clock_ticks()
}

/// Sum and count of a histogram on the server's `/metrics`: `name`, with
/// labels, the series whose labels contain `labels` summed.
async fn histogram(server: &Server, name: &str) -> (f64, f64) {
    let text = reqwest::get(&server.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (name, labels) = name.split_once('{').unwrap_or((name, ""));
    let labels = labels.trim_end_matches('}');
    let value = |suffix: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("{name}_{suffix}")))
            .filter(|l| l.starts_with(' ') || (l.starts_with('{') && l.contains(labels)))
            .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
            .sum()
    };
    (value("sum"), value("count"))
}

/// Mean of the histogram `name`'s observations between `before` and now.
async fn mean_since(server: &Server, name: &str, before: (f64, f64)) -> f64 {
    let (sum, count) = histogram(server, name).await;
    (sum - before.0) / (count - before.1)
}

/// Means of a phase's latency histograms, in ms: the server's time per call
/// (from its request to its response, as the server sees them), and of the
/// coalescer's queue wait and statement round trip (Creates only).
struct Latencies {
    names: [&'static str; 3],
    before: [(f64, f64); 3],
}

impl Latencies {
    const CREATE: [&'static str; 3] = [
        "vfps_request_duration_seconds{method=\"PseudonymService/Create\"}",
        "vfps_create_queue_wait_seconds",
        "vfps_create_batch_round_trip_seconds",
    ];

    async fn start(server: &Server, names: [&'static str; 3]) -> Self {
        let mut before = [(0.0, 0.0); 3];
        for (b, n) in before.iter_mut().zip(names) {
            *b = histogram(server, n).await;
        }
        Self { names, before }
    }

    /// Means since the start, ms.
    async fn means(&self, server: &Server) -> [f64; 3] {
        let mut means = [0.0; 3];
        for ((m, n), b) in means.iter_mut().zip(self.names).zip(self.before) {
            *m = mean_since(server, n, b).await * 1000.0;
        }
        means
    }
}

/// Clock ticks per second of `/proc`'s CPU times, asked once (not a process
/// spawned inside every measurement).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `/proc/<pid>/status` memory line (`VmRSS`, `VmHWM`) in MiB.
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
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

/// pgbench's tps for `sql` with `clients` clients, prepared statements.
fn pgbench(
    cluster: &vfps_testkit::PgCluster,
    db: &vfps_testkit::TestDatabase,
    sql: &str,
    clients: usize,
    seconds: u64,
) -> f64 {
    let script = std::env::temp_dir().join(format!("vfps-bench-{}.sql", std::process::id()));
    std::fs::write(&script, sql).unwrap();
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
            if clients > 1 { "2" } else { "1" },
            "-M",
            "prepared",
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

/// Where a Create's time went, means in ms: as its client saw it, in the
/// server, waiting in the coalescer's queue, and the batch statement's round
/// trip (its commit included).
#[derive(Clone, Copy)]
struct CreateTime {
    client_ms: f64,
    server_ms: f64,
    wait_ms: f64,
    statement_ms: f64,
}

/// One row of results at one concurrency.
struct Row {
    clients: usize,
    vfps_create: f64,
    create_latency: (f64, f64),
    pgbench_tps: f64,
    /// CPU-seconds per 1,000 Creates: clients, server, whole machine.
    create_cpu: CpuSplit,
    /// Mean rows per upsert statement.
    create_batch: f64,
    create_time: CreateTime,
    /// Whole-machine CPU-seconds per 1,000 pgbench upserts.
    pgbench_cpu: f64,
    get_cpu: CpuSplit,
    get_batch: f64,
    pgbench_select_cpu: f64,
    /// CPU-seconds per 1,000 health Checks.
    health_cpu: CpuSplit,
    /// gRPC health Checks/s with the same clients and channels: a call that
    /// touches no database, the most calls/s this client and server pair can
    /// make on this machine whatever the database does.
    grpc_ceiling: f64,
    /// Rows/s of [`batch_upsert`] from pgbench with [`BATCH_CLIENTS`] clients:
    /// what the database alone can insert, batched, on this machine.
    db_ceiling: f64,
    /// Server resident memory after the Create phase, and its peak, MiB.
    rss: (f64, f64),
    vfps_get: f64,
    get_latency: (f64, f64),
    pgbench_select_tps: f64,
    /// Creates of originals that already have a pseudonym (the lookup rows).
    vfps_recreate: f64,
    recreate_latency: (f64, f64),
    sqlite_create: f64,
    sqlite_latency: (f64, f64),
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
    let (db, server) = postgres_server(cluster, clients, Vec::new()).await;
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
    drop(server);
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
    let (_db, server) = postgres_server(cluster, clients, cached_reads()).await;
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
    drop(server);
    Mixed {
        creates: done.len() as f64 / seconds as f64,
        failed_valid,
        churn_cycles,
        bad_calls,
        bad_misanswered,
    }
}

async fn measure(cluster: &vfps_testkit::PgCluster, clients: usize, seconds: u64) -> Row {
    let (db, server) = postgres_server(cluster, clients, Vec::new()).await;

    eprintln!("[{clients} clients] warming up ...");
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] vfps Create (PostgreSQL) ...");
    let batches = histogram(&server, "vfps_create_batch_size").await;
    let latencies = Latencies::start(&server, Latencies::CREATE).await;
    let mark = CpuMark::now(server.pid());
    let (n, lat) = creates(&server.grpc, clients, seconds, None).await;
    let create_cpu = mark.per_1000(server.pid(), n);
    let create_batch = mean_since(&server, "vfps_create_batch_size", batches).await;
    let [server_ms, wait_ms, statement_ms] = latencies.means(&server).await;
    let create_time = CreateTime {
        client_ms: lat.iter().map(|l| f64::from(*l)).sum::<f64>()
            / lat.len().max(1) as f64
            / 1000.0,
        server_ms,
        wait_ms,
        statement_ms,
    };
    let rss = (
        memory_mib(server.pid(), "VmRSS"),
        memory_mib(server.pid(), "VmHWM"),
    );

    eprintln!("[{clients} clients] gRPC health Check, no database (the call's own ceiling) ...");
    let mark = CpuMark::now(server.pid());
    let (h, _) = health_checks(&server.grpc, clients, seconds).await;
    let health_cpu = mark.per_1000(server.pid(), h);

    eprintln!("[{clients} clients] pgbench, same upsert, same clients ...");
    let mark = machine_busy_seconds();
    let pgbench_tps = pgbench(cluster, &db, UPSERT, clients, seconds);
    let pgbench_cpu = (machine_busy_seconds() - mark) / (pgbench_tps * seconds as f64 / 1000.0);
    // One caller has nothing to batch: no ceiling of batched rows there.
    let db_ceiling = if clients > 1 {
        eprintln!(
            "[{clients} clients] pgbench, {BATCH_ROWS}-row upserts, {BATCH_CLIENTS} clients (the database's own ceiling) ..."
        );
        pgbench(cluster, &db, &batch_upsert(), BATCH_CLIENTS, seconds) * BATCH_ROWS as f64
    } else {
        f64::NAN
    };

    eprintln!("[{clients} clients] vfps Get (PostgreSQL) ...");
    insert_lookup_rows(cluster, &db);
    let batches = histogram(&server, "vfps_get_batch_size").await;
    let mark = CpuMark::now(server.pid());
    let (g, glat) = gets(&server.grpc, clients, seconds).await;
    let get_cpu = mark.per_1000(server.pid(), g);
    let get_batch = mean_since(&server, "vfps_get_batch_size", batches).await;
    eprintln!("[{clients} clients] vfps re-Create of existing originals (PostgreSQL) ...");
    let chans = Arc::new(channels(&server.grpc, 4));
    let (r, rlat) = drive(clients, seconds, move |c, i| {
        let mut client = chans[c % chans.len()].clone();
        let k = lookup_key(c, i);
        async move {
            client
                .create(PseudonymServiceCreateRequest {
                    namespace: "bench".into(),
                    original_value: format!("lookup-{k}"),
                })
                .await
                .is_ok()
        }
    })
    .await;
    drop(server);
    eprintln!("[{clients} clients] pgbench, same lookup SELECT, same clients ...");
    let mark = machine_busy_seconds();
    let pgbench_select_tps = pgbench(cluster, &db, LOOKUP, clients, seconds);
    let pgbench_select_cpu =
        (machine_busy_seconds() - mark) / (pgbench_select_tps * seconds as f64 / 1000.0);

    eprintln!("[{clients} clients] vfps Create (SQLite) ...");
    let dir = std::env::temp_dir().join(format!(
        "vfps-bench-sqlite-{}-{clients}",
        std::process::id()
    ));
    let sqlite = start(vec![(
        "VFPS_SQLITE_PATH".into(),
        dir.join("bench.sqlite").display().to_string(),
    )])
    .await;
    let (s, slat) = creates(&sqlite.grpc, clients, seconds, None).await;
    drop(sqlite);
    let _ = std::fs::remove_dir_all(&dir);

    let per_second = |n: u64| n as f64 / seconds as f64;
    Row {
        clients,
        vfps_create: per_second(n),
        create_latency: (percentile(&lat, 0.5), percentile(&lat, 0.99)),
        pgbench_tps,
        create_cpu,
        create_batch,
        create_time,
        pgbench_cpu,
        get_cpu,
        get_batch,
        health_cpu,
        pgbench_select_cpu,
        grpc_ceiling: per_second(h),
        db_ceiling,
        rss,
        vfps_get: per_second(g),
        get_latency: (percentile(&glat, 0.5), percentile(&glat, 0.99)),
        pgbench_select_tps,
        vfps_recreate: per_second(r),
        recreate_latency: (percentile(&rlat, 0.5), percentile(&rlat, 0.99)),
        sqlite_create: per_second(s),
        sqlite_latency: (percentile(&slat, 0.5), percentile(&slat, 0.99)),
    }
}

/// The rows Gets look up and re-Creates find: `lookup-<k>` for `k` in
/// `1..=LOOKUP_ROWS`, pseudonym `sha256(k)` in hex.
fn insert_lookup_rows(cluster: &vfps_testkit::PgCluster, db: &vfps_testkit::TestDatabase) {
    cluster
        .psql(
            &db.name,
            &format!(
                "INSERT INTO pseudonyms SELECT 'bench', 'lookup-' || k, \
                 encode(sha256(k::text::bytea), 'hex'), now(), now() \
                 FROM generate_series(1, {LOOKUP_ROWS}) k ON CONFLICT DO NOTHING"
            ),
        )
        .unwrap();
    // Vacuumed now, not by autovacuum in the middle of the Gets: the rows just
    // inserted (the Creates' and these) would have it run during the Get phase,
    // on the Gets' cores, and long before pgbench's SELECTs.
    cluster
        .psql(&db.name, "VACUUM (ANALYZE) pseudonyms")
        .unwrap();
}

/// Closed-loop Gets of the lookup rows over four channels.
async fn gets(grpc: &str, clients: usize, seconds: u64) -> (u64, Vec<u32>) {
    let chans = Arc::new(channels(grpc, 4));
    drive(clients, seconds, move |c, i| {
        let mut client = chans[c % chans.len()].clone();
        let value = hex_sha256(&lookup_key(c, i).to_string());
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
    .await
}

/// Two servers compared in turns (`BENCH_PHASES=ab`): A, this build; B, the
/// `vfps` binary at `BENCH_AB_BINARY` (default this build) with the settings in
/// `BENCH_AB_ENV` (`KEY=VALUE;KEY=VALUE`); with `BENCH_AB_TRACED` set to a root
/// sampler (`AlwaysOnSampler`, …) both trace with it, exporting to a counting
/// collector in this process. Both serve one database; each turn
/// loads A then B, or B then A (alternating, so a trend in the machine's speed
/// cancels), for `BENCH_AB_SLICE` seconds (default 2) of Creates and as many of
/// Gets, `BENCH_AB_TURNS` times (default 8). This machine's speed drifts by
/// more between runs than most changes are worth; side by side in turns, a few
/// percent show. Build B's binary as this benchmark builds its own (`cargo bench
/// -p vfps-server --bench throughput --no-run`, then copy `target/release/vfps`):
/// `cargo build --release` makes a different binary (the benchmark's build
/// unifies the dev-dependencies' features), a difference of its own.
struct Ab {
    /// Per turn: Create/s and Get/s of A and of B.
    creates: Vec<[f64; 2]>,
    gets: Vec<[f64; 2]>,
    /// Per turn: server CPU-seconds per 1,000 Creates and per 1,000 Gets, A and B.
    create_cpu: Vec<[f64; 2]>,
    get_cpu: Vec<[f64; 2]>,
}

async fn ab(cluster: &vfps_testkit::PgCluster, clients: usize) -> Ab {
    let binary =
        std::env::var("BENCH_AB_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vfps").to_owned());
    let b_env: Vec<(String, String)> = std::env::var("BENCH_AB_ENV")
        .unwrap_or_default()
        .split(';')
        .filter(|kv| !kv.trim().is_empty())
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("BENCH_AB_ENV: {kv:?} is not KEY=VALUE"));
            (k.trim().to_owned(), v.to_owned())
        })
        .collect();
    let slice = env_or("BENCH_AB_SLICE", 2);
    let turns = env_or("BENCH_AB_TURNS", 8).max(1) as usize;
    let sampler = std::env::var("BENCH_AB_TRACED").unwrap_or_default();
    let collector = match sampler.is_empty() {
        true => None,
        false => Some(
            vfps_testkit::otlp::Collector::start_counting()
                .await
                .unwrap(),
        ),
    };
    let traced = collector
        .as_ref()
        .map(|c| tracing_env(&sampler, &c.endpoint))
        .unwrap_or_default();
    let db = cluster.create_database().unwrap();
    let a = start(postgres_env(&db, clients, traced.clone())).await;
    let b_env: Vec<(String, String)> = traced.into_iter().chain(b_env).collect();
    let b = start_binary(&binary, postgres_env(&db, clients, b_env.clone())).await;
    insert_lookup_rows(cluster, &db);
    eprintln!("[{clients} clients] A/B: B is {binary} with {b_env:?}; warming up ...");
    for s in [&a, &b] {
        creates(&s.grpc, clients, 1, None).await;
        gets(&s.grpc, clients, 1).await;
    }
    let mut out = Ab {
        creates: Vec::new(),
        gets: Vec::new(),
        create_cpu: Vec::new(),
        get_cpu: Vec::new(),
    };
    for turn in 0..turns {
        eprintln!("[{clients} clients] A/B turn {} of {turns} ...", turn + 1);
        let (mut c, mut g, mut cc, mut gc) = ([0.0; 2], [0.0; 2], [0.0; 2], [0.0; 2]);
        let order = if turn % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let server = [&a, &b][i];
            let cpu = cpu_seconds(server.pid());
            let (n, _) = creates(&server.grpc, clients, slice, None).await;
            let mid = cpu_seconds(server.pid());
            let (m, _) = gets(&server.grpc, clients, slice).await;
            c[i] = n as f64 / slice as f64;
            g[i] = m as f64 / slice as f64;
            cc[i] = (mid - cpu) / (n.max(1) as f64 / 1000.0);
            gc[i] = (cpu_seconds(server.pid()) - mid) / (m.max(1) as f64 / 1000.0);
        }
        out.creates.push(c);
        out.gets.push(g);
        out.create_cpu.push(cc);
        out.get_cpu.push(gc);
    }
    out
}

/// Median and range of B/A over the turns, as a table cell.
fn b_over_a(pairs: &[[f64; 2]]) -> String {
    spread_cell(pairs.iter().map(|p| p[1] / p[0]).collect(), 3)
}

/// `**median** (min–max)` of `v` with `digits` decimals, as a table cell.
fn spread_cell(v: Vec<f64>, digits: usize) -> String {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    format!("**{:.digits$}** ({lo:.digits$}–{hi:.digits$})", median(v))
}

/// `grpc.health.v1.Health/Check` calls, closed loop, over the same four
/// channels as the Creates.
async fn health_checks(grpc: &str, clients: usize, seconds: u64) -> (u64, Vec<u32>) {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let chans: Arc<Vec<_>> = Arc::new(
        (0..4)
            .map(|_| {
                HealthClient::new(
                    Channel::from_shared(grpc.to_owned())
                        .unwrap()
                        .connect_lazy(),
                )
            })
            .collect(),
    );
    drive(clients, seconds, move |c, _| {
        let mut client = chans[c % chans.len()].clone();
        async move {
            client
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .is_ok()
        }
    })
    .await
}

impl Row {
    /// The most Creates/s if a Create cost no more than its gRPC call and its
    /// database work: one caller, a gRPC round trip and pgbench's one-row upsert
    /// one after the other; many, the gRPC call and a row of a large batch, the
    /// two costs added on the same cores.
    fn create_ceiling(&self) -> f64 {
        let database = if self.clients == 1 {
            self.pgbench_tps
        } else {
            self.db_ceiling
        };
        1.0 / (1.0 / self.grpc_ceiling + 1.0 / database)
    }

    /// The most Gets/s likewise: one caller, a gRPC round trip and pgbench's
    /// SELECT one after the other; many, the gRPC call alone (Gets could be
    /// batched, so the one-row SELECT's cost is no floor).
    fn get_ceiling(&self) -> f64 {
        if self.clients == 1 {
            1.0 / (1.0 / self.grpc_ceiling + 1.0 / self.pgbench_select_tps)
        } else {
            self.grpc_ceiling
        }
    }
}

/// CPU-seconds per 1,000 calls the machine's `cores` may spend, all busy, to
/// reach `target` × `baseline_per_second` calls/s.
fn budget_per_1000(cores: f64, target: f64, baseline_per_second: f64) -> f64 {
    cores * 1000.0 / (target * baseline_per_second)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The tracing settings of the overhead phase: off, on with upstream's
/// default sampler (every span exported), on with 10 % of root traces.
const SAMPLERS: [Option<&str>; 3] = [
    None,
    Some("AlwaysOnSampler"),
    Some("TraceIdRatioBasedSampler"),
];

/// One round of the tracing phase: Create/s and server CPU-seconds per 1,000
/// Creates for each of [`SAMPLERS`].
struct Traced {
    rates: [f64; 3],
    cpu_per_1000: [f64; 3],
    /// This process's (the gRPC clients' and the collector's) CPU-seconds per
    /// 1,000 Creates: what the collector costs shows here, not in the server.
    bench_cpu_per_1000: [f64; 3],
}

/// Create/s at `clients` for each of [`SAMPLERS`], each on a fresh database,
/// `rounds` times with the settings interleaved (so a slow minute of the
/// machine hits all three alike). Spans go to a collector in this process.
/// The settings that switch tracing on with `sampler` (at 10 % for the ratio
/// sampler), exporting to `endpoint`.
fn tracing_env(sampler: &str, endpoint: &str) -> Vec<(String, String)> {
    [
        ("Tracing__IsEnabled", "true"),
        ("Tracing__RootSampler", sampler),
        ("Tracing__SamplingProbability", "0.1"),
        ("Tracing__Otlp__Endpoint", endpoint),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

async fn tracing_overhead(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    seconds: u64,
    rounds: usize,
) -> Vec<Traced> {
    // It decodes and counts the spans, keeping none: a collector runs elsewhere
    // in production, and this one shares the benchmark's two cores.
    let collector = vfps_testkit::otlp::Collector::start_counting()
        .await
        .unwrap();
    let mut out = Vec::new();
    for round in 1..=rounds {
        let mut traced = Traced {
            rates: [0.0; 3],
            cpu_per_1000: [0.0; 3],
            bench_cpu_per_1000: [0.0; 3],
        };
        for (i, sampler) in SAMPLERS.iter().enumerate() {
            eprintln!("[{clients} clients] round {round} of {rounds}: Create/s with tracing {sampler:?} ...");
            let env = sampler
                .map(|s| tracing_env(s, &collector.endpoint))
                .unwrap_or_default();
            let (_db, server) = postgres_server(cluster, clients, env).await;
            creates(&server.grpc, clients, 2, None).await;
            let (cpu, bench_cpu) = (cpu_seconds(server.pid()), cpu_seconds(std::process::id()));
            let (n, _) = creates(&server.grpc, clients, seconds, None).await;
            let thousands = n.max(1) as f64 / 1000.0;
            traced.rates[i] = n as f64 / seconds as f64;
            traced.cpu_per_1000[i] = (cpu_seconds(server.pid()) - cpu) / thousands;
            traced.bench_cpu_per_1000[i] =
                (cpu_seconds(std::process::id()) - bench_cpu) / thousands;
        }
        out.push(traced);
    }
    eprintln!("  the collector received {} spans", collector.span_count());
    out
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
