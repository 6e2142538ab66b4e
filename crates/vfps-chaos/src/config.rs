//! Settings of a load run: the existing resilience test's environment variables
//! with the same defaults, and the same as flags, in sections — the service
//! under test, the workload, the budgets, verification, the output — each
//! validated on its own; every problem is reported at once.

use std::{path::PathBuf, time::Duration};

use crate::{checker::Budgets, mix::Mix};

/// The vfps under test.
#[derive(Debug, Clone, clap::Args)]
pub struct Service {
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
}

impl Service {
    fn validate(&self, problems: &mut Vec<String>) {
        if self.namespace.trim().is_empty() {
            problems.push("RESILIENCE_NAMESPACE must not be blank".into());
        }
    }
}

/// Credentials for a vfps with authorization on; none for one with it off.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Credentials {
    /// Bearer token sent with every call (a `vfps_sat_…` token or a JWT).
    #[arg(long, env = "RESILIENCE_BEARER_TOKEN", hide_env_values = true)]
    pub bearer_token: Option<String>,
    /// File holding the bearer token (a mounted Secret); used when
    /// RESILIENCE_BEARER_TOKEN is unset.
    #[arg(long, env = "RESILIENCE_BEARER_TOKEN_FILE")]
    pub bearer_token_file: Option<PathBuf>,
    /// File holding an expired token: `bad` calls with it must be UNAUTHENTICATED.
    #[arg(long, env = "RESILIENCE_EXPIRED_TOKEN_FILE")]
    pub expired_token_file: Option<PathBuf>,
    /// File holding a token with read permission only: `bad` Creates with it
    /// must be PERMISSION_DENIED.
    #[arg(long, env = "RESILIENCE_READ_ONLY_TOKEN_FILE")]
    pub read_only_token_file: Option<PathBuf>,
}

/// Reads a token file: its first line, trimmed; errors name the file.
fn token_file(key: &str, path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{key}={}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.is_empty() {
        anyhow::bail!("{key}={} holds no token", path.display());
    }
    Ok(token)
}

impl Credentials {
    /// The bearer token every call carries, if any.
    pub fn bearer(&self) -> anyhow::Result<Option<String>> {
        match (&self.bearer_token, &self.bearer_token_file) {
            (Some(t), _) if !t.trim().is_empty() => Ok(Some(t.trim().to_owned())),
            (_, Some(f)) => token_file("RESILIENCE_BEARER_TOKEN_FILE", f).map(Some),
            _ => Ok(None),
        }
    }

    /// The tokens `bad` calls must see refused.
    pub fn refused(&self) -> anyhow::Result<RefusedTokens> {
        let read =
            |key: &str, f: &Option<PathBuf>| f.as_deref().map(|p| token_file(key, p)).transpose();
        Ok(RefusedTokens {
            missing: self.bearer()?.is_some(),
            expired: read("RESILIENCE_EXPIRED_TOKEN_FILE", &self.expired_token_file)?,
            read_only: read(
                "RESILIENCE_READ_ONLY_TOKEN_FILE",
                &self.read_only_token_file,
            )?,
        })
    }
}

/// Tokens whose calls the service must refuse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefusedTokens {
    /// The service wants a token (the run has one): a call without must fail.
    pub missing: bool,
    pub expired: Option<String>,
    pub read_only: Option<String>,
}

/// The longest call deadline (an hour): a call's retries fit in far less.
const MAX_CALL_DEADLINE_SECONDS: f64 = 3600.0;
/// The longest load window (7 days): the timeline keeps a row per second.
const MAX_LOAD_SECONDS: u64 = 7 * 86_400;

