//! Settings of a load run: the existing resilience test's environment variables
//! with the same defaults, and the same as flags.

use std::{path::PathBuf, time::Duration};

#[derive(Debug, Clone, clap::Args)]
pub struct LoadConfig {
    /// gRPC endpoints: `http://a:8081,http://b:8081` or `dns:///host:port`.
    #[arg(
        long,
        env = "VFPS_GRPC_ADDRESS",
        default_value = "http://localhost:8081"
    )]
    pub address: String,
    /// Namespace the run creates pseudonyms in (created if missing).
    #[arg(long, env = "RESILIENCE_NAMESPACE", default_value = "resilience")]
    pub namespace: String,
    /// Offered Creates per second, whatever the service does.
    #[arg(long, env = "RESILIENCE_RATE_PER_SECOND", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_per_second: u32,
    /// Length of the load window.
    #[arg(long, env = "RESILIENCE_LOAD_SECONDS", default_value_t = 960)]
    pub load_seconds: u64,
    /// Quiet period between load and verification.
    #[arg(long, env = "RESILIENCE_SETTLE_SECONDS", default_value_t = 60)]
    pub settle_seconds: u64,
    /// Deadline of one call, covering all its retries.
    #[arg(long, env = "RESILIENCE_CALL_DEADLINE_SECONDS", default_value_t = 5.0)]
    pub call_deadline_seconds: f64,
    /// Calls in flight beyond which new calls are shed (and counted as failures).
    #[arg(long, env = "RESILIENCE_MAX_IN_FLIGHT", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// 0 keeps every pair in the ledger; N keeps a uniform reservoir of N.
    #[arg(long, env = "RESILIENCE_LEDGER_CAPACITY", default_value_t = 0)]
    pub ledger_capacity: usize,
    /// P1 budget: longest run of seconds with load offered and nothing succeeding.
    #[arg(long, env = "RESILIENCE_MAX_OUTAGE_SECONDS", default_value_t = 30)]
    pub max_outage_seconds: u64,
    /// P1 budget: (failed + shed) / rate.
    #[arg(
        long,
        env = "RESILIENCE_MAX_UNAVAILABLE_SECONDS",
        default_value_t = 150.0
    )]
    pub max_unavailable_seconds: f64,
    /// Verification calls in flight.
    #[arg(long, env = "RESILIENCE_VERIFY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub verify_concurrency: u32,
    /// Where the run directory is written.
    #[arg(long, env = "RESILIENCE_OUTPUT_DIR", default_value = "resilience-run")]
    pub output_dir: PathBuf,
    /// Seed of the generated originals (random if not given); logged for replay.
    #[arg(long, env = "RESILIENCE_SEED")]
    pub seed: Option<u64>,
}

impl LoadConfig {
    pub fn call_deadline(&self) -> Duration {
        Duration::from_secs_f64(self.call_deadline_seconds)
    }

    /// Problems that make the run meaningless, reported before anything starts.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.call_deadline_seconds.is_finite() && self.call_deadline_seconds > 0.0) {
            return Err(format!(
                "RESILIENCE_CALL_DEADLINE_SECONDS must be a positive number of seconds, got {}",
                self.call_deadline_seconds
            ));
        }
        if self.load_seconds == 0 {
            return Err("RESILIENCE_LOAD_SECONDS must be at least 1".into());
        }
        if !(self.max_unavailable_seconds.is_finite() && self.max_unavailable_seconds >= 0.0) {
            return Err(format!(
                "RESILIENCE_MAX_UNAVAILABLE_SECONDS must be a non-negative number, got {}",
                self.max_unavailable_seconds
            ));
        }
        if self.namespace.trim().is_empty() {
            return Err("RESILIENCE_NAMESPACE must not be blank".into());
        }
        Ok(())
    }

    /// Calls expected in flight at the deadline; the shedding cap must exceed it.
    pub fn in_flight_needed(&self) -> f64 {
        f64::from(self.rate_per_second) * self.call_deadline_seconds
    }
}
