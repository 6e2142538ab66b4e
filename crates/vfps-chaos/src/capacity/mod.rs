//! `vfps-chaos capacity`: a capacity sweep against any running vfps. The
//! offered rate of the open-model generator ([`crate::workload::generator`],
//! the same schedule a load run uses) is raised step by step — like k6's
//! ramping-arrival-rate executor — until a step's p99 latency exceeds its
//! target or a call fails; the **knee** is the highest offered rate that held.
//!
//! Each step is its own window: calls are issued on schedule whatever the
//! service answers, up to the in-flight cap (a call not issued is a failure),
//! and the step ends when its last call has ended, each within its deadline.
//! Calls are not retried: an `UNAVAILABLE` is a failure here, not a delay.
//! Latency counts from each call's intended send time, so a service that falls
//! behind shows in p99 rather than in a generator that waited.
//!
//! # Layout
//! - this file: the sweep, its progress lines, `capacity.json`,
//!   `capacity-timeline.csv` (every step's seconds), the chart and the summary
//!   line.
//! - [`config`]: the flags, validated at once; the plan of rates.
//! - [`knee`]: what a step measured, whether it held, the knee and why the
//!   sweep stopped (pure, so a saved result can be judged again).

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use vfps_client::RetryPolicy;

use crate::{
    history::{self, OpCounts, Row, Timeline},
    mix::Mix,
    operation::Operation,
    report::{
        self,
        sweep::{SweepChart, SweepPoint},
    },
    run,
    workload::{
        capacity::CreateGet,
        generator::{self, Schedule},
    },
};

pub mod config;
pub mod knee;

pub use config::CapacityConfig;
pub use knee::{Breach, StepResult, Stop};

/// Counted for calls not issued because the in-flight cap was reached.
pub const NOT_ISSUED: &str = "NOT_ISSUED";

/// `capacity.json`: the settings, every step, the knee and why the sweep
/// stopped. Rewritten after every step, so an interrupted sweep keeps what it
/// measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    pub address: String,
    pub namespace: String,
    pub mix: String,
    pub p99_target_ms: f64,
    pub step_seconds: u64,
    pub call_deadline_seconds: f64,
    pub max_in_flight: u32,
    pub seed: u64,
    /// The warm-up (`--warm-up-seconds`, `None` for 0): calls at the first
    /// step's rate before the first step, measured like a step but never
    /// judged (and not in the timeline).
    #[serde(default)]
    pub warm_up: Option<StepResult>,
    /// The planned rates; the sweep stops at the first step that breaks.
    pub planned_per_second: Vec<u32>,
    /// Wall-clock start (Unix seconds).
    pub started_unix: f64,
    pub steps: Vec<StepResult>,
    /// The knee's offered rate: the highest that held, below the first step
    /// that broke (or the last planned step when none broke).
    pub knee_per_second: Option<u32>,
    pub knee: Option<StepResult>,
    /// Why the sweep ended; `None` only before its first step.
    pub stop: Option<Stop>,
    pub warnings: Vec<String>,
}

impl SweepReport {
    /// Knee and stop from the steps so far.
    fn judge(&mut self) {
        self.knee = knee::knee(&self.steps, self.p99_target_ms).cloned();
        self.knee_per_second = self.knee.as_ref().map(|k| k.offered_per_second);
        self.stop = knee::stop(&self.steps, self.p99_target_ms);
    }

