//! What tracing costs: Create/s with each sampler against none.

use super::*;

/// The tracing settings of the overhead phase: off, on with upstream's
/// default sampler (every span exported), on with 10 % of root traces.
pub(super) const SAMPLERS: [Option<&str>; 3] = [
    None,
    Some("AlwaysOnSampler"),
    Some("TraceIdRatioBasedSampler"),
];

/// One round of the tracing phase: Create/s and server CPU-seconds per 1,000
/// Creates for each of [`SAMPLERS`].
pub(super) struct Traced {
    pub(super) rates: [f64; 3],
    pub(super) cpu_per_1000: [f64; 3],
    /// This process's (the gRPC clients' and the collector's) CPU-seconds per
    /// 1,000 Creates: what the collector costs shows here, not in the server.
    pub(super) bench_cpu_per_1000: [f64; 3],
}

/// Create/s at `clients` for each of [`SAMPLERS`], each on a fresh database,
/// `rounds` times with the settings interleaved (so a slow minute of the
/// machine hits all three alike). Spans go to a collector in this process.
/// The settings that switch tracing on with `sampler` (at 10 % for the ratio
/// sampler), exporting to `endpoint`.
pub(super) fn tracing_env(sampler: &str, endpoint: &str) -> Vec<(String, String)> {
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

pub(super) async fn tracing_overhead(
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
