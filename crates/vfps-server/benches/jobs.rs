//! CSV job benchmark, every figure a ratio against a baseline measured in the
//! same run:
//!
//! 1. rows/s of a job of `BENCH_JOB_ROWS` (1,000,000) rows with two mapped
//!    columns on PostgreSQL, against the database's own ceiling for the same
//!    rows: the same batched statement (vfps's insert of new rows, what a job
//!    sends while its rows are new) sent by a plain client 1000 rows (2000
//!    values) per statement, pseudonyms generated alike, on one connection and
//!    on two at once (a job keeps two batches in flight): the faster is the
//!    ceiling — target ≥ 0.8 (the upsert a batch with known originals falls
//!    back to is measured too, as a ratio); and µs per row against upstream's
//!    published 30–35 µs — target ≤ 15;
//! 2. the peak resident memory (VmHWM) of a server of its own while a
//!    `BENCH_JOB_MIB` (1024) MiB input is uploaded through it and processed —
//!    target < 64 MiB;
//! 3. interactive Create p99 at `BENCH_RATE` (200) Creates/s, open model, for
//!    `BENCH_CREATE_SECONDS` (30), while a job runs against the same without
//!    one — target ≤ 2×.
//!
//! Each of the phases of 1 starts on an empty `pseudonyms` table (after a
//! checkpoint), so each writes into indexes of the same size; each reports the
//! machine's CPU time per row (every process, every core), which bounds how
//! fast a row can be here with every core busy.
//!
//! The PostgreSQL cluster is durable (fsync, full-page writes and synchronous
//! commit on), as in production, with the test kit's small settings (32 MB
//! shared buffers, PostgreSQL's default checkpoints; `BENCH_PG=small`, the
//! default) or as a production server for bulk writes would be configured
//! (`BENCH_PG=production`: 2 GB shared buffers, 8 GB `max_wal_size`, 15 min
//! checkpoints, WAL compression). The server is the real `vfps` binary in its
//! own process.
//!
//! `cargo bench -p vfps-server --bench jobs`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use common::{env_or, namespace, run_job, start, write_input, Server};
use serde_json::json;
use vfps_core::{generate::generate, GenerationMethod, NamespaceSettings, OriginalValue};

const BATCH_ROWS: usize = 1000;
/// `BENCH_PG=production`: what a production server for bulk writes sets
/// (durability untouched); later lines of `postgresql.conf` win.
const PRODUCTION_PG: &str = "shared_buffers = 2GB\nmax_wal_size = 8GB\n\
    checkpoint_timeout = 15min\nwal_compression = on\n";
const UPSTREAM_MICROS_PER_ROW: (f64, f64) = (30.0, 35.0);

/// The database's ceiling: the same rows through one of vfps's own
/// statements (`sql`: the insert of new rows a job sends, or the upsert it
/// falls back to), sent by a plain client, one statement per 1000 rows, on
/// `connections` connections at once (batch `k` on connection `k % n`).
async fn ceiling(
    cluster: &vfps_testkit::PgCluster,
    db: &str,
    ns: &str,
    sql: &'static str,
    rows: u64,
    connections: u64,
) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let url = format!(
            "host=127.0.0.1 port={} user=postgres dbname={db}",
            cluster.port()
        );
        let ns = ns.to_owned();
        tasks.push(tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let uid: i64 = client
                .query_one("SELECT uid FROM namespaces WHERE name = $1", &[&ns])
                .await
                .unwrap()
                .get(0);
            let statement = client.prepare(sql).await.unwrap();
            let settings =
                NamespaceSettings::parse(GenerationMethod::FullRandomHexEncoded, 32, None, None)
                    .unwrap();
            let mut batch = c;
            while batch * (BATCH_ROWS as u64) < rows {
                let from = batch * BATCH_ROWS as u64;
                let end = (from + BATCH_ROWS as u64).min(rows);
                let mut originals: Vec<String> = (from..end)
                    .flat_map(|k| [format!("name-{k}"), format!("ref-{k}")])
                    .collect();
                originals.sort();
                let pseudonyms: Vec<String> = originals
                    .iter()
                    .map(|o| generate(&settings, &OriginalValue::parse(o).unwrap(), None).unwrap())
                    .collect();
                let n = originals.len();
                let namespaces = vec![ns.as_str(); n];
                let now = vec![SystemTime::now(); n];
                let uids = vec![uid; n];
                let inserted = client
                    .execute(
                        &statement,
                        &[&namespaces, &originals, &pseudonyms, &now, &uids],
                    )
                    .await
                    .unwrap();
                assert_eq!(inserted, n as u64, "every row is new");
                batch += connections;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

/// The whole machine's busy CPU time so far (every core; idle and I/O wait
/// aside), in seconds.
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + cpu.get(7).copied().unwrap_or(0);
    busy as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    })
}

