//! `vfps-chaos`: drives a vfps deployment with open-model load and decides whether
//! it kept its promises (DESIGN §2, §3).
//!
//! # Layout
//! - [`config`]: the run's settings (`RESILIENCE_*` variables and flags).
//! - [`generator`]: the open-model schedule — intended send times, in-flight cap,
//!   shedding; results attributed to the second a call was offered.
//! - [`history`]: the per-second timeline and the ledger of acknowledged and
//!   indeterminate Creates, appended to disk as they happen.
//! - [`verify`]: the verification pass (re-Create, reverse Get) after settling.
//! - [`checker`]: pure functions from history and verification to verdicts P1–P4.
//! - [`report`]: timeline CSV (stdout markers and file), `summary.json`, JUnit.
//! - [`run`]: the phases of `vfps-chaos load` and `vfps-chaos check`.
//! - [`scenario`]: named faults with durations, the load window, attribution of
//!   every second to its scenario.
//! - [`nemesis`]: the faults, each proving it applied and healed.
//! - [`platform`]: where the topology lives (`local`: namespaces, Patroni, etcd;
//!   `kind`: kind, CloudNativePG, Chaos Mesh through kubectl).
//! - [`drive`]: what the platform drivers share (plan, chaos outcome, final report).
//! - [`local_run`]: `--platform local` up, scenarios, collect, down.
//! - [`kind_run`]: `--platform kind` up, scenarios, collect, down, render.
//! - [`report_html`]: the self-contained HTML report with the timeline plot.
//! - [`fake`]: a trivial in-process server for the harness's own tests and benchmark.

pub mod checker;
pub mod config;
pub mod drive;
pub mod fake;
pub mod generator;
pub mod history;
pub mod kind_run;
pub mod local_run;
pub mod nemesis;
pub mod platform;
pub mod report;
pub mod report_html;
pub mod run;
pub mod scenario;
pub mod verify;

/// A short, non-reversible tag for a value in evidence and logs: never print a
/// full original (or pseudonym) outside the run directory.
pub fn redact(value: &str) -> String {
    use sha2::{Digest, Sha256};
    format!(
        "sha256:{}",
        &hex::encode(Sha256::digest(value.as_bytes()))[..12]
    )
}
