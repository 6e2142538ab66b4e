//! What one step measured, whether it held, and the knee: pure functions of
//! the steps, so a saved `capacity.json` can be judged again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::history::OpCounts;

/// What one step of the sweep measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The scheduled rate: calls per second the generator offered.
    pub offered_per_second: u32,
    pub seconds: u64,
    /// Calls scheduled in the step (rate × seconds).
    pub offered: u64,
    pub ok: u64,
    /// Calls issued and answered other than OK, or not at all in time.
    pub failed: u64,
    /// Calls not issued: the in-flight cap was reached.
    pub not_issued: u64,
    /// Successful calls per second of the step's wall time (from its first
    /// intended send until its last successful answer, at least the step's
    /// length): what the service sustained.
    pub achieved_per_second: f64,
    /// Latency from each call's intended send time, over every call of the
    /// step (three significant digits); `None` without calls.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: f64,
    /// The generator's own lag behind its schedule (p99): above a millisecond
    /// the step measured the generator as much as the service.
    pub dispatch_lag_p99_ms: f64,
    /// The machine's 1-minute load average at the end of the step (Linux),
    /// to tell a noisy measurement when the generator shares the machine.
    #[serde(default)]
    pub load_average_1m: Option<f64>,
    /// Failures by status code (`NOT_ISSUED` for the cap).
    pub failures_by_code: BTreeMap<String, u64>,
    /// Per operation (create, get).
    pub operations: BTreeMap<String, OpCounts>,
}

/// Why a step did not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Breach {
    /// A call failed or was not issued.
    Failures,
    /// p99 above the target.
    Latency,
    /// Nothing was answered at all (no latency to judge).
    NoAnswers,
}

impl Breach {
    pub fn describe(self, step: &StepResult, target_ms: f64) -> String {
        match self {
            Breach::Failures => format!("{} failed, {} not issued", step.failed, step.not_issued),
            Breach::Latency => {
                let p99 = step.p99_ms.unwrap_or(f64::INFINITY);
                // Enough digits that "p99 50.0 ms > 50 ms" cannot be printed.
                let digits = if format!("{p99:.1}")
                    .parse::<f64>()
                    .is_ok_and(|r| r <= target_ms)
                {
                    3
                } else {
                    1
                };
                format!("p99 {p99:.digits$} ms > {target_ms} ms")
            }
            Breach::NoAnswers => "no call was answered".into(),
        }
    }
}

impl StepResult {
    pub fn failures(&self) -> u64 {
        self.failed + self.not_issued
    }

    /// Every way the step broke; empty when it held: p99 at most the target
    /// and no failure.
    pub fn breaches(&self, p99_target_ms: f64) -> Vec<Breach> {
        let mut out = Vec::new();
        if self.failures() > 0 {
            out.push(Breach::Failures);
        }
        match self.p99_ms {
            Some(p99) if p99 > p99_target_ms => out.push(Breach::Latency),
            Some(_) => {}
            None => out.push(Breach::NoAnswers),
        }
        out
    }

    pub fn held(&self, p99_target_ms: f64) -> bool {
        self.breaches(p99_target_ms).is_empty()
    }
}

/// The knee: the highest offered rate that held, below the first step that
/// did not (a step that holds after a broken one is luck, not capacity).
/// `None` when the first step already broke.
pub fn knee(steps: &[StepResult], p99_target_ms: f64) -> Option<&StepResult> {
    steps
        .iter()
        .take_while(|s| s.held(p99_target_ms))
        .max_by_key(|s| s.offered_per_second)
}

/// Why the sweep ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Stop {
    /// A step broke: the knee (if any) is the step before it.
    Broke {
        offered_per_second: u32,
        breaches: Vec<Breach>,
    },
    /// Every planned step held: the service did not saturate up to the last
    /// one (the maximum rate or the step limit); its knee is at least that.
    PlanExhausted { offered_per_second: u32 },
}

