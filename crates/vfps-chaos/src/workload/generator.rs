//! The open-model generator: calls are dispatched on a wall-clock schedule and the
//! dispatcher never waits for responses. A call beyond `max_in_flight` is shed and
//! counted as a failure. Results belong to the second in which the call was
//! offered; latency is measured from the intended send time.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use vfps_client::{Client, Outcome};

use crate::history::{Event, Ledger, Status, Timeline};

/// What drives one load window: its rate, length, call deadline, in-flight cap
/// and the seed of its originals.
pub struct Schedule {
    pub namespace: String,
    pub rate_per_second: u32,
    pub seconds: u64,
    pub deadline: Duration,
    pub max_in_flight: usize,
    pub seed: u64,
}

/// Totals of a window, besides the timeline and the ledger.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Failures (and sheds, as `SHED`) by status code name.
    pub failures_by_code: BTreeMap<String, u64>,
    /// Worst lag between intended and actual dispatch, in microseconds.
    pub max_dispatch_lag_micros: u64,
    /// Median and 99th percentile of that lag, in microseconds.
    pub p50_dispatch_lag_micros: u64,
    pub p99_dispatch_lag_micros: u64,
}

/// A call to make: the generator calls it with an original and a deadline.
pub trait Call: Send + Sync + 'static {
    fn create(
        &self,
        original: String,
        deadline: Duration,
    ) -> futures::future::BoxFuture<'static, Outcome<String>>;
}

/// Creates through the vfps client.
pub struct CreateCall {
    pub client: Client,
    pub namespace: String,
}

impl Call for CreateCall {
    fn create(
        &self,
        original: String,
        deadline: Duration,
    ) -> futures::future::BoxFuture<'static, Outcome<String>> {
        let client = self.client.clone();
        let namespace = self.namespace.clone();
        Box::pin(async move {
            match client.create(&namespace, &original, deadline).await {
                Outcome::Ok(p) => Outcome::Ok(p.pseudonym_value),
                Outcome::Fail(c) => Outcome::Fail(c),
                Outcome::Indeterminate(c) => Outcome::Indeterminate(c),
            }
        })
    }
}

/// A synthetic original: 32 hex digits from the seeded generator (no personal data).
fn original(rng: &mut rand::rngs::StdRng) -> String {
    format!("rs-{:032x}", rng.random::<u128>())
}

/// Waits for `at` precisely: tokio's timer rounds up to whole milliseconds, so
/// the last stretch yields to other tasks (the calls in flight) until it is time.
async fn wait_until(at: Instant) {
    const TIMER_SLACK: Duration = Duration::from_millis(2);
    if at.saturating_duration_since(Instant::now()) > TIMER_SLACK {
        tokio::time::sleep_until(at - TIMER_SLACK).await;
    }
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

/// Runs the window. Returns once every dispatched call has ended.
pub async fn run(
    schedule: &Schedule,
    call: Arc<dyn Call>,
    timeline: Arc<Timeline>,
    ledger: Arc<Ledger>,
    progress: bool,
) -> Totals {
    let totals = Arc::new(Mutex::new(Totals::default()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut lags = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .expect("valid histogram bounds");
    let mut rng = rand::rngs::StdRng::seed_from_u64(schedule.seed);
    let rate = u64::from(schedule.rate_per_second);
    let total = rate * schedule.seconds;
    let interval = Duration::from_secs(1) / schedule.rate_per_second;
    let start = Instant::now();

    let reporter = progress.then(|| {
        let (timeline, ledger) = (timeline.clone(), ledger.clone());
        let seconds = schedule.seconds;
        tokio::spawn(async move {
            for s in 0..seconds {
                tokio::time::sleep_until(start + Duration::from_secs(s + 1)).await;
                if let Some((offered, ok, failed, shed, p99)) = timeline.snapshot(s) {
                    eprintln!(
                        "load t={:>4}s offered={offered} ok={ok} failed={failed} shed={shed} p99={p99:.1}ms ledger={}",
                        s + 1,
                        ledger.len()
                    );
                }
            }
        })
    });

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        let intended = start + interval * u32::try_from(i).unwrap_or(u32::MAX);
        wait_until(intended).await;
        let lag = Instant::now().saturating_duration_since(intended);
        let _ = lags.record(
            u64::try_from(lag.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(1, 3_600_000_000),
        );
        let second = i / rate;
        timeline.record(second, Event::Offered, None);
        if in_flight.load(Ordering::Relaxed) >= schedule.max_in_flight {
            timeline.record(second, Event::Shed, None);
            if let Ok(mut t) = totals.lock() {
                *t.failures_by_code.entry("SHED".into()).or_default() += 1;
            }
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let original = original(&mut rng);
        let (call, timeline, ledger, totals, in_flight) = (
            call.clone(),
            timeline.clone(),
            ledger.clone(),
            totals.clone(),
            in_flight.clone(),
        );
        let deadline = schedule.deadline;
        tasks.spawn(async move {
            let outcome = call.create(original.clone(), deadline).await;
            let latency = intended.elapsed();
            match outcome {
                Outcome::Ok(pseudonym) => {
                    timeline.record(second, Event::Ok, Some(latency));
                    ledger.record(second, Status::Ok, original, Some(pseudonym), None);
                }
                Outcome::Fail(code) => {
                    timeline.record(second, Event::Failed, Some(latency));
                    if let Ok(mut t) = totals.lock() {
                        *t.failures_by_code.entry(format!("{code:?}")).or_default() += 1;
                    }
                }
                Outcome::Indeterminate(code) => {
                    timeline.record(second, Event::Failed, Some(latency));
                    ledger.record(
                        second,
                        Status::Indeterminate,
                        original,
                        None,
                        Some(format!("{code:?}")),
                    );
                    if let Ok(mut t) = totals.lock() {
                        *t.failures_by_code.entry(format!("{code:?}")).or_default() += 1;
                    }
                }
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        // Reap finished calls without waiting, so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    if let Some(r) = reporter {
        r.abort();
    }
    ledger.flush();
    let mut t = totals.lock().map(|t| t.clone()).unwrap_or_default();
    t.max_dispatch_lag_micros = lags.max();
    t.p50_dispatch_lag_micros = lags.value_at_quantile(0.5);
    t.p99_dispatch_lag_micros = lags.value_at_quantile(0.99);
    t
}
