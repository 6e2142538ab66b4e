//! Generator benchmark: the maximum offered rate of the open-model generator on
//! one core (a current-thread runtime drives the generator and its calls) against
//! a trivial in-process gRPC server on another thread, with the lag between
//! intended and actual send times. Target: ≥ 20,000 calls/s with p99 lag ≤ 1 ms.
//!
//! `cargo bench -p vfps-chaos --bench generator` (env `BENCH_RATES`, default
//! `10000,20000,30000,40000`; `BENCH_SECONDS`, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use vfps_chaos::{
    history::{Calls, Ledger, Timeline},
    mix::Mix,
    workload::{
        generator::{self, Schedule},
        Mixed,
    },
};
use vfps_client::{Client, Endpoints, RetryPolicy};
use vfps_testkit::fake_vfps::{self as fake, Behaviour};

fn main() {
    let rates: Vec<u32> = std::env::var("BENCH_RATES")
        .unwrap_or_else(|_| "10000,20000,30000,40000".into())
        .split(',')
        .map(|r| r.trim().parse().expect("BENCH_RATES is a list of integers"))
        .collect();
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);

    // The server gets its own thread and runtime.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = fake::start(Behaviour::Healthy).await.unwrap();
            addr_tx.send(server.addr).unwrap();
            std::future::pending::<()>().await;
        });
    });
    let addr = addr_rx.recv().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("vfps-generator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("| target calls/s | offered calls/s | ok calls/s | p50 send lag | p99 send lag | max send lag |");
    println!("|---|---|---|---|---|---|");
    for rate in rates {
        rt.block_on(async {
            let client = Client::new(
                Endpoints::parse(&format!("http://{addr}")).await.unwrap(),
                RetryPolicy::default(),
            );
            let ledger = Arc::new(Ledger::create(&dir.join("ledger.jsonl"), 1000).unwrap());
            let timeline = Arc::new(Timeline::new(seconds));
            let schedule = Schedule {
                rate_per_second: rate,
                seconds,
                deadline: Duration::from_secs(5),
                max_in_flight: 1_000_000,
                mix: Mix::parse("create=100").unwrap(),
            };
            let workload = Mixed::new(
                client,
                "bench".into(),
                1,
                ledger,
                Arc::new(Calls::default()),
                Default::default(),
            );
            let started = std::time::Instant::now();
            let totals = generator::run(&schedule, workload, timeline.clone(), None).await;
            let rows = timeline.rows();
            // The dispatch window ends with the last dispatch, not the last answer.
            let offered: u64 = rows.iter().map(|r| r.offered).sum();
            let ok: u64 = rows.iter().map(|r| r.ok).sum();
            let window =
                (seconds as f64).max(started.elapsed().as_secs_f64().min(seconds as f64 + 1.0));
            println!(
                "| {rate} | {:.0} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms |",
                offered as f64 / seconds as f64,
                ok as f64 / window,
                totals.p50_dispatch_lag_micros as f64 / 1000.0,
                totals.p99_dispatch_lag_micros as f64 / 1000.0,
                totals.max_dispatch_lag_micros as f64 / 1000.0,
            );
        });
    }
    let _ = std::fs::remove_dir_all(dir);
}