/// Why the sweep ended, from its steps: the first step that broke, else the
/// plan ran out.
pub fn stop(steps: &[StepResult], p99_target_ms: f64) -> Option<Stop> {
    match steps.iter().find(|s| !s.held(p99_target_ms)) {
        Some(s) => Some(Stop::Broke {
            offered_per_second: s.offered_per_second,
            breaches: s.breaches(p99_target_ms),
        }),
        None => steps.last().map(|s| Stop::PlanExhausted {
            offered_per_second: s.offered_per_second,
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A step at `rate` with this p99 and these failures.
    pub(crate) fn step(rate: u32, p99_ms: f64, failed: u64) -> StepResult {
        StepResult {
            offered_per_second: rate,
            seconds: 1,
            offered: u64::from(rate),
            ok: u64::from(rate) - failed,
            failed,
            not_issued: 0,
            achieved_per_second: f64::from(rate),
            p50_ms: Some(p99_ms / 2.0),
            p99_ms: Some(p99_ms),
            max_ms: p99_ms * 1.5,
            dispatch_lag_p99_ms: 0.0,
            load_average_1m: None,
            failures_by_code: BTreeMap::new(),
            operations: BTreeMap::new(),
        }
    }

    #[test]
    fn the_knee_is_the_last_step_that_held_before_the_first_that_broke() {
        let steps = [
            step(100, 10.0, 0),
            step(200, 20.0, 0),
            step(300, 150.0, 0),
            step(400, 20.0, 0),
        ];
        let k = knee(&steps, 100.0).unwrap();
        assert_eq!(k.offered_per_second, 200);
        assert_eq!(
            stop(&steps, 100.0),
            Some(Stop::Broke {
                offered_per_second: 300,
                breaches: vec![Breach::Latency]
            })
        );
        // p99 exactly at the target holds; just above it does not.
        assert_eq!(knee(&steps[..3], 150.0).unwrap().offered_per_second, 300);
        assert_eq!(knee(&steps[..3], 149.9).unwrap().offered_per_second, 200);
    }

    #[test]
    fn a_step_with_failures_is_not_a_knee_however_fast() {
        let steps = [step(100, 5.0, 0), step(200, 5.0, 1), step(300, 5.0, 0)];
        assert_eq!(knee(&steps, 100.0).unwrap().offered_per_second, 100);
        assert_eq!(steps[1].breaches(100.0), [Breach::Failures]);
        let mut shed = step(100, 5.0, 0);
        shed.not_issued = 3;
        assert!(!shed.held(100.0), "a call not issued is a failure");
        assert_eq!(knee(&[shed], 100.0), None);
    }

    #[test]
    fn a_breach_never_reads_as_within_its_target() {
        let just_above = step(300, 50.03, 0);
        assert_eq!(
            Breach::Latency.describe(&just_above, 50.0),
            "p99 50.030 ms > 50 ms"
        );
        assert_eq!(
            Breach::Latency.describe(&step(200, 5.0, 1), 4.0),
            "p99 5.0 ms > 4 ms"
        );
    }

    #[test]
    fn no_knee_when_the_first_step_broke_or_nothing_was_answered() {
        assert_eq!(knee(&[step(100, 500.0, 0), step(200, 5.0, 0)], 100.0), None);
        let mut silent = step(100, 0.0, 100);
        silent.p99_ms = None;
        assert_eq!(
            silent.breaches(100.0),
            [Breach::Failures, Breach::NoAnswers]
        );
        assert_eq!(knee(&[silent], 100.0), None);
        assert_eq!(knee(&[], 100.0), None);
        assert_eq!(stop(&[], 100.0), None);
    }

    #[test]
    fn a_sweep_that_never_broke_stops_because_its_plan_ran_out() {
        let steps = [step(100, 5.0, 0), step(200, 6.0, 0)];
        assert_eq!(knee(&steps, 100.0).unwrap().offered_per_second, 200);
        assert_eq!(
            stop(&steps, 100.0),
            Some(Stop::PlanExhausted {
                offered_per_second: 200
            })
        );
    }
}
