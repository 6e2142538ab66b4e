//! The end of a platform run: the load's verdicts, per-scenario P1 and whether
//! the chaos fit its window, composed once in memory; then every report written
//! once — `summary.json`, `junit.xml`, `failures.txt`, `scenarios.json`,
//! `report.html` and `timeline.png`.

use std::path::Path;

use anyhow::Context;

use super::artifacts;
use crate::{
    checker::{availability, chaos},
    history,
    report::{self, html, Summary},
    scenario::{events, ScenarioPlan},
};

/// Whether every verdict held. `load` is the load's own summary; the chaos
/// outcome and both timelines are read from `dir`.
pub fn finish(dir: &Path, plan: &ScenarioPlan, load: Summary) -> anyhow::Result<bool> {
    let outcome = artifacts::read_chaos_outcome(dir)?;
    let timeline = std::fs::read_to_string(dir.join("load-timeline.csv"))
        .with_context(|| format!("cannot read {}", dir.join("load-timeline.csv").display()))?;
    let rows = history::parse_timeline(&timeline)?;
    let windows = events::windows(&artifacts::read_chaos_events(dir)?);
    let per_scenario = availability::per_scenario(&rows, &windows, plan, load.rate_per_second)?;

    let mut summary = load;
    for r in &per_scenario {
        eprintln!("{}", r.verdict.summary);
        summary.verdicts.push(r.verdict.clone());
    }
    summary.verdicts.push(chaos::within_window(
        &outcome,
        plan,
        &windows,
        plan.load_seconds(),
    ));
    summary.passed = summary.verdicts.iter().all(|v| v.passed());

    report::write(dir, &summary)?;
    report::write_file(
        dir,
        "scenarios.json",
        serde_json::to_string_pretty(&per_scenario)?,
    )?;
    report::write_file(
        dir,
        "report.html",
        html::page(
            &rows,
            &windows,
            &per_scenario,
            &summary.verdicts,
            summary.passed,
        ),
    )?;
    report::write_file(
        dir,
        "timeline.png",
        html::plot_png(&rows, &windows).context("cannot draw timeline.png")?,
    )?;
    report::print_verdicts(&summary);
    eprintln!(
        "run directory: {} ({})",
        dir.display(),
        if summary.passed { "PASS" } else { "FAIL" }
    );
    Ok(summary.passed)
}
