//! Markers on stdout, so a driver that only sees the load generator's log (a
//! Kubernetes Job) gets its results: the timeline CSV, the summary JSON, and the
//! wall-clock instant the load window began.

use std::io::Write;

use super::Summary;
use crate::history::{Row, MARKER_HEADER};

pub const BEGIN_MARKER: &str = "----BEGIN TIMELINE CSV----";
pub const END_MARKER: &str = "----END TIMELINE CSV----";

/// The timeline in the seed's marker format: `second,ok,failed,shed,mean_ms,max_ms`.
pub fn marker_timeline(rows: &[Row]) -> String {
    let mut s = format!("{MARKER_HEADER}\n");
    for r in rows {
        s.push_str(&r.to_marker_csv());
        s.push('\n');
    }
    s
}

/// Prints the timeline between the markers (for `kubectl logs`), in the seed's
/// format; the extended columns are in `load-timeline.csv` only.
pub fn emit_timeline(rows: &[Row]) -> std::io::Result<()> {
    let csv = marker_timeline(rows);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{BEGIN_MARKER}")?;
    out.write_all(csv.as_bytes())?;
    writeln!(out, "{END_MARKER}")?;
    out.flush()
}

/// Extracts the timeline from a log that printed it between the markers.
pub fn extract_timeline(log: &str) -> Option<String> {
    between(log, BEGIN_MARKER, END_MARKER)
}

fn between(log: &str, begin: &str, end: &str) -> Option<String> {
    let start = log.find(begin)? + begin.len();
    let stop = log[start..].find(end)? + start;
    Some(log[start..stop].trim_start_matches(['\r', '\n']).to_owned())
}

pub const SUMMARY_BEGIN: &str = "----BEGIN SUMMARY JSON----";
pub const SUMMARY_END: &str = "----END SUMMARY JSON----";

/// Prints the summary (verdicts, evidence already redacted) between markers, so a
/// driver that only sees the generator's log (a Kubernetes Job) can report it.
pub fn emit_summary(summary: &Summary) -> std::io::Result<()> {
    let json = serde_json::to_string(summary)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{SUMMARY_BEGIN}\n{json}\n{SUMMARY_END}")?;
    out.flush()
}

pub fn extract_summary(log: &str) -> Option<Result<Summary, String>> {
    between(log, SUMMARY_BEGIN, SUMMARY_END)
        .map(|j| serde_json::from_str(j.trim()).map_err(|e| format!("summary in the log: {e}")))
}

pub const LOAD_START_PREFIX: &str = "----LOAD WINDOW START unix=";

/// Prints the wall-clock instant the load window begins: the clock a remote
/// chaos driver puts its events on (kind nodes share the host's clock).
pub fn emit_load_start(unix_seconds: f64) {
    println!("{LOAD_START_PREFIX}{unix_seconds:.3}----");
}

pub fn extract_load_start(log: &str) -> Option<f64> {
    let start = log.find(LOAD_START_PREFIX)? + LOAD_START_PREFIX.len();
    log[start..].split("----").next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_load_start_and_summary_are_found_in_a_log() {
        let summary = Summary {
            passed: false,
            seed: 7,
            rate_per_second: 5,
            availability: crate::checker::availability::of(&[], 5),
            verdicts: Vec::new(),
            failures_by_code: BTreeMap::new(),
            ledger_entries: 3,
            ledger_indeterminate: 1,
            max_dispatch_lag_ms: 0.5,
            warnings: Vec::new(),
            ..Summary::default()
        };
        let log = format!(
            "x\n{LOAD_START_PREFIX}1700000000.250----\nprogress\n{SUMMARY_BEGIN}\n{}\n{SUMMARY_END}\n",
            serde_json::to_string(&summary).unwrap()
        );
        assert_eq!(extract_load_start(&log), Some(1_700_000_000.25));
        let back = extract_summary(&log).unwrap().unwrap();
        assert_eq!((back.seed, back.ledger_entries), (7, 3));
        assert!(extract_load_start("no marker").is_none());
        assert!(extract_summary("no marker").is_none());
        let torn = format!("{SUMMARY_BEGIN}\n{{\"passed\":\n{SUMMARY_END}");
        assert!(extract_summary(&torn).unwrap().is_err());
    }

    #[test]
    fn the_timeline_is_extracted_from_between_the_markers() {
        let log =
            format!("noise\n{BEGIN_MARKER}\n{MARKER_HEADER}\n0,1,0,0,1.0,1.0\n{END_MARKER}\nmore");
        let csv = extract_timeline(&log).unwrap();
        assert_eq!(crate::history::parse_timeline(&csv).unwrap().len(), 1);
        assert_eq!(extract_timeline("no markers"), None);
    }
}
