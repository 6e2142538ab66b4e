//! Settings of a capacity sweep, validated completely before anything is
//! reached: every bad value is named at once, with the flag that carries it.

use std::{path::PathBuf, time::Duration};

use crate::{
    config::{Credentials, Service},
    mix::Mix,
    operation::Operation,
};

/// How the offered rate grows from one step to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Growth {
    /// Add this many calls per second.
    Add(u32),
    /// Multiply by this factor (> 1); each step at least one call/s more.
    Multiply(f64),
}

/// The growth when no step is given: ×1.5 reaches 10,000 calls/s from 50 in
/// 14 steps, so an unknown service's knee is bracketed quickly; a second
/// sweep with an additive step between the knee and the break refines it.
const DEFAULT_FACTOR: f64 = 1.5;

/// The most steps a sweep may plan, whatever the flags: a sweep must end.
pub const MOST_STEPS: u32 = 100;
/// The longest step, and the longest call deadline (a step ends when its
/// last call has ended).
pub const LONGEST_STEP_SECONDS: u64 = 600;

/// `vfps-chaos capacity`: every setting.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityConfig {
    #[command(flatten)]
    pub service: Service,
    #[command(flatten)]
    pub credentials: Credentials,
    /// Offered calls per second of the first step.
    #[arg(long, env = "RESILIENCE_CAPACITY_START_RATE", default_value_t = 50)]
    pub start_rate_per_second: u32,
    /// Additive growth: calls per second added at each step (instead of
    /// --step-factor).
    #[arg(
        long,
        env = "RESILIENCE_CAPACITY_STEP_RATE",
        conflicts_with = "step_factor"
    )]
    pub step_rate_per_second: Option<u32>,
    /// Multiplicative growth: the rate of each step is the previous one's
    /// times this (default 1.5 when no step is given).
    #[arg(long, env = "RESILIENCE_CAPACITY_STEP_FACTOR")]
    pub step_factor: Option<f64>,
    /// No step offers more than this.
    #[arg(long, env = "RESILIENCE_CAPACITY_MAX_RATE", default_value_t = 20_000)]
    pub max_rate_per_second: u32,
    /// Length of each step (whole seconds).
    #[arg(long, env = "RESILIENCE_CAPACITY_STEP_SECONDS", default_value_t = 10)]
    pub step_seconds: u64,
    /// Seconds of calls at the first step's rate before the first step, not
    /// measured: the service fills its connection pools and caches, so the
    /// first step does not break on a cold start (0: none).
    #[arg(long, env = "RESILIENCE_CAPACITY_WARM_UP_SECONDS", default_value_t = 2)]
    pub warm_up_seconds: u64,
    /// At most this many steps (at most 100).
    #[arg(long, env = "RESILIENCE_CAPACITY_MAX_STEPS", default_value_t = 20)]
    pub max_steps: u32,
    /// A step holds when its p99 latency (from each call's intended send time)
    /// is at most this and no call failed.
    #[arg(
        long,
        env = "RESILIENCE_CAPACITY_P99_TARGET_MS",
        default_value_t = 100.0
    )]
    pub p99_target_ms: f64,
    /// Operations and weights; create and get only, e.g. `create=80,get=20`.
    #[arg(long, env = "RESILIENCE_CAPACITY_MIX", default_value = "create=100")]
    pub mix: String,
    /// Calls in flight beyond which new calls are not issued; a call not
    /// issued is a failure and breaks its step.
    #[arg(
        long,
        env = "RESILIENCE_CAPACITY_MAX_IN_FLIGHT",
        default_value_t = 2_000
    )]
    pub max_in_flight: u32,
    /// Deadline of one call (no retries in a sweep).
    #[arg(
        long,
        env = "RESILIENCE_CAPACITY_CALL_DEADLINE_SECONDS",
        default_value_t = 5.0
    )]
    pub call_deadline_seconds: f64,
    /// Seed of the generated originals (random if not given).
    #[arg(long, env = "RESILIENCE_SEED")]
    pub seed: Option<u64>,
    /// Where `capacity.json` and the plots are written.
    #[arg(
        long,
        env = "RESILIENCE_CAPACITY_OUTPUT_DIR",
        default_value = "capacity-run"
    )]
    pub output_dir: PathBuf,
}

/// Settings that make a sweep meaningless, all of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct CapacityConfigError(pub Vec<String>);

