//! Reports: `summary.json`, `junit.xml`, `failures.txt`, the timeline CSV.
//!
//! # Layout
//! - this file: the [`Summary`] and the files every run writes.
//! - [`markers`]: results on stdout between markers, for a driver that reads
//!   the load generator's log.
//! - [`latency`]: latency per operation, for the run and each scenario.
//! - [`html`]: `report.html`, `timeline.png` and `ui-timeline.png`.
//! - [`multi`]: the multi-pseudonym namespace's counts in `report.html`.
//! - [`sections`]: parts of `report.html` read from the summary alone (margins).
//! - [`chart`]: the timeline chart, and the SVG/PNG rendering every chart uses.
//! - [`ui_chart`]: the web UI's timeline (the browser probe's), drawn under it.
//! - [`sweep`]: the capacity sweep's chart.

use std::{collections::BTreeMap, path::Path};

use anyhow::Context;
use serde::Serialize;

use crate::{
    checker::{chaos::OneNodeCommit, margins::Margin, Availability, Validity, Verdict},
    history::{cpu::CpuCost, csv_header, failover::Failover, CallsReport, OpCounts, Row},
};

pub mod chart;
pub mod erasure;
pub mod html;
pub mod latency;
pub mod markers;
pub mod multi;
pub mod sections;
pub mod sweep;
pub mod ui_chart;

