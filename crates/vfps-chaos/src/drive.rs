//! What every platform's driver shares: the plan from the environment, the chaos
//! outcome a `scenarios` step leaves for `collect`, and `finish` — per-scenario
//! attribution, the final verdicts and the reports.

use std::path::Path;

use crate::{
    checker::{Validity, Verdict},
    nemesis::{Knobs, Tally},
    platform::Target,
    report, report_html,
    run::{harness, HarnessError},
    scenario::{self, ChaosEvent, Plan},
};

/// The settings shared by every platform's driver.
#[derive(Debug, Clone, clap::Args)]
pub struct DriveArgs {
    /// Scenarios in order, comma-separated (default: every scenario).
    #[arg(long, env = "SCENARIOS")]
    pub scenarios: Option<String>,
}

/// The plan and fault knobs from the environment, with the target's defaults.
pub fn plan(args: &DriveArgs, target: Target) -> Result<(Plan, Knobs), HarnessError> {
    let list = args
        .scenarios
        .as_deref()
        .unwrap_or(scenario::default_scenarios(target));
    let plan = Plan::from_env(list, target, |k| std::env::var(k).ok()).map_err(HarnessError)?;
    let knobs = Knobs::from_env(|k| std::env::var(k).ok()).map_err(HarnessError)?;
    Ok((plan, knobs))
}

/// What `scenarios` leaves for `collect`.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ChaosOutcome {
    pub failovers: u32,
    #[serde(default)]
    pub replica_kills: u32,
    #[serde(default)]
    pub partitions: u32,
    pub finished_seconds: f64,
    pub error: Option<String>,
}

/// Writes `plan.json` before anything runs.
pub fn write_plan(dir: &Path, plan: &Plan) -> Result<(), HarnessError> {
    std::fs::create_dir_all(dir).map_err(harness)?;
    std::fs::write(
        dir.join("plan.json"),
        serde_json::to_string_pretty(plan).map_err(harness)?,
    )
    .map_err(harness)
}

/// Writes `chaos-timeline.csv` and `chaos.json`.
pub fn write_chaos(
    dir: &Path,
    events: &[ChaosEvent],
    result: &anyhow::Result<Tally>,
    finished_seconds: f64,
) -> Result<(), HarnessError> {
    std::fs::write(dir.join("chaos-timeline.csv"), scenario::chaos_csv(events)).map_err(harness)?;
    let tally = result.as_ref().copied().unwrap_or_default();
    let outcome = ChaosOutcome {
        failovers: tally.failovers,
        replica_kills: tally.replica_kills,
        partitions: tally.partitions,
        finished_seconds,
        error: result.as_ref().err().map(|e| format!("{e:#}")),
    };
    std::fs::write(
        dir.join("chaos.json"),
        serde_json::to_string_pretty(&outcome).map_err(harness)?,
    )
    .map_err(harness)
}

/// From a run directory holding `summary.json`, `chaos.json`, `load-timeline.csv`
/// and `chaos-timeline.csv`: per-scenario P1, whether the chaos fit its window,
/// the final verdict; rewrites the reports and adds `scenarios.json`,
/// `report.html` and `timeline.png`. Returns whether every verdict held.
pub fn finish(
    dir: &Path,
    plan: &Plan,
    rate_per_second: u32,
    load_seconds: u64,
) -> Result<bool, HarnessError> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|e| harness(format!("{}: {e}", dir.join(name).display())))
    };
    let mut summary: report::Summary =
        serde_json::from_str(&read("summary.json")?).map_err(harness)?;
    let outcome: ChaosOutcome = serde_json::from_str(&read("chaos.json")?).map_err(harness)?;
    let rows = crate::history::parse_timeline(&read("load-timeline.csv")?).map_err(harness)?;
    let events = scenario::parse_chaos_csv(&read("chaos-timeline.csv")?).map_err(harness)?;
    let windows = scenario::windows(&events);
    let per_scenario = scenario::attribute(&rows, &windows, plan, rate_per_second);
    summary.verdicts.retain(|v| {
        v.property != "P1-scenario-outage" && v.property != "chaos-completed-within-window"
    });
    for r in &per_scenario {
        eprintln!("{}", r.verdict.summary);
        summary.verdicts.push(r.verdict.clone());
    }
    let missing: Vec<&str> = plan
        .scenarios
        .iter()
        .filter(|p| !windows.iter().any(|w| w.scenario == p.name))
        .map(|p| p.name.as_str())
        .collect();
    let fits = outcome.error.is_none()
        && missing.is_empty()
        && outcome.finished_seconds <= load_seconds as f64;
    summary.verdicts.push(Verdict {
        property: "chaos-completed-within-window".into(),
        validity: if fits {
            Validity::Valid
        } else {
            Validity::Invalid
        },
        summary: match &outcome.error {
            Some(e) => format!("a scenario failed: {e}"),
            None if !missing.is_empty() => {
                format!("scenarios never started: {}", missing.join(", "))
            }
            None => format!(
                "chaos finished at {:.1} s of a {} s window; {} replica kills, {} failovers, {} partitions",
                outcome.finished_seconds,
                load_seconds,
                outcome.replica_kills,
                outcome.failovers,
                outcome.partitions
            ),
        },
        evidence: Vec::new(),
    });
    summary.passed = summary
        .verdicts
        .iter()
        .all(|v| v.validity == Validity::Valid);
    report::write(dir, &summary).map_err(harness)?;
    let _ = std::fs::write(
        dir.join("scenarios.json"),
        serde_json::to_string_pretty(&per_scenario).unwrap_or_default(),
    );
    let _ = std::fs::write(
        dir.join("report.html"),
        report_html::page(
            &rows,
            &windows,
            &per_scenario,
            &summary.verdicts,
            summary.passed,
        ),
    );
    let _ = std::fs::write(
        dir.join("timeline.png"),
        report_html::plot_png(&rows, &windows),
    );
    eprintln!(
        "run directory: {} ({})",
        dir.display(),
        if summary.passed { "PASS" } else { "FAIL" }
    );
    Ok(summary.passed)
}
