//! The failover breakdown of a platform run: the faults of the scenarios that
//! fail the database over (from `chaos-timeline.csv`), the HA manager's and
//! PostgreSQL's log lines (the run directory's copies), and the ledger's
//! acknowledgement times, handed to [`history::failover::breakdown`]. Best
//! effort: a log or ledger that cannot be read leaves its steps "not seen"
//! and says so on stderr, never fails the run.

use std::path::{Path, PathBuf};

use crate::{
    history::{
        self,
        failover::{self, Failover, Fault, LogLine},
        ledger::Status,
    },
    scenario::{
        events::{ChaosEvent, EventKind},
        Scenario, ScenarioPlan,
    },
};

/// The logs to read, each with the member (or instance) it is of.
pub struct Logs {
    pub postgres: Vec<(String, PathBuf)>,
    pub ha: Vec<(String, PathBuf)>,
}

/// Whether a scenario's faults make the cluster fail over.
fn fails_over(s: Scenario) -> bool {
    matches!(
        s,
        Scenario::DbPrimaryKill
            | Scenario::DbPrimaryPause
            | Scenario::DbPrimaryIsolation
            | Scenario::DbDoubleFailover
    )
}

/// Every failover of the run, in time order.
pub fn of_run(
    dir: &Path,
    plan: &ScenarioPlan,
    events: &[ChaosEvent],
    logs: &Logs,
    load_start_unix: f64,
) -> Vec<Failover> {
    let faults: Vec<Fault> = events
        .iter()
        .filter(|e| e.kind == EventKind::Fault)
        .filter_map(|e| {
            let scenario = e.scenario.clone()?;
            let planned = plan.get(&scenario)?;
            fails_over(planned.scenario).then(|| Fault {
                at_seconds: e.at_seconds,
                scenario,
                text: e.text.clone(),
            })
        })
        .collect();
    if faults.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<LogLine> = Vec::new();
    let mut read = |member: &str, path: &Path, parse: fn(&str, &str) -> Option<LogLine>| {
        match std::fs::read_to_string(path) {
            Ok(text) => lines.extend(failover::events(&text, member, parse)),
            Err(e) => eprintln!("failovers: cannot read {} ({e})", path.display()),
        }
    };
    for (member, path) in &logs.ha {
        read(member, path, failover::patroni_line);
    }
    for (member, path) in &logs.postgres {
        read(member, path, failover::postgres_line);
    }
    let acks: Vec<f64> = match history::ledger::load_ledger(&dir.join("ledger.jsonl")) {
        Ok(saved) => saved
            .entries
            .iter()
            .filter(|e| e.status == Status::Ok)
            .filter_map(|e| e.acked_unix_ms)
            .map(|ms| ms as f64 / 1000.0)
            .collect(),
        Err(e) => {
            eprintln!("failovers: no acknowledgement times ({e})");
            Vec::new()
        }
    };
    failover::breakdown(&faults, &lines, &acks, load_start_unix)
}
