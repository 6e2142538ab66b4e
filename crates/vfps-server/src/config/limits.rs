//! The bounds on a replica's work: Create batches, call deadlines and request
//! sizes, the drain after SIGTERM, readiness, metrics and log format.

use std::time::Duration;

use super::env::{duration, parse_bool, setting, Env};

/// How Creates are batched: at most `max_batch` per upsert, at most `max_queue`
/// waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// `VFPS_MAX_CREATE_BATCH`: most Creates coalesced into one upsert, which
    /// bounds the statement's size and how long its row locks are held.
    pub max_batch: usize,
    /// `VFPS_MAX_CREATE_QUEUE`: most Creates waiting for a batch; more are
    /// answered `UNAVAILABLE` at once rather than queued past their deadlines.
    pub max_queue: usize,
    /// `VFPS_CREATE_BATCH_WORKERS`: batches executing at once, each on its own
    /// connection; `None`: the store's default (see `Store::write_parallelism`).
    /// Fewer make larger batches (fewer commits), more overlap more round trips.
    pub workers: Option<usize>,
}

/// `VFPS_MAX_CALL_DEADLINE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    /// Upper bound of a call's deadline, and the deadline of calls without one,
    /// so no call holds a connection or a permit forever.
    pub max_deadline: Duration,
    /// `VFPS_MAX_REQUEST_BYTES` (64 KiB): the largest gRPC message or HTTP
    /// body read; larger ones are refused before they are buffered.
    pub max_request_bytes: usize,
}

/// `VFPS_SHUTDOWN_*`: the drain after SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shutdown {
    /// Time spent not-ready but still serving, so load balancers stop sending
    /// before the listeners close.
    pub pre_stop_delay: Duration,
    /// After the pre-stop delay: time in-flight calls get to finish before they
    /// are cut off, to stay within the pod's termination grace period.
    pub timeout: Duration,
}

/// `VFPS_READINESS_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// How long the database may be unreachable from this replica before the
    /// replica reports itself not ready; longer than a failover, so a failover
    /// never empties the endpoints.
    pub database_grace: Duration,
}

/// `VFPS_METRICS_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsConfig {
    /// How often the pseudonym counts are re-read: counting scans the table, so
    /// it is done in the background rather than on every scrape.
    pub count_interval: Duration,
}

/// `VFPS_LOG_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Telemetry {
    /// One JSON object per line, for log collectors, instead of text for people.
    pub log_json: bool,
}

impl Batching {
    /// The coalescers' limits; `default_workers` (the store's write
    /// parallelism) unless `VFPS_CREATE_BATCH_WORKERS` says otherwise.
    pub fn limits(&self, default_workers: usize) -> vfps_store::coalesce::Limits {
        vfps_store::coalesce::Limits {
            workers: self.workers.unwrap_or(default_workers),
            max_batch: self.max_batch,
            max_queue: self.max_queue,
        }
    }

    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let max_batch = setting(
            env,
            errors,
            "VFPS_MAX_CREATE_BATCH",
            256usize,
            |s| s.trim().parse().ok().filter(|n| (1..=10_000).contains(n)),
            "an integer from 1 to 10000",
        );
        let max_queue = setting(
            env,
            errors,
            "VFPS_MAX_CREATE_QUEUE",
            4096usize,
            |s| {
                s.trim()
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000_000).contains(n))
            },
            "an integer from 1 to 1000000",
        );
        let workers = env.get("VFPS_CREATE_BATCH_WORKERS").map(|_| {
            setting(
                env,
                errors,
                "VFPS_CREATE_BATCH_WORKERS",
                1usize,
                |s| s.trim().parse().ok().filter(|n| (1..=256).contains(n)),
                "an integer from 1 to 256",
            )
        });
        Self {
            max_batch,
            max_queue,
            workers,
        }
    }
}

impl Calls {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let max_deadline = duration(
            env,
            errors,
            "VFPS_MAX_CALL_DEADLINE",
            Duration::from_secs(30),
        );
        if max_deadline.is_zero() {
            errors.push("VFPS_MAX_CALL_DEADLINE must be greater than zero".into());
        }
        let max_request_bytes = setting(
            env,
            errors,
            "VFPS_MAX_REQUEST_BYTES",
            64 * 1024,
            |s| {
                s.trim()
                    .parse()
                    .ok()
                    .filter(|n| (16 * 1024..=16 * 1024 * 1024).contains(n))
            },
            "a number of bytes from 16384 to 16777216",
        );
        Self {
            max_deadline,
            max_request_bytes,
        }
    }
}

impl Shutdown {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        Self {
            pre_stop_delay: duration(env, errors, "VFPS_SHUTDOWN_PRE_STOP_DELAY", Duration::ZERO),
            timeout: duration(
                env,
                errors,
                "VFPS_SHUTDOWN_TIMEOUT",
                Duration::from_secs(20),
            ),
        }
    }
}

impl Readiness {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        Self {
            database_grace: duration(
                env,
                errors,
                "VFPS_READINESS_DATABASE_GRACE",
                Duration::from_secs(30),
            ),
        }
    }
}

impl MetricsConfig {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let count_interval = duration(
            env,
            errors,
            "VFPS_METRICS_COUNT_INTERVAL",
            Duration::from_secs(60),
        );
        // Zero would count without a pause, on every replica.
        if count_interval.is_zero() {
            errors.push("VFPS_METRICS_COUNT_INTERVAL must be greater than zero".into());
        }
        Self { count_interval }
    }
}

impl Telemetry {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        Self {
            log_json: setting(
                env,
                errors,
                "VFPS_LOG_JSON",
                false,
                parse_bool,
                "true or false",
            ),
        }
    }
}
