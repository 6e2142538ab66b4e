//! What happened: the per-second timeline and the ledger.
//!
//! # Layout
//! - [`ledger`]: every acknowledged and indeterminate Create, appended to disk as
//!   it grows.
//! - [`timeline`]: per-second counts and latencies.

pub mod ledger;
pub mod timeline;

pub use ledger::{load_ledger, Entry, Ledger, Status};
pub use timeline::{parse_timeline, Event, Row, Timeline, CSV_HEADER};

/// A saved ledger or timeline that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);
