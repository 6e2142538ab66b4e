//! What a run's steps leave for each other in the run directory: `plan.json`
//! (before anything runs), `chaos-timeline.csv` and `chaos.json` (what the
//! nemesis did), `load-summary.json` (the load's own verdicts, for `collect`),
//! `restore-drill.json` (the restore drill's), and appending to `failures.txt`.

use std::{io::Write, path::Path};

use anyhow::Context;

use crate::{
    checker::chaos::ChaosOutcome,
    nemesis::Tally,
    report::{self, Summary},
    scenario::{
        events::{self, ChaosEvent},
        ScenarioPlan,
    },
};

fn read(dir: &Path, name: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// Writes `plan.json` before anything runs.
pub fn write_plan(dir: &Path, plan: &ScenarioPlan) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    report::write_file(dir, "plan.json", serde_json::to_string_pretty(plan)?)
}

/// Writes `chaos-timeline.csv` and `chaos.json`.
pub fn write_chaos(
    dir: &Path,
    events: &[ChaosEvent],
    result: &anyhow::Result<Tally>,
    finished_seconds: f64,
) -> anyhow::Result<()> {
    report::write_file(dir, "chaos-timeline.csv", events::chaos_csv(events))?;
    let tally = result.as_ref().copied().unwrap_or_default();
    let outcome = ChaosOutcome {
        failovers: tally.failovers,
        replica_kills: tally.replica_kills,
        partitions: tally.partitions,
        gray_faults: tally.gray_faults,
        finished_seconds,
        error: result.as_ref().err().map(|e| format!("{e:#}")),
    };
    report::write_file(dir, "chaos.json", serde_json::to_string_pretty(&outcome)?)
}

pub fn read_chaos_outcome(dir: &Path) -> anyhow::Result<ChaosOutcome> {
    serde_json::from_str(&read(dir, "chaos.json")?).context("chaos.json")
}

pub fn read_chaos_events(dir: &Path) -> anyhow::Result<Vec<ChaosEvent>> {
    Ok(events::parse_chaos_csv(&read(dir, "chaos-timeline.csv")?)?)
}

/// The load's own summary, for `collect` to compose the run's verdicts with.
pub fn write_load_summary(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    report::write_file(
        dir,
        "load-summary.json",
        serde_json::to_string_pretty(summary)?,
    )
}

pub fn read_load_summary(dir: &Path) -> anyhow::Result<Summary> {
    serde_json::from_str(&read(dir, "load-summary.json")?).context("load-summary.json")
}

/// Appends a line to `failures.txt`.
pub fn append_failure(dir: &Path, line: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("failures.txt");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("cannot write {}", path.display()))
}

/// The file the restore drill's outcome is left in for the final verdicts.
pub const DRILL_OUTCOME_FILE: &str = "restore-drill.json";

/// What the restore drill did and found (`db-restore-drill`), for the final
/// verdicts.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DrillOutcome {
    pub verdict: crate::checker::Verdict,
    pub measured: Option<crate::checker::restore::Measured>,
    /// Each step and when it ended, in seconds of the drill's clock.
    pub steps: Vec<(String, f64)>,
}

/// Reads the drill's outcome from a run directory, if the run had a drill.
pub fn read_drill_outcome(dir: &Path) -> anyhow::Result<Option<DrillOutcome>> {
    let path = dir.join(DRILL_OUTCOME_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}
