//! Structured logging. Log lines carry namespaces, codes and counts — never an
//! original value or a pseudonym.

use tracing_subscriber::{fmt, EnvFilter};

/// Installs the global subscriber: `RUST_LOG` filters (default `info`), JSON when asked.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
