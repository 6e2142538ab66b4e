//! What sealing originals at rest costs (`VFPS_KEYS`, docs/privacy.md):
//! two `vfps` processes side by side on databases of their own in one
//! PostgreSQL cluster — one plain, one with a key file — driven in turns
//! by the same closed loop of `BENCH_CLIENTS` (16) gRPC callers for
//! `BENCH_SECONDS` (5) a phase: Creates of new originals, then Gets of
//! what was made; then CSV jobs of `BENCH_JOB_ROWS` (100,000) rows with
//! two mapped columns on each, of sequential originals and of scattered
//! ones. Each phase runs `BENCH_ROUNDS` (3) times,
//! alternating which server goes first; the median of each is reported.
//!
//! Printed: calls/s and server CPU per call (user + system, from
//! `/proc/<pid>/stat`) of each, a job's µs per row, and sealed ÷ plain.
//! Targets: ≥ 0.9× in throughput for Create, Get and a job's rows/s.
//!
//! Then, on the sealed server's `bench` namespace while the Create phase
//! runs against it: a key rotation's re-seal (`vfps keys rotate` +
//! `reseal`), and moving its originals to plain and back (`vfps keys
//! decrypt-all`, `encrypt-existing`): rows/s of each, and Create's calls/s
//! meanwhile against its median above.
//!
//! `cargo bench -p vfps-server --bench sealed`

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{env_or, namespace, run_job, start, write_input, Server};
use tonic::transport::Channel;
use vfps_proto::v1::{
    pseudonym_service_client::PseudonymServiceClient, PseudonymServiceCreateRequest,
    PseudonymServiceGetRequest,
};

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // After the name: state is field 0, utime 11, stime 12 (clock ticks).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// A server on its own database, with a namespace `bench`; and its settings.
async fn serve(keys: Option<&std::path::Path>) -> (Server, Vec<(String, String)>) {
    let db = vfps_testkit::shared().create_database().unwrap();
    let files = vfps_testkit::scratch_dir("bench-sealed-files");
    let mut env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string,
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ("VFPS_JOBS_DIR".to_owned(), files.display().to_string()),
        ("CsvProcessing__PollInterval".to_owned(), "100ms".to_owned()),
    ];
    if let Some(keys) = keys {
        env.push(("VFPS_KEYS".to_owned(), format!("file:{}", keys.display())));
        // The command below is the only one that re-seals or moves rows.
        env.push(("VFPS_KEYS_REFRESH_INTERVAL".to_owned(), "1h".to_owned()));
    }
    let server = start(&env).await;
    namespace(&server, "bench").await;
    (server, env)
}

/// `vfps keys <args>` against `env`'s database: its standard error, and
/// its wall time.
fn keys_command(env: &[(String, String)], args: &[&str]) -> (String, f64) {
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vfps"))
        .arg("keys")
        .args(args)
        .envs(env.iter().cloned())
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (said, started.elapsed().as_secs_f64())
}

/// The first number after `before` in `text`.
fn number_after(text: &str, before: &str) -> f64 {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("{before:?} in {text}"))
        + before.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    Get,
}

