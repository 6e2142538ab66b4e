//! One batch of records through a job: the cells to resolve are gathered
//! (each distinct value once), then every record is written with its
//! replacements, in input order, one output record per input record.
//!
//! Output is a function of the input and the answers alone — the same records
//! with the same answers give the same bytes — which is what lets a runner
//! resume at a checkpoint and lets a fenced runner's late write be harmless.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{
    csv::{write_field, Record},
    encoding::Encoding,
    spec::{Direction, Plan},
};

/// Line numbers of malformed records kept for the report; the count goes on.
pub const MAX_REPORTED_LINES: usize = 100;

/// What a job has met so far (a part of every checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Data records written (the header not included).
    pub rows: u64,
    /// Blank cells and missing-value placeholders passed through.
    pub missing: u64,
    /// Records passed through unchanged for a wrong field count or broken quoting.
    pub malformed: u64,
    /// The first [`MAX_REPORTED_LINES`] lines of malformed records.
    pub malformed_lines: Vec<u64>,
    /// De-pseudonymizing: values that are no pseudonym of their namespace, kept.
    pub unknown: u64,
    /// Empty lines passed through.
    pub blank_lines: u64,
}

/// Why a batch cannot be written; the job fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct RowError {
    pub line: u64,
    pub reason: String,
}

/// How a job treats cells, beyond its plan.
#[derive(Debug, Clone)]
pub struct Rules {
    pub direction: Direction,
    pub encoding: Encoding,
    pub delimiter: u8,
    /// `CsvProcessing__MissingValuePlaceholders`, compared trimmed and
    /// case-insensitively; a blank cell is always missing.
    pub placeholders: Vec<String>,
}

impl Rules {
    pub fn is_missing(&self, text: &str) -> bool {
        let t = text.trim();
        t.is_empty() || self.placeholders.iter().any(|p| p.eq_ignore_ascii_case(t))
    }
}

/// A cell's fate.
#[derive(Debug, Clone, Copy)]
enum Cell {
    /// Written as it came (missing).
    Keep,
    /// Replaced by the answer to request `n`.
    Resolve(usize),
}

/// A record's fate.
#[derive(Debug)]
enum Row {
    /// Passed through unchanged.
    Pass,
    /// Its in-place cells, then its appended ones, in plan order.
    Map(Vec<Cell>),
}

/// A batch, its cells gathered and awaiting their answers.
#[derive(Debug)]
pub struct Prepared {
    records: Vec<Record>,
    rows: Vec<Row>,
    /// Each distinct `(namespace slot, value)` once, in first-seen order.
    pub requests: Vec<(usize, String)>,
    counters: Counters,
}

/// Gathers the cells of `records` that need an answer.
pub fn prepare(records: Vec<Record>, plan: &Plan, rules: &Rules) -> Result<Prepared, RowError> {
    let mut requests: Vec<(usize, String)> = Vec::new();
    let mut seen: HashMap<(usize, String), usize> = HashMap::new();
    let mut counters = Counters::default();
    let mut rows = Vec::with_capacity(records.len());
    for record in &records {
        if record.is_blank_line() && plan.fields > 1 {
            counters.blank_lines += 1;
            rows.push(Row::Pass);
            continue;
        }
        if record.broken_quoting || record.fields.len() != plan.fields {
            counters.malformed += 1;
            if counters.malformed_lines.len() < MAX_REPORTED_LINES {
                counters.malformed_lines.push(record.line);
            }
            rows.push(Row::Pass);
            continue;
        }
        let sources = plan
            .in_place
            .iter()
            .map(|&(field, slot)| (field, slot))
            .chain(plan.appended.iter().map(|a| (a.source, a.slot)));
        let mut cells = Vec::with_capacity(plan.in_place.len() + plan.appended.len());
        for (field, slot) in sources {
            let text = record.text(field, rules.encoding).map_err(|e| RowError {
                line: record.line,
                reason: format!("column {field}: {e}"),
            })?;
            if rules.is_missing(&text) {
                counters.missing += 1;
                cells.push(Cell::Keep);
                continue;
            }
            let next = requests.len();
            let n = *seen.entry((slot, text)).or_insert_with_key(|key| {
                requests.push(key.clone());
                next
            });
            cells.push(Cell::Resolve(n));
        }
        rows.push(Row::Map(cells));
    }
    Ok(Prepared {
        records,
        rows,
        requests,
        counters,
    })
}

impl Prepared {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The line the batch's first record starts on.
    pub fn first_line(&self) -> Option<u64> {
        self.records.first().map(|r| r.line)
    }

    /// Line of the first record that asked for request `n` (for errors).
    pub fn line_of_request(&self, n: usize) -> u64 {
        for (record, row) in self.records.iter().zip(&self.rows) {
            if let Row::Map(cells) = row {
                if cells
                    .iter()
                    .any(|c| matches!(c, Cell::Resolve(m) if *m == n))
                {
                    return record.line;
                }
            }
        }
        0
    }

