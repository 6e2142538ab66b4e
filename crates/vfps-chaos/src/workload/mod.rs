//! The workload: what the harness asks of the service, and when.
//!
//! - [`generator`]: the open-model schedule — calls dispatched on a wall-clock
//!   schedule whatever the service does, shed past an in-flight cap, each result
//!   recorded in the timeline and the ledger.

pub mod generator;
