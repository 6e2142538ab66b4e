//! Prometheus metrics, served as text on the metrics port.
//!
//! Pool occupancy is read at scrape time; pseudonym counts per namespace are
//! refreshed by a background task, incrementally (see `counts`), and labelled
//! for the largest [`MAX_NAMESPACE_LABELS`] namespaces only. The coalescer
//! reports its queue, waits, batches and statements through [`Observer`];
//! `docs/observability.md` lists every metric.

mod jobs;

use std::{sync::Arc, time::Duration};

pub use jobs::JobMetrics;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use vfps_core::{Error, ErrorKind, TransientCause};
use vfps_store::{coalesce::Observer, Store};

/// Namespaces with a `vfps_pseudonyms` series of their own; the others are
/// summed in `vfps_pseudonyms_other_namespaces` (bounded label cardinality).
pub const MAX_NAMESPACE_LABELS: usize = 100;

/// gRPC status names, as the `code` label.
pub fn code_name(kind: Option<ErrorKind>) -> &'static str {
    match kind {
        None => "OK",
        Some(ErrorKind::InvalidArgument) => "INVALID_ARGUMENT",
        Some(ErrorKind::OutOfRange) => "OUT_OF_RANGE",
        Some(ErrorKind::NotFound) => "NOT_FOUND",
        Some(ErrorKind::AlreadyExists) => "ALREADY_EXISTS",
        Some(ErrorKind::Unavailable) => "UNAVAILABLE",
        Some(ErrorKind::DeadlineExceeded) => "DEADLINE_EXCEEDED",
        Some(ErrorKind::ResourceExhausted) => "RESOURCE_EXHAUSTED",
        Some(ErrorKind::Internal) => "INTERNAL",
        Some(ErrorKind::Unauthenticated) => "UNAUTHENTICATED",
        Some(ErrorKind::PermissionDenied) => "PERMISSION_DENIED",
        Some(ErrorKind::FailedPrecondition) => "FAILED_PRECONDITION",
    }
}

#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    /// The last pseudonym counts, for the admin UI's home page.
    last_counts: std::sync::RwLock<Arc<Vec<(String, i64)>>>,
    requests: IntCounterVec,
    request_duration: HistogramVec,
    store_duration: HistogramVec,
    batch_size: Histogram,
    lookup_batch_size: Histogram,
    /// From a Create joining the coalescer's queue until its batch starts.
    queue_wait: Histogram,
    /// One batch statement, sent until answered.
    batch_round_trip: Histogram,
    /// Creates waiting for a batch now.
    queue_depth: IntGauge,
    /// Transient store errors retried, by cause.
    retries: IntCounterVec,
    collisions: IntCounter,
    pseudonym_cache: IntCounterVec,
    pool: IntGaugeVec,
    pseudonyms: IntGaugeVec,
    pseudonyms_other: IntGauge,
    namespaces: IntGauge,
    refused_commits: IntCounter,
    audit: IntCounterVec,
    upstream: UpstreamNames,
    jobs: Arc<JobMetrics>,
}

