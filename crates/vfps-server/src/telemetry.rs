//! Structured logging. Log lines carry namespaces, codes and counts — never an
//! original value, a pseudonym or a credential.
//!
//! Audit events (target `vfps::audit`) are always written, one JSON object per
//! line, whatever `RUST_LOG` and `VFPS_LOG_JSON` say, so a collector can route
//! them apart and an operator cannot silence them by turning logs down.

use tracing_subscriber::{
    filter::{LevelFilter, Targets},
    fmt,
    layer::SubscriberExt,
    util::SubscriberInitExt,
    EnvFilter, Layer,
};

use crate::auth::audit;

/// Installs the global subscriber: `RUST_LOG` filters (default `info`), JSON when asked.
///
/// Every filter here is static (levels and targets), so each callsite's interest
/// is decided once and cached: a span or event no layer wants costs nothing per
/// call. (A dynamic filter, such as a closure over the metadata, makes every
/// callsite "sometimes" interesting, and the registry then creates every
/// trace-level span of the HTTP/2 stack on every request.)
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        // The audit trail is the layer below's; never twice.
        .add_directive(
            format!("{}=off", audit::TARGET)
                .parse()
                .unwrap_or_else(|_| LevelFilter::OFF.into()),
        );
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = if json {
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
    let logs = logs.with_filter(filter);
    let audit_trail = fmt::layer()
        .json()
        .flatten_event(true)
        .with_writer(std::io::stderr)
        .with_filter(Targets::new().with_target(audit::TARGET, tracing::Level::INFO));
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(audit_trail)
        .try_init();
}
