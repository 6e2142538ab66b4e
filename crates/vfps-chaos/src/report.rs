//! Reports: the timeline (stdout between markers, and a file), `summary.json`,
//! `junit.xml` and `failures.txt`.

use std::{collections::BTreeMap, io::Write, path::Path};

use serde::Serialize;

use crate::{
    checker::{Availability, Validity, Verdict},
    history::{Row, CSV_HEADER},
};

pub const BEGIN_MARKER: &str = "----BEGIN TIMELINE CSV----";
pub const END_MARKER: &str = "----END TIMELINE CSV----";

pub fn timeline_csv(rows: &[Row]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in rows {
        s.push_str(&r.to_csv());
        s.push('\n');
    }
    s
}

/// Prints the timeline between the markers (for `kubectl logs`) and saves it.
pub fn emit_timeline(rows: &[Row], dir: &Path) -> std::io::Result<()> {
    let csv = timeline_csv(rows);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{BEGIN_MARKER}")?;
    out.write_all(csv.as_bytes())?;
    writeln!(out, "{END_MARKER}")?;
    out.flush()?;
    std::fs::write(dir.join("load-timeline.csv"), csv)
}

/// Extracts the timeline from a log that printed it between the markers.
pub fn extract_timeline(log: &str) -> Option<String> {
    let start = log.find(BEGIN_MARKER)? + BEGIN_MARKER.len();
    let end = log[start..].find(END_MARKER)? + start;
    Some(log[start..end].trim_start_matches(['\r', '\n']).to_owned())
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
            xml_escape(&v.property)
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

/// Writes `summary.json`, `junit.xml` and, when anything failed, `failures.txt`.
pub fn write(dir: &Path, summary: &Summary) -> std::io::Result<()> {
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(summary)?,
    )?;
    std::fs::write(dir.join("junit.xml"), junit(&summary.verdicts))?;
    let failures: Vec<String> = summary
        .verdicts
        .iter()
        .filter(|v| v.validity != Validity::Valid)
        .map(|v| format!("{} {:?}: {}", v.property, v.validity, v.summary))
        .collect();
    let path = dir.join("failures.txt");
    if failures.is_empty() {
        let _ = std::fs::remove_file(path);
    } else {
        std::fs::write(path, failures.join("\n") + "\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_is_extracted_from_between_the_markers() {
        let log =
            format!("noise\n{BEGIN_MARKER}\n{CSV_HEADER}\n0,1,1,0,0,1,1,1,1\n{END_MARKER}\nmore");
        let csv = extract_timeline(&log).unwrap();
        assert_eq!(crate::history::parse_timeline(&csv).unwrap().len(), 1);
        assert_eq!(extract_timeline("no markers"), None);
    }

    #[test]
    fn junit_marks_invalid_and_unknown_as_failures() {
        let v = |p: &str, validity| Verdict {
            property: p.into(),
            validity,
            summary: "s <x>".into(),
            evidence: vec![],
        };
        let x = junit(&[
            v("P2", Validity::Valid),
            v("P3", Validity::Unknown),
            v("P4", Validity::Invalid),
        ]);
        assert!(x.contains("tests=\"3\" failures=\"2\""));
        assert!(x.contains("&lt;x&gt;"));
    }
}