/// Upstream's metric names (prometheus-net in the .NET service), which
/// existing dashboards and alerts query; each mirrors one of ours.
struct UpstreamNames {
    /// `vfps_store_operation_duration_seconds{operation="upsert_pseudonyms"}`.
    upsert_duration: Histogram,
    /// `vfps_create_batch_round_trip_seconds`.
    batch_upsert_duration: Histogram,
    /// Entries in this replica's caches (namespaces and pseudonyms).
    cache_entries: IntGauge,
    /// As `vfps_pseudonym_cache_requests_total` by result; gauges, as upstream's.
    cache_hits: IntGauge,
    cache_misses: IntGauge,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Waits in the coalescer's queue: zero when idle, so finer at the low end.
const WAIT_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Rows per batch, up to the largest `VFPS_MAX_CREATE_BATCH` worth telling apart.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "vfps_requests_total",
                "Requests by transport, method and status code",
            ),
            &["transport", "method", "code"],
        )?;
        let request_duration = HistogramVec::new(
            HistogramOpts::new("vfps_request_duration_seconds", "Request latency")
                .buckets(LATENCY_BUCKETS.to_vec()),
            &["transport", "method"],
        )?;
        let store_duration = HistogramVec::new(
            HistogramOpts::new(
                "vfps_store_operation_duration_seconds",
                "Duration of one store operation attempt",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["operation"],
        )?;
        let batch_size = Histogram::with_opts(
            HistogramOpts::new(
                "vfps_create_batch_size",
                "Distinct rows per coalesced upsert (Creates of one original count once)",
            )
            .buckets(BATCH_BUCKETS.to_vec()),
        )?;
        let lookup_batch_size = Histogram::with_opts(
            HistogramOpts::new(
                "vfps_get_batch_size",
                "Distinct pseudonyms per coalesced lookup of Gets (PostgreSQL only)",
            )
            .buckets(BATCH_BUCKETS.to_vec()),
        )?;
        let queue_wait = Histogram::with_opts(
            HistogramOpts::new(
                "vfps_create_queue_wait_seconds",
                "Time a Create waited in the coalescer's queue until its batch started",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
        )?;
        let batch_round_trip = Histogram::with_opts(
            HistogramOpts::new(
                "vfps_create_batch_round_trip_seconds",
                "Database round trip of one batch upsert statement (including taking a connection), answered or failed",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )?;
        let queue_depth = IntGauge::new(
            "vfps_create_queue_depth",
            "Creates waiting in the coalescer's queue for a batch",
        )?;
        let retries = IntCounterVec::new(
            Opts::new(
                "vfps_store_retries_total",
                "Store operations retried after a transient error, by cause",
            ),
            &["reason"],
        )?;
        for cause in TransientCause::ALL {
            retries.with_label_values(&[cause.as_str()]);
        }
        let collisions = IntCounter::new(
            "vfps_pseudonym_collisions_total",
            "Generated pseudonyms that collided and were regenerated",
        )?;
        let pseudonym_cache = IntCounterVec::new(
            Opts::new(
                "vfps_pseudonym_cache_requests_total",
                "Creates answered from this replica's pseudonym cache (hit) or not (miss)",
            ),
            &["result"],
        )?;
        let pool = IntGaugeVec::new(
            Opts::new("vfps_db_pool_connections", "Database connections by state"),
            &["state"],
        )?;
        let pseudonyms = IntGaugeVec::new(
            Opts::new(
                "vfps_pseudonyms",
                "Stored pseudonyms per namespace (periodically refreshed)",
            ),
            &["namespace"],
        )?;
        let pseudonyms_other = IntGauge::new(
            "vfps_pseudonyms_other_namespaces",
            "Stored pseudonyms in the namespaces without a vfps_pseudonyms series",
        )?;
        let namespaces = IntGauge::new("vfps_namespaces", "Namespaces (periodically refreshed)")?;
        let refused_commits = IntCounter::new(
            "vfps_db_refused_commits_total",
            "Commits refused because the database warned while committing (the synchronous \
             standby's confirmation was cancelled): the callers were told UNAVAILABLE",
        )?;
        let audit = IntCounterVec::new(
            Opts::new(
                "vfps_audit_events_total",
                "Audited calls (reverse lookup, List, namespace delete) by operation and outcome",
            ),
            &["operation", "outcome"],
        )?;
        let upstream = UpstreamNames {
            upsert_duration: Histogram::with_opts(HistogramOpts::new(
                "vfps_upsert_duration_seconds",
                "Duration of one attempt at upserting a pseudonym (as upstream names it; \
                 the time in the coalescer's batch included)",
            ))?,
            batch_upsert_duration: Histogram::with_opts(HistogramOpts::new(
                "vfps_batch_upsert_duration_seconds",
                "Duration of one batch upsert statement (as upstream names it)",
            ))?,
            cache_entries: IntGauge::new(
                "vfps_cache_entries",
                "Entries in this replica's namespace and pseudonym caches",
            )?,
            cache_hits: IntGauge::new(
                "vfps_cache_hits_total",
                "Creates answered from this replica's pseudonym cache",
            )?,
            cache_misses: IntGauge::new(
                "vfps_cache_misses_total",
                "Creates the pseudonym cache could not answer (with the cache on)",
            )?,
        };
        registry.register(Box::new(upstream.upsert_duration.clone()))?;
        registry.register(Box::new(upstream.batch_upsert_duration.clone()))?;
        registry.register(Box::new(upstream.cache_entries.clone()))?;
        registry.register(Box::new(upstream.cache_hits.clone()))?;
        registry.register(Box::new(upstream.cache_misses.clone()))?;
        registry.register(Box::new(audit.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_duration.clone()))?;
        registry.register(Box::new(store_duration.clone()))?;
        registry.register(Box::new(batch_size.clone()))?;
        registry.register(Box::new(lookup_batch_size.clone()))?;
        registry.register(Box::new(queue_wait.clone()))?;
        registry.register(Box::new(batch_round_trip.clone()))?;
        registry.register(Box::new(queue_depth.clone()))?;
        registry.register(Box::new(retries.clone()))?;
        registry.register(Box::new(collisions.clone()))?;
        registry.register(Box::new(pseudonym_cache.clone()))?;
        registry.register(Box::new(pool.clone()))?;
        registry.register(Box::new(pseudonyms.clone()))?;
        registry.register(Box::new(pseudonyms_other.clone()))?;
        registry.register(Box::new(namespaces.clone()))?;
        registry.register(Box::new(refused_commits.clone()))?;
        let jobs = Arc::new(JobMetrics::new(&registry)?);
        Ok(Self {
            inner: Arc::new(Inner {
                registry,
                last_counts: Default::default(),
                requests,
                request_duration,
                store_duration,
                batch_size,
                lookup_batch_size,
                queue_wait,
                batch_round_trip,
                queue_depth,
                retries,
                collisions,
                pseudonym_cache,
                pool,
                pseudonyms_other,
                namespaces,
                refused_commits,
                pseudonyms,
                audit,
                upstream,
                jobs,
            }),
        })
    }

    /// What the Get coalescer reports to.
    pub fn lookup_batches(&self) -> Arc<dyn Observer> {
        Arc::new(LookupBatches(self.inner.lookup_batch_size.clone()))
    }

    /// Records one finished request.
    pub fn observe_request(
        &self,
        transport: &str,
        method: &str,
        elapsed: Duration,
        result: Option<&Error>,
    ) {
        let code = code_name(result.map(|e| e.kind));
        // A bug or an unexpected database state: the caller sees a 500 or
        // INTERNAL, the operator needs the cause (messages never carry values).
        if let Some(e) = result.filter(|e| e.kind == ErrorKind::Internal) {
            tracing::error!(transport, method, error = %e.message, "call failed with an internal error");
        }
        self.inner
            .requests
            .with_label_values(&[transport, method, code])
            .inc();
        self.inner
            .request_duration
            .with_label_values(&[transport, method])
            .observe(elapsed.as_secs_f64());
    }

    pub fn observe_store(&self, operation: &str, elapsed: Duration) {
        if operation == "upsert_pseudonyms" {
            self.inner
                .upstream
                .upsert_duration
                .observe(elapsed.as_secs_f64());
        }
        self.inner
            .store_duration
            .with_label_values(&[operation])
            .observe(elapsed.as_secs_f64());
    }

    /// One transient store error that is retried.
    pub fn retry(&self, cause: TransientCause) {
        self.inner
            .retries
            .with_label_values(&[cause.as_str()])
            .inc();
    }

    pub fn pseudonym_cache(&self, hit: bool) {
        self.inner
            .pseudonym_cache
            .with_label_values(&[if hit { "hit" } else { "miss" }])
            .inc();
        let upstream = &self.inner.upstream;
        if hit {
            upstream.cache_hits.inc();
        } else {
            upstream.cache_misses.inc();
        }
    }

    /// What CSV job runners report.
    pub fn jobs(&self) -> Arc<JobMetrics> {
        self.inner.jobs.clone()
    }

    pub fn audit(&self, operation: &str, outcome: &str) {
        self.inner
            .audit
            .with_label_values(&[operation, outcome])
            .inc();
    }

    pub fn pseudonym_collision(&self) {
        self.inner.collisions.inc();
    }

    /// Replaces the per-namespace pseudonym counts: the largest namespaces
    /// labelled, the rest summed.
    pub fn set_pseudonym_counts(&self, counts: &[(String, i64)]) {
        let mut by_size: Vec<&(String, i64)> = counts.iter().collect();
        by_size.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.inner.pseudonyms.reset();
        for (ns, n) in by_size.iter().take(MAX_NAMESPACE_LABELS) {
            self.inner
                .pseudonyms
                .with_label_values(&[ns.as_str()])
                .set(*n);
        }
        self.inner.pseudonyms_other.set(
            by_size
                .iter()
                .skip(MAX_NAMESPACE_LABELS)
                .map(|(_, n)| *n)
                .sum(),
        );
        self.inner.namespaces.set(counts.len() as i64);
        if let Ok(mut last) = self.inner.last_counts.write() {
            *last = Arc::new(counts.to_vec());
        }
    }

    /// The pseudonyms per namespace at the last refresh (empty before it).
    pub fn pseudonym_counts(&self) -> Arc<Vec<(String, i64)>> {
        self.inner
            .last_counts
            .read()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// The text exposition, with pool and cache gauges read now.
    pub fn render(&self, store: &dyn Store, cache_entries: usize) -> String {
        let upstream = &self.inner.upstream;
        upstream
            .cache_entries
            .set(i64::try_from(cache_entries).unwrap_or(i64::MAX));
        let s = store.pool_status();
        self.inner
            .pool
            .with_label_values(&["in_use"])
            .set(s.in_use as i64);
        self.inner
            .pool
            .with_label_values(&["idle"])
            .set(s.idle as i64);
        self.inner
            .pool
            .with_label_values(&["max"])
            .set(s.max_size as i64);
        self.inner
            .pool
            .with_label_values(&["waiting"])
            .set(s.waiting as i64);
        // Only this adds to the counter: it equals the store's count as of the
        // previous scrape.
        let refused = store.refused_commits();
        let seen = self.inner.refused_commits.get();
        if refused > seen {
            self.inner.refused_commits.inc_by(refused - seen);
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.inner.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Observes the Get coalescer: its batch sizes. (A Get's time is in
/// `vfps_store_operation_duration_seconds{operation="get_pseudonym"}`.)
struct LookupBatches(Histogram);

impl Observer for LookupBatches {
    fn batch_started(&self, rows: usize) {
        self.0.observe(rows as f64);
    }
}

impl Observer for Metrics {
    fn enqueued(&self) {
        self.inner.queue_depth.inc();
    }
    fn left_queue(&self, n: usize) {
        self.inner.queue_depth.sub(n as i64);
    }
    fn batch_started(&self, rows: usize) {
        self.inner.batch_size.observe(rows as f64);
    }
    fn waited(&self, wait: Duration) {
        self.inner.queue_wait.observe(wait.as_secs_f64());
    }
    fn statement(&self, elapsed: Duration) {
        self.inner.batch_round_trip.observe(elapsed.as_secs_f64());
        self.inner
            .upstream
            .batch_upsert_duration
            .observe(elapsed.as_secs_f64());
    }
}

/// Refreshes the pseudonym counts every `interval` until `shutdown`.
pub async fn refresh_counts(
    metrics: Metrics,
    store: Arc<dyn Store>,
    interval: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut counts = crate::counts::PseudonymCounts::default();
    loop {
        match counts.refresh(&store).await {
            Ok(counts) => metrics.set_pseudonym_counts(&counts),
            Err(e) => tracing::debug!(error = %e, "cannot refresh pseudonym counts"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod label_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_the_largest_namespaces_get_a_series_and_the_rest_are_summed() {
        let m = Metrics::new().unwrap();
        let counts: Vec<(String, i64)> = (0..MAX_NAMESPACE_LABELS as i64 + 5)
            .map(|i| (format!("ns{i:03}"), i + 1))
            .collect();
        m.set_pseudonym_counts(&counts);
        let series = prometheus::core::Collector::collect(&m.inner.pseudonyms)[0]
            .get_metric()
            .len();
        assert_eq!(series, MAX_NAMESPACE_LABELS);
        // The five smallest (1..=5) are summed.
        assert_eq!(m.inner.pseudonyms_other.get(), 15);
        assert_eq!(m.inner.namespaces.get(), MAX_NAMESPACE_LABELS as i64 + 5);
        let largest = m.inner.pseudonyms.with_label_values(&["ns104"]).get();
        assert_eq!(largest, 105);
    }
}
