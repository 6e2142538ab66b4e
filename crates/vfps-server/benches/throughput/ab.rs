//! `BENCH_PHASES=ab`: two servers compared in turns on one database.

use super::*;

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
pub(super) struct Ab {
    /// Per turn: Create/s and Get/s of A and of B.
    pub(super) creates: Vec<[f64; 2]>,
    pub(super) gets: Vec<[f64; 2]>,
    /// Per turn: server CPU-seconds per 1,000 Creates and per 1,000 Gets, A and B.
    pub(super) create_cpu: Vec<[f64; 2]>,
    pub(super) get_cpu: Vec<[f64; 2]>,
}

pub(super) async fn ab(cluster: &vfps_testkit::PgCluster, clients: usize) -> Ab {
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
pub(super) fn b_over_a(pairs: &[[f64; 2]]) -> String {
    spread_cell(pairs.iter().map(|p| p[1] / p[0]).collect(), 3)
}

/// `**median** (min–max)` of `v` with `digits` decimals, as a table cell.
pub(super) fn spread_cell(v: Vec<f64>, digits: usize) -> String {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    format!("**{:.digits$}** ({lo:.digits$}–{hi:.digits$})", median(v))
}