    /// Writes every record with `answers[n]` for request `n` (`None`: no
    /// answer, the cell is kept and counted unknown); answers the batch's
    /// counters. Each record's own end is reported through `row_end` (the
    /// length of `out` after it), where an output part may be cut.
    pub fn write(
        self,
        answers: &[Option<String>],
        plan: &Plan,
        rules: &Rules,
        out: &mut Vec<u8>,
        mut row_end: impl FnMut(&mut Vec<u8>),
    ) -> Result<Counters, RowError> {
        let mut counters = self.counters;
        let e = rules.encoding;
        for (record, row) in self.records.iter().zip(self.rows) {
            let cells = match row {
                Row::Pass => {
                    out.extend_from_slice(&record.bytes);
                    counters.rows += 1;
                    row_end(out);
                    continue;
                }
                Row::Map(cells) => cells,
            };
            let fail = |reason: String| RowError {
                line: record.line,
                reason,
            };
            let mut at = 0;
            for (k, &(field, _)) in plan.in_place.iter().enumerate() {
                let f = record.fields[field];
                out.extend_from_slice(&record.bytes[at..f.start]);
                match cells[k] {
                    Cell::Keep => out.extend_from_slice(record.raw(field)),
                    Cell::Resolve(n) => match &answers[n] {
                        Some(value) => write_field(value, f.quoted, rules.delimiter, e, out)
                            .map_err(|err| fail(format!("column {field}: {err}")))?,
                        None => {
                            counters.unknown += 1;
                            out.extend_from_slice(record.raw(field));
                        }
                    },
                }
                at = f.end;
            }
            out.extend_from_slice(&record.bytes[at..record.body_end]);
            for (k, appended) in plan.appended.iter().enumerate() {
                e.push_ascii(rules.delimiter, out);
                let source = record.fields[appended.source];
                match cells[plan.in_place.len() + k] {
                    Cell::Keep => out.extend_from_slice(record.raw(appended.source)),
                    Cell::Resolve(n) => match &answers[n] {
                        Some(value) => {
                            write_field(value, source.quoted, rules.delimiter, e, out)
                                .map_err(|err| fail(format!("column {}: {err}", appended.source)))?
                        }
                        None => {
                            counters.unknown += 1;
                            out.extend_from_slice(record.raw(appended.source));
                        }
                    },
                }
            }
            out.extend_from_slice(&record.bytes[record.body_end..]);
            counters.rows += 1;
            row_end(out);
        }
        Ok(counters)
    }
}

/// The header record with the appended columns' names.
pub fn write_header(
    header: &Record,
    plan: &Plan,
    rules: &Rules,
    out: &mut Vec<u8>,
) -> Result<(), RowError> {
    out.extend_from_slice(&header.bytes[..header.body_end]);
    for a in &plan.appended {
        rules.encoding.push_ascii(rules.delimiter, out);
        write_field(&a.name, false, rules.delimiter, rules.encoding, out).map_err(|e| {
            RowError {
                line: header.line,
                reason: format!("the new column's name: {e}"),
            }
        })?;
    }
    out.extend_from_slice(&header.bytes[header.body_end..]);
    Ok(())
}