impl CapacityConfig {
    pub fn growth(&self) -> Growth {
        match (self.step_rate_per_second, self.step_factor) {
            (Some(add), _) => Growth::Add(add),
            (None, Some(f)) => Growth::Multiply(f),
            (None, None) => Growth::Multiply(DEFAULT_FACTOR),
        }
    }

    pub fn call_deadline(&self) -> Duration {
        Duration::from_secs_f64(self.call_deadline_seconds)
    }

    /// The mix, admitted only if it sends create and get alone.
    pub fn mix(&self) -> Result<Mix, String> {
        let mix = Mix::parse(&self.mix).map_err(|e| format!("--mix: {e}"))?;
        let other: Vec<&str> = mix
            .operations()
            .filter(|o| !matches!(o, Operation::Create | Operation::Get))
            .map(Operation::name)
            .collect();
        if other.is_empty() {
            Ok(mix)
        } else {
            Err(format!(
                "--mix (RESILIENCE_CAPACITY_MIX) {:?}: a sweep sends create and get only, not {}",
                self.mix,
                other.join(", ")
            ))
        }
    }

    /// Every problem, reported at once, each naming its flag and value.
    pub fn validate(&self) -> Result<(), CapacityConfigError> {
        let mut problems = Vec::new();
        if self.service.namespace.trim().is_empty() {
            problems.push("--namespace (RESILIENCE_NAMESPACE) must not be blank".into());
        }
        if self.start_rate_per_second == 0 {
            problems.push(
                "--start-rate-per-second (RESILIENCE_CAPACITY_START_RATE) must be at least 1, got 0"
                    .into(),
            );
        }
        if self.max_rate_per_second < self.start_rate_per_second {
            problems.push(format!(
                "--max-rate-per-second (RESILIENCE_CAPACITY_MAX_RATE) {} is below --start-rate-per-second {}",
                self.max_rate_per_second, self.start_rate_per_second
            ));
        }
        match self.growth() {
            Growth::Add(0) => problems.push(
                "--step-rate-per-second (RESILIENCE_CAPACITY_STEP_RATE) must be at least 1, got 0"
                    .into(),
            ),
            Growth::Multiply(f) if !(f.is_finite() && f > 1.0) => problems.push(format!(
                "--step-factor (RESILIENCE_CAPACITY_STEP_FACTOR) must be a number above 1, got {f}"
            )),
            _ => {}
        }
        if !(1..=LONGEST_STEP_SECONDS).contains(&self.step_seconds) {
            problems.push(format!(
                "--step-seconds (RESILIENCE_CAPACITY_STEP_SECONDS) must be 1 to {LONGEST_STEP_SECONDS}, got {}",
                self.step_seconds
            ));
        }
        if self.warm_up_seconds > LONGEST_STEP_SECONDS {
            problems.push(format!(
                "--warm-up-seconds (RESILIENCE_CAPACITY_WARM_UP_SECONDS) must be 0 to {LONGEST_STEP_SECONDS}, got {}",
                self.warm_up_seconds
            ));
        }
        if !(1..=MOST_STEPS).contains(&self.max_steps) {
            problems.push(format!(
                "--max-steps (RESILIENCE_CAPACITY_MAX_STEPS) must be 1 to {MOST_STEPS}, got {}",
                self.max_steps
            ));
        }
        let target_ok = self.p99_target_ms.is_finite() && self.p99_target_ms > 0.0;
        if !target_ok {
            problems.push(format!(
                "--p99-target-ms (RESILIENCE_CAPACITY_P99_TARGET_MS) must be a positive number of milliseconds, got {}",
                self.p99_target_ms
            ));
        }
        let deadline_ok = self.call_deadline_seconds > 0.0
            && self.call_deadline_seconds <= LONGEST_STEP_SECONDS as f64;
        if !deadline_ok {
            problems.push(format!(
                "--call-deadline-seconds (RESILIENCE_CAPACITY_CALL_DEADLINE_SECONDS) must be above 0 and at most {LONGEST_STEP_SECONDS} seconds, got {}",
                self.call_deadline_seconds
            ));
        } else if target_ok && self.call_deadline_seconds * 1000.0 <= self.p99_target_ms {
            // A call would be cut off before it could show that it missed the target.
            problems.push(format!(
                "--call-deadline-seconds {} must exceed --p99-target-ms {} ms",
                self.call_deadline_seconds, self.p99_target_ms
            ));
        }
        if self.max_in_flight == 0 {
            problems.push(
                "--max-in-flight (RESILIENCE_CAPACITY_MAX_IN_FLIGHT) must be at least 1, got 0"
                    .into(),
            );
        }
        if let Err(e) = self.mix() {
            problems.push(e);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(CapacityConfigError(problems))
        }
    }