/// What the generator offers, whatever the service does.
#[derive(Debug, Clone, clap::Args)]
pub struct Workload {
    /// Offered Creates per second, whatever the service does.
    #[arg(long, env = "RESILIENCE_RATE_PER_SECOND", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_per_second: u32,
    /// Length of the load window.
    #[arg(long, env = "RESILIENCE_LOAD_SECONDS", default_value_t = 960)]
    pub load_seconds: u64,
    /// Deadline of one call, covering all its retries.
    #[arg(long, env = "RESILIENCE_CALL_DEADLINE_SECONDS", default_value_t = 5.0)]
    pub call_deadline_seconds: f64,
    /// Calls in flight beyond which new calls are shed (and counted as failures).
    #[arg(long, env = "RESILIENCE_MAX_IN_FLIGHT", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// Seed of the generated originals (random if not given); logged for replay.
    #[arg(long, env = "RESILIENCE_SEED")]
    pub seed: Option<u64>,
    /// Operations and their weights, e.g. `create=60,recreate=15,get=15,list=5,churn=3,bad=2`;
    /// `create=100` is the upstream Create-only workload.
    #[arg(long, env = "RESILIENCE_MIX", default_value = crate::mix::DEFAULT_MIX)]
    pub mix: String,
    /// Rows of each CSV job run beside the load (0: none). Jobs are submitted
    /// one after another through the window and each is judged by P7.
    #[arg(long, env = "RESILIENCE_JOB_ROWS", default_value_t = 0)]
    pub job_rows: u64,
    /// P10's probe (`workload::privacy`): pseudonyms of every random method
    /// through every replica before and after the load window, sequential
    /// originals in Bundles, a job and List pages, multi siblings. Unset:
    /// on for the platforms' runs, off for `load` alone.
    #[arg(long, env = "RESILIENCE_PRIVACY_PROBE", action = clap::ArgAction::Set)]
    pub privacy_probe: Option<bool>,
    /// The least distance between the probe's early and late rounds: longer
    /// than the 65.5 s a millisecond clock's third byte takes to change.
    #[arg(
        long,
        env = "RESILIENCE_PRIVACY_ROUNDS_APART_SECONDS",
        default_value_t = 70
    )]
    pub privacy_rounds_apart_seconds: u64,
    /// vfps's HTTP addresses, comma-separated, for jobs' files that go through
    /// vfps (default: each gRPC endpoint's host on port 8080).
    #[arg(long, env = "RESILIENCE_HTTP_ADDRESS")]
    pub http_address: Option<String>,
    /// The web UI's address behind a load balancer (`http://host:port`): a
    /// headless Chromium signed in there creates and looks up a pseudonym
    /// through the UI every second (unset: no browser probe).
    #[arg(long, env = "RESILIENCE_UI_ADDRESS")]
    pub ui_address: Option<String>,
    /// The browser probe's user at the identity provider.
    #[arg(long, env = "RESILIENCE_UI_USER", default_value = "admin")]
    pub ui_user: String,
    /// The folder of the browser probe's script and packages.
    #[arg(long, env = "RESILIENCE_UI_TESTS_DIR", default_value_os_t = crate::checkout::default(crate::checkout::UI_TESTS))]
    pub ui_tests_dir: std::path::PathBuf,
}

impl Workload {
    pub fn call_deadline(&self) -> Duration {
        Duration::from_secs_f64(self.call_deadline_seconds)
    }

    /// Calls expected in flight at the deadline; the shedding cap must exceed it.
    pub fn in_flight_needed(&self) -> f64 {
        f64::from(self.rate_per_second) * self.call_deadline_seconds
    }

    fn validate(&self, problems: &mut Vec<String>) {
        if !(self.call_deadline_seconds.is_finite()
            && self.call_deadline_seconds > 0.0
            && self.call_deadline_seconds <= MAX_CALL_DEADLINE_SECONDS)
        {
            problems.push(format!(
                "RESILIENCE_CALL_DEADLINE_SECONDS must be a number of seconds above 0 and at most \
                 {MAX_CALL_DEADLINE_SECONDS}, got {}",
                self.call_deadline_seconds
            ));
        }
        if !(1..=MAX_LOAD_SECONDS).contains(&self.load_seconds) {
            problems.push(format!(
                "RESILIENCE_LOAD_SECONDS must be from 1 to {MAX_LOAD_SECONDS} (7 days), got {}",
                self.load_seconds
            ));
        }
        if let Err(e) = Mix::parse(&self.mix) {
            problems.push(e.to_string());
        }
    }

    /// The mix (validated by [`LoadConfig::validate`]).
    pub fn mix(&self) -> Result<Mix, crate::mix::MixError> {
        Mix::parse(&self.mix)
    }
}

/// The P1 budgets of the whole run.
#[derive(Debug, Clone, clap::Args)]
pub struct Limits {
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
}

impl Limits {
    pub fn budgets(&self) -> Budgets {
        Budgets {
            max_outage_seconds: self.max_outage_seconds,
            max_unavailable_seconds: self.max_unavailable_seconds,
        }
    }

