//! Structured logging, the audit log and, when `Tracing__IsEnabled`, OpenTelemetry
//! traces. Log lines and spans carry namespaces, codes, counts and causes —
//! never an original value, a pseudonym or a credential.
//!
//! Audit events (target `vfps::audit`) are always written, one JSON object per
//! line, whatever `RUST_LOG` and `VFPS_LOG_JSON` say, so a collector can route
//! them apart and an operator cannot silence them by turning logs down.
//!
//! Spans for traces are not `tracing`'s: they are [`vfps_store::trace`] spans,
//! made by a call's [`requests::Traced`] wrapper and the code below it, and
//! ended into the OpenTelemetry pipeline; no log event's text reaches an
//! exporter. With tracing off no span is made. See `docs/observability.md`
//! for every span and attribute.

mod otlp;
pub mod requests;
mod spans;
mod traces;

use std::time::Duration;

use tracing_subscriber::{
    filter::{FilterExt, LevelFilter, Targets},
    fmt,
    layer::SubscriberExt,
    util::SubscriberInitExt,
    EnvFilter, Layer,
};

use crate::{auth::audit, config};

/// The layers over the registry: log lines and the audit trail.
fn subscriber(logs: &config::Telemetry) -> impl tracing::Subscriber + Send + Sync + 'static {
    let off = |target: &str| {
        format!("{target}=off")
            .parse()
            .unwrap_or_else(|_| LevelFilter::OFF.into())
    };
    // The audit trail is another layer's; never in the log lines.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(off(audit::TARGET));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = if logs.log_json {
        fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .boxed()
    };
    // Whatever RUST_LOG asks for: the PostgreSQL client logs each statement's
    // parameters (originals, pseudonyms) at debug.
    let never_values = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("tokio_postgres", LevelFilter::INFO);
    let lines = lines.with_filter(filter.and(never_values));
    let audit_trail = fmt::layer()
        .json()
        .flatten_event(true)
        .with_writer(std::io::stderr)
        .with_filter(Targets::new().with_target(audit::TARGET, tracing::Level::INFO));
    tracing_subscriber::registry().with(lines).with(audit_trail)
}

/// What logging and tracing hold on to while the process serves: the trace
/// exporter, to be flushed before the process exits.
#[must_use = "dropping Telemetry without shutdown loses the spans not yet exported"]
pub struct Telemetry {
    /// `None` when tracing is off.
    traces: Option<traces::Pipeline>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn tracing(&self) -> bool {
        self.traces.is_some()
    }

    /// Exports every span finished so far, waiting for the collector (tests).
    pub fn flush(&self) {
        if let Some(t) = &self.traces {
            t.flush();
        }
    }

    /// Exports what is left, waiting at most `timeout`, and stops the exporter.
    /// Blocks the calling thread: call it outside the runtime's worker threads
    /// (after `block_on`, or in `spawn_blocking`), while the runtime still exists.
    pub fn shutdown(self, timeout: Duration) {
        if let Some(t) = self.traces {
            t.shutdown(timeout);
        }
    }
}

/// Installs the global subscriber (logs filtered by `RUST_LOG`, default `info`,
/// JSON when asked, and the audit trail) and, when tracing is on, the global
/// tracer ([`vfps_store::trace::install`]) whose spans the OpenTelemetry
/// pipeline exports.
///
/// Every filter here is static (levels and targets), so each callsite's interest
/// is decided once and cached: a span or event no layer wants costs nothing per
/// call. (A dynamic filter, such as a closure over the metadata, makes every
/// callsite "sometimes" interesting, and the registry then creates every
/// trace-level span of the HTTP/2 stack on every request.) With tracing on,
/// call it inside the Tokio runtime that will serve: the exporter's gRPC
/// channel runs on it. The log subscriber and the tracer are each installed
/// once per process: a later call installs no subscriber, and asking for
/// tracing when a tracer is installed is an error.
pub fn init(logs: &config::Telemetry, tracing: &config::Tracing) -> anyhow::Result<Telemetry> {
    let pipeline = tracing
        .enabled
        .then(|| traces::Pipeline::new(tracing))
        .transpose()?;
    // Another subscriber (a test's) is no obstacle: it gets the log lines.
    let _ = subscriber(logs).try_init();
    let traces = match pipeline {
        Some(p) if vfps_store::trace::install(p.tracer()) => {
            tracing::info!(
                endpoint = %tracing.otlp_endpoint,
                service_name = %tracing.service_name,
                root_sampler = ?tracing.root_sampler,
                sampling_probability = tracing.sampling_probability,
                "tracing is on: spans are exported over OTLP/gRPC"
            );
            Some(p)
        }
        Some(p) => {
            p.discard();
            anyhow::bail!(
                "tracing is already set up in this process (only the first set-up counts)"
            );
        }
        None => None,
    };
    Ok(Telemetry { traces })
}