    /// The offered rate of each step, ascending, within the maximum rate and
    /// the step limit.
    pub fn rates(&self) -> Vec<u32> {
        plan(
            self.start_rate_per_second,
            self.growth(),
            self.max_rate_per_second,
            self.max_steps.min(MOST_STEPS),
        )
    }
}

/// Rates from `start` growing by `growth`, none above `max`, at most `steps`
/// of them; strictly increasing, so the plan always ends.
pub fn plan(start: u32, growth: Growth, max: u32, steps: u32) -> Vec<u32> {
    let mut rates = Vec::new();
    let mut rate = start.max(1);
    while rate <= max && rates.len() < steps as usize {
        rates.push(rate);
        let next = match growth {
            Growth::Add(n) => rate.saturating_add(n.max(1)),
            Growth::Multiply(f) => {
                let grown = (f64::from(rate) * f).round();
                let grown = if grown.is_finite() && grown < f64::from(u32::MAX) {
                    grown as u32
                } else {
                    u32::MAX
                };
                grown.max(rate.saturating_add(1))
            }
        };
        if next == rate {
            break;
        }
        rate = next;
    }
    rates
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        capacity: CapacityConfig,
    }

    fn parse(args: &[&str]) -> CapacityConfig {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).capacity
    }

    #[test]
    fn plans_grow_by_addition_or_factor_and_stop_at_the_maximum_or_the_step_limit() {
        assert_eq!(plan(60, Growth::Add(60), 300, 20), [60, 120, 180, 240, 300]);
        assert_eq!(plan(60, Growth::Add(60), 299, 20), [60, 120, 180, 240]);
        assert_eq!(plan(60, Growth::Add(60), 300, 3), [60, 120, 180]);
        assert_eq!(
            plan(50, Growth::Multiply(1.5), 400, 20),
            [50, 75, 113, 170, 255, 383]
        );
        // A factor too small to move a small rate still moves it by one.
        assert_eq!(plan(1, Growth::Multiply(1.01), 4, 20), [1, 2, 3, 4]);
        assert_eq!(plan(u32::MAX - 1, Growth::Add(5), u32::MAX, 20).len(), 2);
    }

    #[test]
    fn every_bad_value_is_named_at_once_with_its_flag() {
        let c = parse(&[
            "--start-rate-per-second",
            "100",
            "--max-rate-per-second",
            "50",
            "--step-factor",
            "0.9",
            "--step-seconds",
            "0",
            "--p99-target-ms=-3",
            "--mix",
            "create=1,list=1",
            "--warm-up-seconds",
            "601",
        ]);
        let e = c.validate().unwrap_err();
        assert_eq!(e.0.len(), 6, "{e}");
        for needle in [
            "--max-rate-per-second (RESILIENCE_CAPACITY_MAX_RATE) 50",
            "--step-factor (RESILIENCE_CAPACITY_STEP_FACTOR) must be a number above 1, got 0.9",
            "--step-seconds (RESILIENCE_CAPACITY_STEP_SECONDS) must be 1 to 600, got 0",
            "got -3",
            "not list",
            "--warm-up-seconds (RESILIENCE_CAPACITY_WARM_UP_SECONDS) must be 0 to 600, got 601",
        ] {
            assert!(
                e.to_string().contains(needle),
                "{needle:?} missing from {e}"
            );
        }
        let e = parse(&["--call-deadline-seconds", "0.05", "--p99-target-ms", "80"])
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("must exceed --p99-target-ms 80"),
            "{e}"
        );
        assert!(parse(&[]).validate().is_ok());
    }

    #[test]
    fn the_default_grows_by_half_and_an_additive_step_excludes_a_factor() {
        assert_eq!(parse(&[]).growth(), Growth::Multiply(1.5));
        assert_eq!(
            parse(&["--step-rate-per-second", "25"]).growth(),
            Growth::Add(25)
        );
        assert!(
            Cli::try_parse_from(["x", "--step-rate-per-second", "25", "--step-factor", "2"])
                .is_err()
        );
    }
}