/// One phase against `server`: (calls/s, CPU ms per call). Creates make
/// `made` grow; Gets read it.
async fn phase(
    server: &Server,
    phase: Phase,
    clients: usize,
    seconds: u64,
    made: &Arc<std::sync::Mutex<Vec<String>>>,
    round: u64,
) -> (f64, f64) {
    let channel = Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect_lazy();
    let calls = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds(server.child.id());
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let known: Arc<Vec<String>> = Arc::new(made.lock().unwrap().clone());
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (mut client, calls, made, known) = (
            PseudonymServiceClient::new(channel.clone()),
            calls.clone(),
            made.clone(),
            known.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0usize;
            while Instant::now() < until {
                match phase {
                    Phase::Create => {
                        let p = client
                            .create(PseudonymServiceCreateRequest {
                                namespace: "bench".into(),
                                original_value: format!("r{round}-c{c}-o{i}"),
                            })
                            .await
                            .unwrap()
                            .into_inner()
                            .pseudonym
                            .unwrap();
                        made.lock().unwrap().push(p.pseudonym_value);
                    }
                    Phase::Get => {
                        let p = &known[(c * 7919 + i * 104_729) % known.len()];
                        client
                            .get(PseudonymServiceGetRequest {
                                namespace: "bench".into(),
                                pseudonym_value: p.clone(),
                            })
                            .await
                            .unwrap();
                    }
                }
                calls.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = calls.load(Ordering::Relaxed) as f64;
    let cpu = cpu_seconds(server.child.id()) - cpu_before;
    (n / elapsed, cpu * 1000.0 / n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 16) as usize;
    let seconds = env_or("BENCH_SECONDS", 5);
    let rounds = env_or("BENCH_ROUNDS", 3);
    let keys = vfps_testkit::scratch_dir("bench-sealed").join("vfps.keys");
    vfps_keys::source::FileKey::init(&keys).unwrap();
    let (plain, _) = serve(None).await;
    let (sealed, sealed_env) = serve(Some(&keys)).await;
    let servers = [plain, sealed];
    let mut create_rate = 0.0;
    let names = ["plain", "sealed"];
    let made: Vec<Arc<std::sync::Mutex<Vec<String>>>> = (0..2).map(|_| Arc::default()).collect();
    println!(
        "sealed vs plain: {clients} gRPC callers, {seconds} s a phase, {rounds} rounds, FULL_RANDOM_HEX namespace on PostgreSQL"
    );
    for (what, kind) in [("Create", Phase::Create), ("Get", Phase::Get)] {
        let mut rate = [Vec::new(), Vec::new()];
        let mut cpu = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Alternate who goes first: neither always gets a warmer cache.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let (r, c) = phase(&servers[s], kind, clients, seconds, &made[s], round).await;
                println!(
                    "  {what} round {round} {:>6}: {r:>8.0} calls/s, {c:.3} ms CPU a call",
                    names[s]
                );
                rate[s].push(r);
                cpu[s].push(c);
            }
        }
        let (rate, cpu) = (rate.map(median), cpu.map(median));
        if matches!(kind, Phase::Create) {
            create_rate = rate[1];
        }
        println!(
            "{what}: plain {:.0} calls/s ({:.3} ms CPU a call), sealed {:.0} calls/s ({:.3} ms CPU a call): sealed/plain = {:.2}x throughput (target >= 0.90), {:.2}x CPU a call",
            rate[0],
            cpu[0],
            rate[1],
            cpu[1],
            rate[1] / rate[0],
            cpu[1] / cpu[0]
        );
    }
    let rows = env_or("BENCH_JOB_ROWS", 100_000);
    let dir = vfps_testkit::scratch_dir("bench-sealed-input");
    let sequential = dir.join("sequential.csv");
    write_input(&sequential, rows, 8, u64::MAX);
    let scattered = dir.join("scattered.csv");
    write_scattered(&scattered, rows);
    for (k, (what, input)) in [
        ("sequential originals (name-0, name-1, …)", &sequential),
        ("scattered originals (64-bit hashes)", &scattered),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rates = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let ns = format!("job-{k}-{round}");
                namespace(&servers[s], &ns).await;
                let job = run_job(&servers[s], input, &ns, |_| {}).await;
                let rate = job["rowsPerSecond"].as_f64().unwrap();
                println!(
                    "  CSV job, {what}, round {round} {:>6}: {rate:>8.0} rows/s, {:.1} µs a row",
                    names[s],
                    1e6 / rate
                );
                rates[s].push(rate);
            }
        }
        let rate = rates.map(median);
        println!(
            "CSV job ({rows} rows, 2 mapped columns, {what}): plain {:.1} µs a row, sealed {:.1} µs a row: sealed/plain = {:.2}x rows/s (target >= 0.90)",
            1e6 / rate[0],
            1e6 / rate[1],
            rate[1] / rate[0]
        );
    }
    // Rotation and moves, under Creates.
    for (what, steps) in [
        (
            "re-seal after a rotation (vfps keys rotate + reseal)",
            vec![
                vec!["rotate", "--namespace", "bench"],
                vec!["reseal", "--namespace", "bench"],
            ],
        ),
        (
            "move to plain (vfps keys decrypt-all)",
            vec![vec!["decrypt-all", "--namespace", "bench"]],
        ),
        (
            "move to sealed (vfps keys encrypt-existing)",
            vec![vec!["encrypt-existing", "--namespace", "bench"]],
        ),
    ] {
        let env = sealed_env.clone();
        let work = tokio::task::spawn_blocking(move || {
            steps
                .iter()
                .map(|args| keys_command(&env, args).0)
                .collect::<String>()
        });
        let load = phase(&servers[1], Phase::Create, clients, seconds, &made[1], 100);
        let (said, (rate, _)) = tokio::join!(async { work.await.unwrap() }, load);
        // The command's own summary: "bench: <rows> … in <seconds> s".
        let summary = said
            .lines()
            .find(|l| l.contains(" in ") && (l.contains("re-sealed") || l.contains("rows made")))
            .unwrap_or_else(|| panic!("no summary in {said}"));
        let moved = number_after(summary, "bench: ");
        let seconds = number_after(summary, " in ");
        println!(
            "{what}: {moved:.0} rows in {seconds:.1} s = {:.0} rows/s; Creates meanwhile {rate:.0} calls/s = {:.2}x of their median above",
            moved / seconds,
            rate / create_rate
        );
    }
}

/// `rows` rows of `id,name,ref,note` whose mapped values are 64-bit hashes
/// of the row number: a B-tree of plain originals takes them scattered, as
/// it takes blind indexes.
fn write_scattered(path: &std::path::Path, rows: u64) {
    use std::io::Write;
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(b"id,name,ref,note\n").unwrap();
    for i in 0..rows {
        writeln!(
            out,
            "{i},{:016x},{:016x},xxxxxxxx",
            mix(2 * i + 1),
            mix(2 * i + 2)
        )
        .unwrap();
    }
    out.flush().unwrap();
}
