//! What happened: the per-second timeline and the ledger.
//!
//! # Layout
//! - [`ledger`]: every acknowledged and indeterminate Create, appended to disk as
//!   it grows.
//! - [`timeline`]: per-second counts and latencies, in all and per operation.
//! - [`calls`]: every answer by operation and code, and the findings made while
//!   the faults happened.
//! - [`cpu`]: the CPU time of the harness's parts and the system under
//!   test's during the load window, from `/proc`.
//! - [`failover`]: where each database failover's seconds went, from the
//!   HA manager's and PostgreSQL's logs and the acknowledgement times.
//! - [`erasures`]: what the run erased and what each replica and the
//!   database answered of it afterwards.
//! - [`leftovers`]: what the final verification checks besides the ledger.
//! - [`multi`]: what `$pseudonymize-multiple` and the erasures in the
//!   multi-pseudonym namespace answered.

pub mod calls;
pub mod cpu;
pub mod erasure_kind;
pub mod erasures;
pub mod failover;
pub mod latency;
pub mod ledger;
pub mod leftovers;
pub mod multi;
pub mod timeline;
pub mod ui;
pub mod verified;

pub use calls::{Broken, Calls, CallsReport, Finding};
pub use ledger::{load_ledger, Entry, Ledger, Status};
pub use leftovers::{Leftovers, SideCheck};
pub use timeline::{csv_header, parse_timeline, Event, OpCounts, Row, Timeline, MARKER_HEADER};

/// A saved ledger or timeline that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);
