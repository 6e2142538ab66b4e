//! `vfps-chaos`: drives a vfps deployment with open-model load, breaks it on
//! purpose, and decides whether it kept its promises (DESIGN §2, §3).
//!
//! # Layout
//! From the command down; a module imports only modules below it.
//! - `main.rs`: the command line — `load`, `check`, `capacity`, and the
//!   `local …` / `kind …` steps — and the exit codes (0 passed, 1 a property
//!   failed, 2 the harness failed), mapped in one place.
//! - [`backup`]: continuous backup to S3 with the Barman cloud tools and
//!   point-in-time restore from the bucket alone; its refusals.
//! - [`capacity`]: the capacity sweep — the offered rate raised step by step
//!   until p99 or failures break, the knee, its JSON and chart.
//! - [`platform`]: where the topology lives — [`platform::local`],
//!   [`platform::kind`] — each implementing the driver and the faults.
//! - [`driver`]: a platform run as steps (up, scenarios, collect, down) and the
//!   one `all`; the final verdicts and reports.
//! - [`nemesis`]: the faults as nouns, shared by the platforms, one file per
//!   fault family; the recorder of the chaos timeline.
//! - [`drill`]: the restore drill's client side (its load, the read-back
//!   under the restore hold, P9's verdict and outcome), shared by the
//!   platforms, and `drill-client`, the client inside a Kubernetes cluster.
//! - [`run`]: a load run's phases — init, load, settle, verify, assert, report —
//!   and `check`.
//! - [`config`]: a load run's settings, in sections.
//! - [`workload`]: the open-model generator.
//! - [`verify`]: the verification pass (re-Create, reverse Get).
//! - [`report`]: summary, JUnit, failures, markers on stdout, HTML and PNG.
//! - [`checker`]: one checker per property, composed; typed verdicts.
//! - [`scenario`]: the scenarios, the plan and the chaos timeline's events.
//! - [`history`]: the ledger and the per-second timeline.
//! - [`operation`], [`target`]: the kinds of call, and which platform a run
//!   targets.
//! - [`checkout`]: the checkout's folders the harness reads (`tests/ui`, the
//!   Kubernetes assets, the chart), found wherever it is run from.

pub mod backup;
pub mod capacity;
pub mod checker;
pub mod checkout;
pub mod config;
pub mod drill;
pub mod driver;
pub mod history;
pub mod mix;
pub mod nemesis;
pub mod operation;
pub mod platform;
pub mod report;
pub mod run;
pub mod scenario;
pub mod target;
pub mod verify;
pub mod workload;

/// A short, non-reversible tag for a value in evidence and logs: never print a
/// full original (or pseudonym) outside the run directory.
pub fn redact(value: &str) -> String {
    use sha2::{Digest, Sha256};
    format!(
        "sha256:{}",
        &hex::encode(Sha256::digest(value.as_bytes()))[..12]
    )
}