/// Runs `phase` on an empty `pseudonyms` table (so every phase writes into
/// indexes of the same size) after a checkpoint; answers its result and the
/// machine's CPU time per row it used, in µs.
async fn on_empty_table<F: std::future::Future<Output = f64>>(
    cluster: &vfps_testkit::PgCluster,
    db: &str,
    rows: u64,
    phase: F,
) -> (f64, f64) {
    cluster.psql(db, "TRUNCATE pseudonyms").unwrap();
    cluster.psql(db, "CHECKPOINT").unwrap();
    let before = machine_busy_seconds();
    let result = phase.await;
    let cpu = machine_busy_seconds() - before;
    (result, cpu * 1e6 / rows as f64)
}

fn peak_rss_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Open-model Creates at `rate`/s for `seconds`; answers the p99 latency
/// (from the intended send time) in milliseconds.
async fn create_p99(server: &Server, rate: u64, seconds: u64, tag: &str) -> f64 {
    let client = reqwest::Client::new();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for k in 0..rate * seconds {
        let intended = start + interval * k as u32;
        tokio::time::sleep_until(intended).await;
        let url = format!("{}/v1/namespaces/interactive/pseudonyms", server.http);
        let client = client.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&json!({"originalValue": format!("{tag}-{k}")}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            intended.elapsed().as_secs_f64() * 1000.0
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.push(t.await.unwrap());
    }
    // The slowest Create of every second, with the wall clock (to set beside
    // the database's log): one stall can be the whole p99 of a short window.
    let began = SystemTime::now() - start.elapsed();
    let worst: Vec<String> = latencies
        .chunks(rate as usize)
        .map(|second| format!("{:.0}", second.iter().copied().fold(0.0, f64::max)))
        .collect();
    eprintln!(
        "  {tag}: from {:.1} (unix s), slowest Create per second, ms: {}",
        began
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64(),
        worst.join(" ")
    );
    latencies.sort_by(f64::total_cmp);
    latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)]
}

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_JOB_ROWS", 1_000_000);
    let mib = env_or("BENCH_JOB_MIB", 1024);
    let rate = env_or("BENCH_RATE", 200);
    // Long enough that one stall of the machine is not the whole p99.
    let create_seconds = env_or("BENCH_CREATE_SECONDS", 30);
    let scratch: PathBuf = vfps_testkit::scratch_dir("jobs-bench");
    let profile = std::env::var("BENCH_PG").unwrap_or_else(|_| "small".to_owned());
    let conf = match profile.as_str() {
        "production" => PRODUCTION_PG,
        "small" => "",
        other => panic!("BENCH_PG={other:?}: production or small"),
    };
    // More postgresql.conf lines (e.g. `log_autovacuum_min_duration = 0`);
    // the server's log is printed at the end when they are given.
    let extra = std::env::var("BENCH_PG_CONF")
        .unwrap_or_default()
        .replace("\\n", "\n");
    let cluster = vfps_testkit::PgCluster::start_with(&format!("{conf}{extra}\n")).unwrap();
    let db = cluster.create_database().unwrap();
    let files = scratch.join("files");
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string.clone(),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ("VFPS_JOBS_DIR".to_owned(), files.display().to_string()),
        ("CsvProcessing__PollInterval".to_owned(), "100ms".to_owned()),
    ];
    let server = start(&env).await;
    for ns in [
        "ceiling-1",
        "ceiling-2",
        "upsert",
        "job",
        "interactive",
        "busy",
    ] {
        namespace(&server, ns).await;
    }
    let input = scratch.join("input.csv");
    write_input(&input, rows, 8, u64::MAX);

    // 1. Rows/s against the database's ceiling.
    // Every phase starts on an empty table.
    use vfps_store::postgres::statements::{INSERT_NEW, UPSERT};
    let db_name = db.name.as_str();
    eprintln!(
        "ceiling: {rows} rows through vfps's insert of new rows, plain client, 1 connection…"
    );
    let (sequential, _) = on_empty_table(
        &cluster,
        db_name,
        rows,
        ceiling(&cluster, db_name, "ceiling-1", INSERT_NEW, rows, 1),
    )
    .await;
    eprintln!("ceiling: the same on 2 connections at once (as a job's 2 batches in flight)…");
    let (concurrent, ceiling_cpu) = on_empty_table(
        &cluster,
        db_name,
        rows,
        ceiling(&cluster, db_name, "ceiling-2", INSERT_NEW, rows, 2),
    )
    .await;
    let ceiling_rate = sequential.max(concurrent);
    eprintln!("the upsert (a batch with known originals) on 2 connections…");
    let (upsert_rate, upsert_cpu) = on_empty_table(
        &cluster,
        db_name,
        rows,
        ceiling(&cluster, db_name, "upsert", UPSERT, rows, 2),
    )
    .await;
    eprintln!("job: {rows} rows, 2 mapped columns…");
    let (job_rate, job_cpu) = on_empty_table(&cluster, db_name, rows, async {
        run_job(&server, &input, "job", |_| {}).await["rowsPerSecond"]
            .as_f64()
            .unwrap()
    })
    .await;
    let micros = 1e6 / job_rate;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;

    // 3. Interactive Creates with and without a job running.
    // Each phase starts on a settled database: the bulk phases before it leave
    // autovacuum and checkpoints to catch up, which would otherwise land in
    // whichever phase comes next. (What the busy phase's own job sets off is
    // its own.)
    let settle = || {
        eprintln!("settling the database (VACUUM ANALYZE, CHECKPOINT)…");
        cluster.psql(&db.name, "VACUUM ANALYZE").unwrap();
        cluster.psql(&db.name, "CHECKPOINT").unwrap();
    };
    settle();
    eprintln!("interactive Creates at {rate}/s, idle…");
    let idle_p99 = create_p99(&server, rate, create_seconds, "idle").await;
    settle();
    eprintln!("interactive Creates at {rate}/s while a job runs…");
    let busy = run_job(&server, &input, "busy", |_| {});
    let measured = async {
        // Once the job is under way.
        tokio::time::sleep(Duration::from_secs(2)).await;
        create_p99(&server, rate, create_seconds, "busy").await
    };
    let (busy_job, busy_p99) = tokio::join!(busy, measured);
    let busy_rate = busy_job["rowsPerSecond"].as_f64().unwrap_or(0.0);
    drop(server);
    if !extra.is_empty() {
        eprintln!("the database's log:\n{}", cluster.server_log());
    }

    // 2. Memory while a large input streams through a server of its own
    //    (on the same database), from upload to the end of the job.
    eprintln!("memory: a {mib} MiB input uploaded through vfps and processed…");
    let big = scratch.join("big.csv");
    let note = 1000;
    write_input(&big, mib * (1 << 20) / (note as u64 + 30), note, 1000);
    let big_bytes = std::fs::metadata(&big).unwrap().len();
    let fresh = start(&env).await;
    namespace(&fresh, "mem").await;
    let pid = fresh.child.id();
    let before = peak_rss_mib(pid, "VmRSS");
    run_job(&fresh, &big, "mem", |_| {}).await;
    let peak = peak_rss_mib(pid, "VmHWM");
    drop(fresh);
    let _ = std::fs::remove_file(&big);

    println!("CSV jobs (PostgreSQL durable, BENCH_PG={profile}, {rows} rows, 2 mapped columns, this machine):");
    println!(
        "  job {job_rate:.0} rows/s vs the database's ceiling {ceiling_rate:.0} rows/s: {:.2} (target >= 0.80); \
         the ceiling is the faster of 1 connection ({sequential:.0} rows/s) and 2 ({concurrent:.0} rows/s)",
        job_rate / ceiling_rate
    );
    println!(
        "  the statement a job sends for new rows vs the upsert it falls back to (2 connections): \
         {concurrent:.0} vs {upsert_rate:.0} rows/s, {:.2}x; the machine's CPU per row {ceiling_cpu:.1} vs {upsert_cpu:.1} µs",
        concurrent / upsert_rate
    );
    println!(
        "  CPU per row (every process, {cores} cores): the ceiling's {ceiling_cpu:.1} µs, the job's {job_cpu:.1} µs: \
         with every core busy no faster than {:.1} and {:.1} µs per row here",
        ceiling_cpu / cores,
        job_cpu / cores
    );
    println!(
        "  {micros:.1} µs per row vs upstream's published {}–{} µs: {:.2}–{:.2} of it (target <= 15 µs)",
        UPSTREAM_MICROS_PER_ROW.0,
        UPSTREAM_MICROS_PER_ROW.1,
        micros / UPSTREAM_MICROS_PER_ROW.1,
        micros / UPSTREAM_MICROS_PER_ROW.0
    );
    println!(
        "  peak RSS {peak:.1} MiB while streaming a {:.2} GiB input (idle {before:.1} MiB; target < 64 MiB)",
        big_bytes as f64 / (1u64 << 30) as f64
    );
    println!(
        "  interactive Create p99 at {rate}/s: {busy_p99:.1} ms with a job vs {idle_p99:.1} ms without: {:.2}x (target <= 2x); \
         that job ran at {busy_rate:.0} rows/s over its whole run",
        busy_p99 / idle_p99
    );
}