impl Counters {
    /// Adds a later batch's counts.
    pub fn add(&mut self, later: Counters) {
        self.rows += later.rows;
        self.missing += later.missing;
        self.malformed += later.malformed;
        self.unknown += later.unknown;
        self.blank_lines += later.blank_lines;
        let room = MAX_REPORTED_LINES.saturating_sub(self.malformed_lines.len());
        self.malformed_lines
            .extend(later.malformed_lines.into_iter().take(room));
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::{
        csv::{Scanned, Scanner},
        spec::{RawSpec, Spec},
    };

    fn records(input: &[u8], e: Encoding) -> Vec<Record> {
        let mut s = Scanner::new(e, b',', 1 << 20, 1);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Scanned::Record(r) = s.next(&mut buf, true).unwrap() {
            out.push(r);
        }
        out
    }

    fn spec(mappings: &[(&str, &str, Option<&str>)], direction: Direction) -> Spec {
        Spec::parse(RawSpec {
            direction: Some(direction),
            mappings: mappings
                .iter()
                .map(|(s, n, t)| (s.to_string(), n.to_string(), t.map(str::to_owned)))
                .collect(),
            has_header: true,
            ..RawSpec::default()
        })
        .unwrap()
    }

    fn rules(direction: Direction, e: Encoding) -> Rules {
        Rules {
            direction,
            encoding: e,
            delimiter: b',',
            placeholders: vec!["NA".into(), "NULL".into()],
        }
    }

    /// Runs `input` through a job whose answer for a value is `answer(value)`.
    fn run(
        input: &[u8],
        spec: &Spec,
        e: Encoding,
        answer: impl Fn(&str) -> Option<String>,
    ) -> (Vec<u8>, Counters) {
        let mut all = records(input, e);
        let header = all.remove(0);
        let names: Vec<String> = (0..header.fields.len())
            .map(|f| header.text(f, e).unwrap())
            .collect();
        let plan = spec.plan(Some(&names), names.len()).unwrap();
        let rules = rules(spec.direction, e);
        let mut out = Vec::new();
        write_header(&header, &plan, &rules, &mut out).unwrap();
        let prepared = prepare(all, &plan, &rules).unwrap();
        let answers: Vec<Option<String>> =
            prepared.requests.iter().map(|(_, v)| answer(v)).collect();
        let counters = prepared
            .write(&answers, &plan, &rules, &mut out, |_| {})
            .unwrap();
        (out, counters)
    }

    fn pseudo(v: &str) -> Option<String> {
        Some(format!("P({v})"))
    }

    #[test]
    fn mapped_cells_are_replaced_and_everything_else_is_copied_as_it_came() {
        let input = b"id,name,city\r\n1,\"Smith, J\",Berlin\r\n2,NA,\" Bonn \"\r\n3, ,x\r\n";
        let s = spec(
            &[("name", "n", None), ("id", "i", Some("pid"))],
            Direction::Pseudonymize,
        );
        let (out, counters) = run(input, &s, Encoding::Utf8, pseudo);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "id,name,city,pid\r\n1,\"P(Smith, J)\",Berlin,P(1)\r\n2,NA,\" Bonn \",P(2)\r\n3, ,x,P(3)\r\n"
        );
        assert_eq!(counters.rows, 3);
        assert_eq!(counters.missing, 2);
    }

    #[test]
    fn malformed_records_and_blank_lines_pass_through_counted_by_line() {
        let input = b"a,b\n1,2\n1,2,3\n\nx\"y,4\n5,6";
        let s = spec(&[("a", "n", None)], Direction::Pseudonymize);
        let (out, counters) = run(input, &s, Encoding::Utf8, pseudo);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a,b\nP(1),2\n1,2,3\n\nx\"y,4\nP(5),6"
        );
        assert_eq!(counters.malformed, 2);
        assert_eq!(counters.malformed_lines, [3, 5]);
        assert_eq!(counters.blank_lines, 1);
        assert_eq!(counters.rows, 5);
    }

    #[test]
    fn each_distinct_value_is_asked_once() {
        let input = b"a,b\nx,x\nx,y\n";
        let s = spec(
            &[("a", "n", None), ("b", "n", None)],
            Direction::Pseudonymize,
        );
        let rules = rules(Direction::Pseudonymize, Encoding::Utf8);
        let mut all = records(input, Encoding::Utf8);
        all.remove(0);
        let names = vec!["a".to_owned(), "b".to_owned()];
        let plan = s.plan(Some(&names), 2).unwrap();
        let prepared = prepare(all, &plan, &rules).unwrap();
        assert_eq!(
            prepared.requests,
            [(0, "x".to_owned()), (0, "y".to_owned())]
        );
    }

    #[test]
    fn de_pseudonymizing_keeps_unknown_values_and_restores_quoting() {
        let input = b"id,name\n1,\"P(Smith, J)\"\n2,unknown\n";
        let s = spec(&[("name", "n", None)], Direction::Depseudonymize);
        let (out, counters) = run(input, &s, Encoding::Utf8, |v| {
            v.strip_prefix("P(")
                .and_then(|v| v.strip_suffix(')'))
                .map(str::to_owned)
        });
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "id,name\n1,\"Smith, J\"\n2,unknown\n"
        );
        assert_eq!(counters.unknown, 1);
    }

    #[test]
    fn a_value_the_encoding_cannot_hold_fails_naming_the_line() {
        let input = b"id\n1\n";
        let s = spec(&[("id", "n", None)], Direction::Depseudonymize);
        let mut all = records(input, Encoding::Latin1);
        all.remove(0);
        let plan = s.plan(Some(&["id".to_owned()]), 1).unwrap();
        let rules = rules(Direction::Depseudonymize, Encoding::Latin1);
        let prepared = prepare(all, &plan, &rules).unwrap();
        let err = prepared
            .write(&[Some("€".into())], &plan, &rules, &mut Vec::new(), |_| {})
            .unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.reason.contains("iso-8859-1"));
    }

    #[test]
    fn utf16_output_stays_utf16() {
        let e = Encoding::Utf16Le;
        let mut input = Vec::new();
        e.encode_into("id,name\r\n1,Zoë\r\n", &mut input).unwrap();
        let s = spec(&[("name", "n", None)], Direction::Pseudonymize);
        let (out, _) = run(&input, &s, e, pseudo);
        assert_eq!(e.decode(&out).unwrap(), "id,name\r\n1,P(Zoë)\r\n");
    }
}