    /// The one-line result: the knee, and what broke after it.
    pub fn summary(&self) -> String {
        let target = self.p99_target_ms;
        let broke = match &self.stop {
            Some(Stop::Broke {
                offered_per_second,
                breaches,
            }) => {
                let step = self
                    .steps
                    .iter()
                    .find(|s| s.offered_per_second == *offered_per_second);
                let why: Vec<String> = step
                    .map(|s| breaches.iter().map(|b| b.describe(s, target)).collect())
                    .unwrap_or_default();
                Some((*offered_per_second, why.join(", ")))
            }
            _ => None,
        };
        match (&self.knee, broke) {
            (Some(k), Some((rate, why))) => format!(
                "capacity knee: {} calls/s (p50 {}, p99 {} <= {target} ms, achieved {:.1}/s, no failures); {rate} calls/s broke: {why}",
                k.offered_per_second,
                ms(k.p50_ms),
                ms(k.p99_ms),
                k.achieved_per_second
            ),
            (Some(k), None) => format!(
                "capacity knee: at least {} calls/s (p99 {} <= {target} ms, achieved {:.1}/s): every planned step held — raise --max-rate-per-second or --max-steps to find the knee",
                k.offered_per_second,
                ms(k.p99_ms),
                k.achieved_per_second
            ),
            (None, Some((rate, why))) => format!(
                "capacity knee: none — the first step, {rate} calls/s, already broke ({why}); start lower (--start-rate-per-second) or raise --p99-target-ms"
            ),
            (None, None) => "capacity knee: none — no step ran".into(),
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1} ms"))
}

/// Runs one step at `rate`: a fresh timeline, the shared workload, the
/// generator's own schedule.
async fn step(
    rate: u32,
    seconds: u64,
    cfg: &CapacityConfig,
    mix: &Mix,
    workload: &Arc<CreateGet>,
) -> (StepResult, Vec<Row>) {
    let timeline = Arc::new(Timeline::new(seconds));
    let schedule = Schedule {
        rate_per_second: rate,
        seconds,
        deadline: cfg.call_deadline(),
        max_in_flight: cfg.max_in_flight as usize,
        mix: mix.clone(),
    };
    // Failures of an earlier step must not count in this one.
    let _ = workload.take_failures();
    let start = Instant::now();
    let totals = generator::run(&schedule, workload.clone(), timeline.clone(), None).await;
    let rows = timeline.rows();
    let percentiles = timeline.percentiles();
    let sum = |f: fn(&Row) -> u64| rows.iter().map(f).sum::<u64>();
    let ok = sum(|r| r.ok);
    let span = workload
        .last_ok()
        .filter(|t| *t > start)
        .map_or(0.0, |t| (t - start).as_secs_f64())
        .max(seconds as f64);
    let mut failures_by_code = workload.take_failures();
    if totals.shed > 0 {
        failures_by_code.insert(NOT_ISSUED.into(), totals.shed);
    }
    let mut operations = std::collections::BTreeMap::new();
    for op in [Operation::Create, Operation::Get] {
        let mut total = OpCounts::default();
        for r in &rows {
            let c = r.ops[op.index()];
            total.offered += c.offered;
            total.ok += c.ok;
            total.failed += c.failed;
        }
        if total.offered > 0 {
            operations.insert(op.name().to_owned(), total);
        }
    }
    let result = StepResult {
        offered_per_second: rate,
        seconds,
        offered: sum(|r| r.offered),
        ok,
        failed: sum(|r| r.failed),
        not_issued: totals.shed,
        achieved_per_second: ok as f64 / span,
        p50_ms: percentiles.map(|p| p.p50_ms),
        p99_ms: percentiles.map(|p| p.p99_ms),
        max_ms: rows.iter().map(|r| r.max_ms).fold(0.0, f64::max),
        dispatch_lag_p99_ms: totals.p99_dispatch_lag_micros as f64 / 1000.0,
        load_average_1m: load_average(),
        failures_by_code,
        operations,
    };
    (result, rows)
}

/// Every step's seconds, as the load run's timeline with the step in front:
/// where in a step its latency went.
const TIMELINE: &str = "capacity-timeline.csv";

fn timeline_rows(step: usize, rate: u32, rows: &[Row]) -> String {
    rows.iter()
        .map(|r| format!("{step},{rate},{}\n", r.to_csv()))
        .collect()
}

/// The 1-minute load average, where the system tells it.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The progress line of one step (stderr).
fn progress_line(i: usize, of: usize, s: &StepResult, target_ms: f64) -> String {
    let breaches = s.breaches(target_ms);
    let verdict = if breaches.is_empty() {
        "held".to_owned()
    } else {
        let why: Vec<String> = breaches.iter().map(|b| b.describe(s, target_ms)).collect();
        format!("BROKE: {}", why.join(", "))
    };
    let lag = if s.dispatch_lag_p99_ms > run::MAX_P99_DISPATCH_LAG.as_secs_f64() * 1000.0 {
        format!(
            " (generator lagged: p99 {:.1} ms behind schedule)",
            s.dispatch_lag_p99_ms
        )
    } else {
        String::new()
    };
    format!(
        "capacity step {i}/{of}: offered {}/s achieved {:.1}/s p50 {} p99 {} failures {} — {verdict}{lag}",
        s.offered_per_second,
        s.achieved_per_second,
        ms(s.p50_ms),
        ms(s.p99_ms),
        s.failures(),
    )
}

/// The progress line of the warm-up (stderr): what it saw, judged by nobody.
fn warm_up_line(s: &StepResult) -> String {
    format!(
        "capacity warm-up: {} s at {}/s achieved {:.1}/s p50 {} p99 {} failures {} (not judged)",
        s.seconds,
        s.offered_per_second,
        s.achieved_per_second,
        ms(s.p50_ms),
        ms(s.p99_ms),
        s.failures(),
    )
}

/// `capacity.json`, `capacity.svg` and `capacity.png`.
fn write(dir: &Path, report: &SweepReport, with_chart: bool) -> anyhow::Result<()> {
    report::write_file(dir, "capacity.json", serde_json::to_string_pretty(report)?)?;
    if !with_chart {
        return Ok(());
    }
    let points: Vec<SweepPoint> = report
        .steps
        .iter()
        .map(|s| SweepPoint {
            offered_per_second: f64::from(s.offered_per_second),
            achieved_per_second: s.achieved_per_second,
            p50_ms: s.p50_ms,
            p99_ms: s.p99_ms,
            held: s.held(report.p99_target_ms),
        })
        .collect();
    let title = match report.knee_per_second {
        Some(k) => format!(
            "vfps capacity sweep — knee {k} calls/s at p99 ≤ {} ms ({})",
            report.p99_target_ms, report.mix
        ),
        None => format!(
            "vfps capacity sweep — no knee at p99 ≤ {} ms ({})",
            report.p99_target_ms, report.mix
        ),
    };
    let chart = SweepChart {
        title: &title,
        points: &points,
        p99_target_ms: report.p99_target_ms,
        knee_per_second: report.knee_per_second.map(f64::from),
    };
    report::write_file(dir, "capacity.svg", chart.svg()?)?;
    report::write_file(dir, "capacity.png", chart.png()?)
}

/// The sweep: settings checked, the service reached, steps until one breaks
/// or the plan ends, the results written. `Err` is a harness failure (bad
/// settings, nothing reachable, an output that cannot be written); a sweep
/// whose first step broke is `Ok` without a knee.
pub async fn sweep(cfg: &CapacityConfig, progress: bool) -> anyhow::Result<SweepReport> {
    cfg.validate()?;
    let mix = cfg.mix().map_err(anyhow::Error::msg)?;
    let dir = cfg.output_dir.as_path();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let seed = cfg.seed.unwrap_or_else(rand::random);
    let rates = cfg.rates();
    tracing::info!(seed, steps = rates.len(), "capacity sweep starting");
    // No retries: a sweep measures what the service answers, and a retried
    // UNAVAILABLE would read as a slow success.
    let once = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let (_, client) = run::reach(&cfg.service, &cfg.credentials, once, cfg.call_deadline()).await?;
    let workload = CreateGet::new(client, cfg.service.namespace.clone(), seed);
    let mut report = SweepReport {
        address: cfg.service.address.clone(),
        namespace: cfg.service.namespace.clone(),
        mix: mix.to_string(),
        p99_target_ms: cfg.p99_target_ms,
        step_seconds: cfg.step_seconds,
        call_deadline_seconds: cfg.call_deadline_seconds,
        max_in_flight: cfg.max_in_flight,
        seed,
        warm_up: None,
        planned_per_second: rates.clone(),
        started_unix: run::unix_now(),
        steps: Vec::new(),
        knee_per_second: None,
        knee: None,
        stop: None,
        warnings: Vec::new(),
    };
    if progress {
        eprintln!(
            "capacity sweep: {} steps of {} s, {} → {} calls/s, p99 target {} ms, mix {mix}, seed {seed}",
            rates.len(),
            cfg.step_seconds,
            rates.first().copied().unwrap_or_default(),
            rates.last().copied().unwrap_or_default(),
            cfg.p99_target_ms
        );
    }
    if let (Some(&rate), 1..) = (rates.first(), cfg.warm_up_seconds) {
        let (result, _) = step(rate, cfg.warm_up_seconds, cfg, &mix, &workload).await;
        if progress {
            eprintln!("{}", warm_up_line(&result));
        }
        if result.failures() > 0 {
            report.warnings.push(format!(
                "the warm-up at {rate} calls/s had {} failures: {:?}",
                result.failures(),
                result.failures_by_code
            ));
        }
        report.warm_up = Some(result);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut timeline = format!("step,offered_per_second,{}\n", history::csv_header());
    for (i, rate) in rates.iter().copied().enumerate() {
        let (result, rows) = step(rate, cfg.step_seconds, cfg, &mix, &workload).await;
        timeline.push_str(&timeline_rows(i + 1, rate, &rows));
        let held = result.held(cfg.p99_target_ms);
        if progress {
            eprintln!(
                "{}",
                progress_line(i + 1, rates.len(), &result, cfg.p99_target_ms)
            );
        }
        if result.dispatch_lag_p99_ms > run::MAX_P99_DISPATCH_LAG.as_secs_f64() * 1000.0 {
            report.warnings.push(format!(
                "at {rate} calls/s the generator's p99 dispatch lag was {:.1} ms: the step measured the generator as well as the service",
                result.dispatch_lag_p99_ms
            ));
        }
        report.steps.push(result);
        report.judge();
        write(dir, &report, false)?;
        report::write_file(dir, TIMELINE, &timeline)?;
        if !held {
            break;
        }
        // A short breath between steps: the next one starts on an idle service.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    write(dir, &report, true)?;
    println!("{}", report.summary());
    if progress {
        eprintln!(
            "capacity sweep written to {} (capacity.json, capacity.svg, capacity.png, {TIMELINE})",
            dir.display()
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::{knee::tests::step, *};

    fn report(steps: Vec<StepResult>) -> SweepReport {
        let mut r = SweepReport {
            address: "http://x".into(),
            namespace: "n".into(),
            mix: "create=100".into(),
            p99_target_ms: 100.0,
            step_seconds: 1,
            call_deadline_seconds: 5.0,
            max_in_flight: 10,
            seed: 1,
            warm_up: None,
            planned_per_second: vec![],
            started_unix: 0.0,
            steps,
            knee_per_second: None,
            knee: None,
            stop: None,
            warnings: vec![],
        };
        r.judge();
        r
    }

    #[test]
    fn the_summary_names_the_knee_and_what_broke_after_it() {
        let r = report(vec![step(100, 10.0, 0), step(200, 300.0, 2)]);
        assert_eq!(r.knee_per_second, Some(100));
        let line = r.summary();
        assert!(line.starts_with("capacity knee: 100 calls/s"), "{line}");
        assert!(
            line.contains("200 calls/s broke: 2 failed, 0 not issued, p99 300.0 ms > 100 ms"),
            "{line}"
        );
        let none = report(vec![step(100, 300.0, 0)]).summary();
        assert!(
            none.contains("none — the first step, 100 calls/s"),
            "{none}"
        );
        let open = report(vec![step(100, 10.0, 0)]).summary();
        assert!(open.contains("at least 100 calls/s"), "{open}");
    }

    #[test]
    fn a_progress_line_has_offered_achieved_percentiles_and_failures() {
        let line = progress_line(2, 5, &step(200, 300.0, 2), 100.0);
        assert_eq!(
            line,
            "capacity step 2/5: offered 200/s achieved 200.0/s p50 150.0 ms p99 300.0 ms failures 2 — BROKE: 2 failed, 0 not issued, p99 300.0 ms > 100 ms"
        );
    }
}
