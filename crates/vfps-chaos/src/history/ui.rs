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

/// `ui-timeline.csv`: the header, then a row per second.
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

/// Reads `ui-timeline.csv`. Refused, naming the line (from 1) and what is
/// wrong with it: another header, a row without exactly the header's
/// columns, a count that is not a whole number, a duration that is not a
/// number of milliseconds (finite, not negative), `signed_out` other than 0
/// or 1, a second not after the row before's. Blank lines are skipped.
pub fn parse_ui_timeline(text: &str) -> Result<Vec<UiRow>, ParseError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == UI_TIMELINE_HEADER => {}
        other => {
            return Err(ParseError(format!(
                "ui-timeline.csv line 1: expected the header `{UI_TIMELINE_HEADER}`, found {:?}",
                other.map_or("", |(_, h)| h)
            )))
        }
    }
    let columns: Vec<&str> = UI_TIMELINE_HEADER.split(',').collect();
    let mut rows: Vec<UiRow> = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let bad =
            |what: String| ParseError(format!("ui-timeline.csv line {}: {what}: {line:?}", i + 1));
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != columns.len() {
            return Err(bad(format!(
                "{} columns, expected {}",
                f.len(),
                columns.len()
            )));
        }
        let count = |k: usize| {
            f[k].parse::<u32>()
                .map_err(|_| bad(format!("{} is not a count", columns[k])))
        };
        let ms = |k: usize| match f[k].parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(bad(format!("{} is not a duration in ms", columns[k]))),
        };
        let row = UiRow {
            second: f[0]
                .parse()
                .map_err(|_| bad("second is not a whole number of seconds".into()))?,
            create_ok: count(1)?,
            create_failed: count(2)?,
            lookup_ok: count(3)?,
            lookup_failed: count(4)?,
            create_ms: ms(5)?,
            lookup_ms: ms(6)?,
            signed_out: match count(7)? {
                v @ (0 | 1) => v,
                _ => return Err(bad("signed_out is neither 0 nor 1".into())),
            },
        };
        if let Some(before) = rows.last() {
            if row.second <= before.second {
                return Err(bad(format!(
                    "second {} does not follow second {}",
                    row.second, before.second
                )));
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<UiRow> {
        vec![
            UiRow {
                second: 0,
                create_ok: 1,
                lookup_ok: 1,
                create_ms: 120.5,
                lookup_ms: 80.0,
                ..UiRow::default()
            },
            UiRow {
                second: 1,
                create_failed: 1,
                lookup_failed: 1,
                create_ms: 3000.0,
                signed_out: 1,
                ..UiRow::default()
            },
            UiRow {
                second: 2,
                ..UiRow::default()
            },
        ]
    }

    #[test]
    fn the_ui_timeline_round_trips_through_its_writer_and_parser() {
        let text = ui_timeline_csv(&rows());
        assert!(text.starts_with(&format!("{UI_TIMELINE_HEADER}\n0,1,0,1,0,120.5,80.0,0\n")));
        assert_eq!(parse_ui_timeline(&text).unwrap(), rows());
        assert_eq!(parse_ui_timeline(&ui_timeline_csv(&[])).unwrap(), []);
        // Blank lines (a trailing one, one in between) are not rows.
        let spaced = text.replacen("\n1,", "\n\n1,", 1) + "\n";
        assert_eq!(parse_ui_timeline(&spaced).unwrap(), rows());
    }

    #[test]
    fn a_bad_ui_timeline_is_refused_naming_the_line_and_what_is_wrong() {
        let refused = |text: &str| parse_ui_timeline(text).unwrap_err().0;
        let e = refused("second,ok\n0,1\n");
        assert!(
            e.contains("line 1") && e.contains("expected the header"),
            "{e}"
        );
        assert!(refused("").contains("line 1"));
        let with = |body: &str| {
            refused(&format!(
                "{UI_TIMELINE_HEADER}\n0,1,0,1,0,1.0,1.0,0\n{body}\n"
            ))
        };
        for (body, what) in [
            ("1,2", "2 columns, expected 8"),
            ("1,1,0,1,0,1.0,1.0,0,9", "9 columns, expected 8"),
            ("x,1,0,1,0,1.0,1.0,0", "second is not"),
            ("1,yes,0,1,0,1.0,1.0,0", "create_ok is not a count"),
            ("1,1,0,-1,0,1.0,1.0,0", "lookup_ok is not a count"),
            ("1,1,0,1,0,slow,1.0,0", "create_ms is not a duration"),
            ("1,1,0,1,0,1.0,-3,0", "lookup_ms is not a duration"),
            ("1,1,0,1,0,1.0,NaN,0", "lookup_ms is not a duration"),
            ("1,1,0,1,0,1.0,1.0,2", "signed_out is neither 0 nor 1"),
            ("0,1,0,1,0,1.0,1.0,0", "second 0 does not follow second 0"),
        ] {
            let e = with(body);
            assert!(e.starts_with("ui-timeline.csv line 3: "), "{body}: {e}");
            assert!(e.contains(what), "{body}: {e}");
            assert!(e.contains(body), "the line itself is quoted: {e}");
        }
    }
}