pub fn timeline_csv(rows: &[Row]) -> String {
    let mut s = csv_header();
    s.push('\n');
    for r in rows {
        s.push_str(&r.to_csv());
        s.push('\n');
    }
    s
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Summary {
    pub passed: bool,
    pub seed: u64,
    pub rate_per_second: u32,
    pub availability: Availability,
    pub verdicts: Vec<Verdict>,
    pub failures_by_code: BTreeMap<String, u64>,
    pub ledger_entries: usize,
    pub ledger_indeterminate: usize,
    pub max_dispatch_lag_ms: f64,
    pub warnings: Vec<String>,
    /// The mix the load ran (`RESILIENCE_MIX`).
    #[serde(default)]
    pub mix: String,
    /// Per operation: offered, answered and failed calls.
    #[serde(default)]
    pub operations: BTreeMap<String, OpCounts>,
    /// Every answer by operation and code, and the findings made while the
    /// faults happened (each with its second).
    #[serde(default)]
    pub calls: CallsReport,
    /// Seconds whose acknowledged Creates were lost (P2/P3, online or after).
    #[serde(default)]
    pub lost_seconds: Vec<u64>,
    /// Seconds with an acknowledged Create verified intact through every replica.
    #[serde(default)]
    pub verified_seconds: Vec<u64>,
    /// Wall-clock start of the load window (Unix seconds): the clock of logs.
    #[serde(default)]
    pub load_start_unix: f64,
    /// Commits PostgreSQL logged as left on one node (filled by `collect`).
    #[serde(default)]
    pub one_node_commits: Vec<OneNodeCommit>,
    /// Every budgeted figure with its budget: the run's and the UI's (by the
    /// load), each scenario's (by `collect`).
    #[serde(default)]
    pub margins: Vec<Margin>,
    /// What the load window cost the machine, by part.
    #[serde(default)]
    pub cpu: Option<CpuCost>,
    /// What qualifies the verdict without failing it: the harness took more
    /// than its share of the machine.
    #[serde(default)]
    pub caveats: Vec<String>,
    /// Each database failover's seconds, from the HA manager's and
    /// PostgreSQL's logs (filled by `collect`).
    #[serde(default)]
    pub failovers: Vec<Failover>,
}

/// `summary.json`: the summary's fields, then `latency` — p50, p99 and max per
/// operation for the run and each scenario, computed from the run
/// directory's files (absent without `latency.csv`).
#[derive(Serialize)]
struct SummaryFile<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<latency::LatencyByOperation>,
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn junit(verdicts: &[Verdict]) -> String {
    let failures = verdicts
        .iter()
        .filter(|v| v.validity != Validity::Valid)
        .count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"vfps-resilience\" tests=\"{}\" failures=\"{failures}\">\n",
        verdicts.len()
    );
    for v in verdicts {
        s.push_str(&format!(
            "  <testcase classname=\"vfps.resilience\" name=\"{}\">",
            xml_escape(v.property.name())
        ));
        if v.validity != Validity::Valid {
            let body = std::iter::once(v.summary.clone())
                .chain(v.evidence.iter().cloned())
                .collect::<Vec<_>>()
                .join("\n");
            s.push_str(&format!(
                "<failure message=\"{:?}: {}\">{}</failure>",
                v.validity,
                xml_escape(&v.summary),
                xml_escape(&body)
            ));
        }
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n</testsuites>\n");
    s
}

/// The verdicts on stderr, with a few pieces of evidence each; every
/// budgeted figure with its margin; a WARNING line for each thin margin;
/// where each failover's seconds went; the CPU by part and any CAVEAT; then
/// the verdict.
pub fn print_verdicts(summary: &Summary) {
    for v in &summary.verdicts {
        eprintln!(
            "{:<32} {:<8} {}",
            v.property.name(),
            format!("{:?}", v.validity).to_lowercase(),
            v.summary
        );
        for e in v.evidence.iter().take(10) {
            eprintln!("    {e}");
        }
    }
    if !summary.margins.is_empty() {
        eprintln!("margins (budget minus measured):");
        for m in &summary.margins {
            eprintln!("  {}", m.line());
        }
    }
    for w in crate::checker::margins::warnings(&summary.margins) {
        eprintln!("WARNING: {w}");
    }
    for line in crate::history::failover::lines(&summary.failovers) {
        eprintln!("{line}");
    }
    if let Some(cpu) = &summary.cpu {
        for line in cpu.lines() {
            eprintln!("{line}");
        }
    }
    for c in &summary.caveats {
        eprintln!("CAVEAT: {c}");
    }
    // Repeated at the end: a log cut to its tail still says why.
    for v in failed(summary) {
        eprintln!("failed: {} {}", v.property.name(), v.summary);
    }
    eprintln!("{}", verdict_line(summary));
}

fn failed(summary: &Summary) -> impl Iterator<Item = &Verdict> {
    summary
        .verdicts
        .iter()
        .filter(|v| v.validity != Validity::Valid)
}

/// The run's verdict in a word (a failure names what failed), and whether a
/// caveat qualifies it.
pub fn verdict_line(summary: &Summary) -> String {
    let verdict = if summary.passed {
        "PASS".to_owned()
    } else {
        let names: Vec<String> = failed(summary)
            .map(|v| {
                format!(
                    "{} ({})",
                    v.property.name(),
                    format!("{:?}", v.validity).to_lowercase()
                )
            })
            .collect();
        match names.is_empty() {
            true => "FAIL".to_owned(),
            false => format!("FAIL: {}", names.join(", ")),
        }
    };
    match summary.caveats.len() {
        0 => verdict.to_owned(),
        n => format!(
            "{verdict}, with {n} caveat{}: the harness's own cost (see CAVEAT above)",
            if n == 1 { "" } else { "s" }
        ),
    }
}

/// Writes a file of the run directory; a report that cannot be written is a
/// harness failure, never silently missing.
pub fn write_file(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes `load-timeline.csv`.
pub fn write_timeline(dir: &Path, rows: &[Row]) -> anyhow::Result<()> {
    write_file(dir, "load-timeline.csv", timeline_csv(rows))
}

/// Writes `summary.json`, `junit.xml` and, when anything failed, `failures.txt`.
/// `summary.json` adds the latency per operation of the run directory's
/// `latency.csv` (per scenario when its `chaos-timeline.csv` names them): the
/// same figures for a load, its platform run and a `check` of either.
pub fn write(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    let file = SummaryFile {
        summary,
        latency: latency::read(dir)?,
    };
    write_file(dir, "summary.json", serde_json::to_string_pretty(&file)?)?;
    write_file(dir, "junit.xml", junit(&summary.verdicts))?;
    let failures: Vec<String> = failed(summary)
        .map(|v| format!("{} {:?}: {}", v.property, v.validity, v.summary))
        .collect();
    let path = dir.join("failures.txt");
    if failures.is_empty() {
        if path.exists() {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    } else {
        write_file(dir, "failures.txt", failures.join("\n") + "\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Property;

    #[test]
    fn junit_marks_invalid_and_unknown_as_failures() {
        let v = |p: Property, validity| Verdict {
            property: p,
            validity,
            summary: "s <x>".into(),
            evidence: vec![],
        };
        let x = junit(&[
            v(Property::PseudonymStability, Validity::Valid),
            v(Property::ReverseLookup, Validity::Unknown),
            v(Property::OneSubjectOnePseudonym, Validity::Invalid),
        ]);
        assert!(x.contains("tests=\"3\" failures=\"2\""));
        assert!(x.contains("&lt;x&gt;"));
    }

    /// A run whose harness took more than its share of the machine passes
    /// (its properties held) with a caveat shown on its verdict and its
    /// page, never with a failure.
    #[test]
    fn a_run_whose_harness_took_too_much_passes_with_a_caveat_on_its_verdict() {
        use crate::history::cpu::{CpuCost, Part};
        // The main job before the probe was cut: Chromium 0.57 of 2 cores.
        let cpu = CpuCost {
            window_seconds: 60.0,
            cores: 2,
            parts: [
                (Part::LoadGenerator, 6.0),
                (Part::BrowserProbe, 34.2),
                (Part::Postgres, 12.0),
            ]
            .into_iter()
            .collect(),
            machine_busy_seconds: 62.0,
        };
        let summary = Summary {
            passed: true,
            caveats: crate::checker::cost::caveats(&cpu),
            cpu: Some(cpu),
            ..Summary::default()
        };
        assert_eq!(
            verdict_line(&summary),
            "PASS, with 2 caveats: the harness's own cost (see CAVEAT above)"
        );
        assert!(summary.caveats[0].contains("the harness took 33.5 % of the machine"));
        let dir = vfps_testkit::scratch_dir("report-caveat");
        write(&dir, &summary).unwrap();
        assert!(
            !dir.join("failures.txt").exists(),
            "a caveat is not a failure"
        );
        let json = std::fs::read_to_string(dir.join("summary.json")).unwrap();
        assert!(
            json.contains("\"caveats\"") && json.contains("browser-probe"),
            "{json}"
        );
        let mut page = String::new();
        sections::caveats(&mut page, &summary);
        sections::cpu(&mut page, &summary);
        assert!(page.contains("Caveat") && page.contains("28.5 %"), "{page}");

        let within = Summary {
            passed: true,
            ..Summary::default()
        };
        assert_eq!(verdict_line(&within), "PASS");
    }

    /// The verdict is the last line a CI log keeps: a failed run's names the
    /// properties that failed, so the cause survives a log cut to its tail.
    #[test]
    fn a_failed_runs_verdict_line_names_what_failed() {
        let v = |p: Property, validity| Verdict {
            property: p,
            validity,
            summary: "s".into(),
            evidence: vec![],
        };
        let summary = Summary {
            passed: false,
            verdicts: vec![
                v(Property::PseudonymStability, Validity::Valid),
                v(Property::ReverseLookup, Validity::Unknown),
                v(Property::OneSubjectOnePseudonym, Validity::Invalid),
            ],
            ..Summary::default()
        };
        assert_eq!(
            verdict_line(&summary),
            "FAIL: P3-reverse-lookup (unknown), P4-one-subject-one-pseudonym (invalid)"
        );
    }

    #[test]
    fn the_summary_file_has_the_latency_per_operation_when_the_run_kept_it() {
        use crate::{
            history::{latency, Event, Timeline},
            operation::Operation,
        };
        let dir = vfps_testkit::scratch_dir("report-summary-latency");
        let summary = Summary {
            passed: true,
            seed: 7,
            ..Summary::default()
        };
        write(&dir, &summary).unwrap();
        let read = || -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap()
        };
        assert!(
            read().get("latency").is_none(),
            "no latency.csv: {}",
            read()
        );

        let t = Timeline::new(1);
        t.record(
            0,
            Operation::Get,
            Event::Ok,
            Some(std::time::Duration::from_millis(2)),
        );
        std::fs::write(dir.join("latency.csv"), latency::csv(&t.latency_buckets())).unwrap();
        write(&dir, &summary).unwrap();
        let json = read();
        assert_eq!(json["seed"], 7, "the summary's own fields stay at the top");
        let get = &json["latency"]["run"]["get"];
        assert_eq!(get["calls"], 1);
        assert!(
            (2.0..2.2).contains(&get["p99_ms"].as_f64().unwrap()),
            "{json}"
        );
        assert_eq!(json["latency"]["scenarios"], serde_json::json!([]));
        // What reads a summary back is not bothered by it.
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back.seed, 7);
    }
}