    fn validate(&self, problems: &mut Vec<String>) {
        if !(self.max_unavailable_seconds.is_finite() && self.max_unavailable_seconds >= 0.0) {
            problems.push(format!(
                "RESILIENCE_MAX_UNAVAILABLE_SECONDS must be a non-negative number, got {}",
                self.max_unavailable_seconds
            ));
        }
    }
}

/// After the load: settling and the verification pass.
#[derive(Debug, Clone, clap::Args)]
pub struct Verification {
    /// Quiet period between load and verification.
    #[arg(long, env = "RESILIENCE_SETTLE_SECONDS", default_value_t = 60)]
    pub settle_seconds: u64,
    /// Verification calls in flight.
    #[arg(long, env = "RESILIENCE_VERIFY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub verify_concurrency: u32,
}

/// The run directory unless one is named: `vfps-chaos-run` in the system's
/// temporary folder, the same for every step of a run.
pub fn default_output_dir() -> PathBuf {
    std::env::temp_dir().join("vfps-chaos-run")
}

/// Where the run's evidence goes.
#[derive(Debug, Clone, clap::Args)]
pub struct Output {
    /// Where the run directory is written (by default outside the current
    /// directory, which is written only when asked).
    #[arg(long, env = "RESILIENCE_OUTPUT_DIR", default_value_os_t = default_output_dir())]
    pub output_dir: PathBuf,
    /// 0 keeps every pair in the ledger; N keeps a uniform reservoir of N.
    #[arg(long, env = "RESILIENCE_LEDGER_CAPACITY", default_value_t = 0)]
    pub ledger_capacity: usize,
}

/// Every setting of a load run.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadConfig {
    #[command(flatten)]
    pub service: Service,
    #[command(flatten)]
    pub credentials: Credentials,
    #[command(flatten)]
    pub workload: Workload,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub verification: Verification,
    #[command(flatten)]
    pub output: Output,
}

/// Settings that make a run meaningless, all of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct ConfigError(pub Vec<String>);

impl LoadConfig {
    /// Problems that make the run meaningless, reported before anything starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        self.service.validate(&mut problems);
        self.workload.validate(&mut problems);
        self.limits.validate(&mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError(problems))
        }
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.output.output_dir
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadConfig,
    }

    #[test]
    fn every_problem_of_every_section_is_reported_at_once() {
        let cli = Cli::parse_from([
            "x",
            "--namespace",
            " ",
            "--call-deadline-seconds",
            "0",
            "--max-unavailable-seconds=-1",
        ]);
        let e = cli.load.validate().unwrap_err();
        assert_eq!(e.0.len(), 3, "{e}");
        for key in [
            "RESILIENCE_NAMESPACE",
            "RESILIENCE_CALL_DEADLINE_SECONDS",
            "RESILIENCE_MAX_UNAVAILABLE_SECONDS",
        ] {
            assert!(e.to_string().contains(key), "{key} missing from {e}");
        }
        assert!(Cli::parse_from(["x"]).load.validate().is_ok());
    }

    /// Values that panicked (a deadline past `Duration`'s range) or aborted
    /// (a timeline allocated for years) are refused with their key.
    #[test]
    fn deadlines_and_windows_beyond_their_bounds_are_refused() {
        for (args, key) in [
            (
                ["--call-deadline-seconds", "1e300"],
                "RESILIENCE_CALL_DEADLINE_SECONDS",
            ),
            (
                ["--call-deadline-seconds", "3601"],
                "RESILIENCE_CALL_DEADLINE_SECONDS",
            ),
            (["--load-seconds", "100000000"], "RESILIENCE_LOAD_SECONDS"),
            (
                ["--load-seconds", "18446744073709551615"],
                "RESILIENCE_LOAD_SECONDS",
            ),
        ] {
            let cli = Cli::parse_from(std::iter::once("x").chain(args));
            let e = cli.load.validate().unwrap_err();
            assert!(e.to_string().contains(key), "{args:?}: {e}");
        }
        let fine = Cli::parse_from([
            "x",
            "--load-seconds",
            "604800",
            "--call-deadline-seconds",
            "3600",
        ]);
        assert!(fine.load.validate().is_ok());
    }
}
