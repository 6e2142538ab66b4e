//! The open-model generator: calls are dispatched on a wall-clock schedule and the
//! dispatcher never waits for responses. A call beyond `max_in_flight` is shed and
//! counted as a failure. Results belong to the second in which the call was
//! offered; latency and each call's deadline count from its intended send time.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::time::Instant;
use vfps_client::Until;

use super::{Served, Workload};
use crate::history::{Event, Timeline};
use crate::mix::Mix;

/// What drives one load window: its rate, length, call deadline, in-flight cap
/// and its mix of operations.
pub struct Schedule {
    pub rate_per_second: u32,
    pub seconds: u64,
    pub deadline: Duration,
    pub max_in_flight: usize,
    pub mix: Mix,
}

/// Totals of a window, besides the timeline and what the workload recorded.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Calls shed at the in-flight cap.
    pub shed: u64,
    /// Worst lag between intended and actual dispatch, in microseconds.
    pub max_dispatch_lag_micros: u64,
    /// Median and 99th percentile of that lag, in microseconds.
    pub p50_dispatch_lag_micros: u64,
    pub p99_dispatch_lag_micros: u64,
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
    workload: Arc<dyn Workload>,
    timeline: Arc<Timeline>,
    progress: Option<Box<dyn Fn() -> String + Send + Sync>>,
) -> Totals {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut lags = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .expect("valid histogram bounds");
    let mut totals = Totals::default();
    let rate = u64::from(schedule.rate_per_second);
    let total = rate * schedule.seconds;
    let interval = Duration::from_secs(1) / schedule.rate_per_second;
    let start = Instant::now();
    let mut dealer = schedule.mix.dealer();

    let reporter = progress.map(|extra| {
        let timeline = timeline.clone();
        let seconds = schedule.seconds;
        tokio::spawn(async move {
            for s in 0..seconds {
                tokio::time::sleep_until(start + Duration::from_secs(s + 1)).await;
                if let Some((offered, ok, failed, shed, p99)) = timeline.snapshot(s) {
                    eprintln!(
                        "load t={:>4}s offered={offered} ok={ok} failed={failed} shed={shed} p99={p99:.1}ms {}",
                        s + 1,
                        extra()
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
        let Some(op) = dealer.next() else { break };
        timeline.record(second, op, Event::Offered, None);
        if in_flight.load(Ordering::Relaxed) >= schedule.max_in_flight {
            timeline.record(second, op, Event::Shed, None);
            totals.shed += 1;
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let call = workload
            .clone()
            .start(op, second, Until(intended + schedule.deadline));
        let (timeline, in_flight) = (timeline.clone(), in_flight.clone());
        tasks.spawn(async move {
            let served = call.await;
            let event = match served {
                Served::Yes => Event::Ok,
                Served::No => Event::Failed,
            };
            timeline.record(second, op, event, Some(intended.elapsed()));
            in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        // Reap finished calls without waiting, so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    if let Some(r) = reporter {
        r.abort();
    }
    totals.max_dispatch_lag_micros = lags.max();
    totals.p50_dispatch_lag_micros = lags.value_at_quantile(0.5);
    totals.p99_dispatch_lag_micros = lags.value_at_quantile(0.99);
    totals
}
