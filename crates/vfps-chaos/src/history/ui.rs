//! The web UI's timeline (the browser probe's outcomes per second):
//! `ui-timeline.csv`, one row per second of the load window.

use serde::{Deserialize, Serialize};

use super::ParseError;

/// The header of `ui-timeline.csv`.
pub const UI_TIMELINE_HEADER: &str =
    "second,create_ok,create_failed,lookup_ok,lookup_failed,create_ms,lookup_ms,signed_out";

/// One second of the probe: how its steps begun in that second ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UiRow {
    pub second: u64,
    pub create_ok: u32,
    pub create_failed: u32,
    pub lookup_ok: u32,
    pub lookup_failed: u32,
    /// The step's duration (the longest, if several began), 0 when none.
    pub create_ms: f64,
    pub lookup_ms: f64,
    /// The probe found its browser session lost.
    pub signed_out: u32,
}

pub fn ui_timeline_csv(rows: &[UiRow]) -> String {
    let mut out = format!("{UI_TIMELINE_HEADER}\n");
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.1},{}\n",
            r.second,
            r.create_ok,
            r.create_failed,
            r.lookup_ok,
            r.lookup_failed,
            r.create_ms,
            r.lookup_ms,
            r.signed_out
        ));
    }
    out
}

pub fn parse_ui_timeline(text: &str) -> Result<Vec<UiRow>, ParseError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == UI_TIMELINE_HEADER => {}
        _ => {
            return Err(ParseError(format!(
                "ui-timeline.csv: the first line is not `{UI_TIMELINE_HEADER}`"
            )))
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let bad = || ParseError(format!("ui-timeline.csv line {}: {line:?}", i + 1));
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            return Err(bad());
        }
        let int = |k: usize| f[k].trim().parse::<u32>().map_err(|_| bad());
        rows.push(UiRow {
            second: f[0].trim().parse().map_err(|_| bad())?,
            create_ok: int(1)?,
            create_failed: int(2)?,
            lookup_ok: int(3)?,
            lookup_failed: int(4)?,
            create_ms: f[5].trim().parse().map_err(|_| bad())?,
            lookup_ms: f[6].trim().parse().map_err(|_| bad())?,
            signed_out: int(7)?,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ui_timeline_round_trips_and_a_bad_line_is_named() {
        let rows = vec![UiRow {
            second: 3,
            create_ok: 1,
            lookup_failed: 1,
            create_ms: 41.5,
            ..UiRow::default()
        }];
        assert_eq!(parse_ui_timeline(&ui_timeline_csv(&rows)).unwrap(), rows);
        let e = parse_ui_timeline(&format!("{UI_TIMELINE_HEADER}\n1,2\n")).unwrap_err();
        assert!(e.0.contains("line 2"), "{e:?}");
        assert!(parse_ui_timeline("nope\n").is_err());
    }
}
