//! P7 — CSV jobs: every accepted job finished; its output has exactly one row
//! per input row, in order, with every field but the pseudonymized one as it
//! came (quoting and line endings included); each original has one pseudonym,
//! the one the API answers for it; de-pseudonymizing the output restores the
//! input byte for byte; and no takeover resumed behind the job's last
//! checkpoint (so none redid more than one checkpoint interval of rows).
//!
//! The checker reads the files itself, with its own small RFC 4180 reader:
//! it shares no code with the service it judges.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Answer, Property, Validity, Verdict};

/// A progress sample polled while the job ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub at_micros: i64,
    pub epoch: i64,
    /// Rows the job reported done (its last checkpoint).
    pub rows: i64,
    pub runner: String,
}

/// A takeover as the job records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    pub at_micros: i64,
    pub epoch: i64,
    pub runner: String,
    pub checkpointed_rows: i64,
    pub resumed_rows: i64,
}

/// One job the run submitted, and what verification found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobObservation {
    pub id: String,
    /// Which job of the run (its input is regenerated from the seed and this).
    pub index: u32,
    /// The pseudonymized column (in place); the input has a header row.
    pub column: usize,
    /// The job's final state (`completed`, `failed`, …; empty: never learnt).
    pub state: String,
    pub error: String,
    pub samples: Vec<Sample>,
    pub takeovers: Vec<Takeover>,
    /// Why something could not be decided (a download that kept failing).
    pub undecided: Vec<String>,
    /// Why de-pseudonymizing the output did not finish, if it did not.
    pub restore_failed: Option<String>,
    #[serde(skip)]
    pub input: Vec<u8>,
    #[serde(skip)]
    pub output: Option<Vec<u8>>,
    #[serde(skip)]
    pub restored: Option<Vec<u8>>,
    /// Creates through the API of some of the job's originals.
    #[serde(skip)]
    pub api: Vec<(String, Answer)>,
}

/// Cells passed through as they are (blank, or upstream's placeholders).
fn passes_through(original: &[u8]) -> bool {
    let t = String::from_utf8_lossy(original);
    let t = t.trim();
    t.is_empty() || t.eq_ignore_ascii_case("NA") || t.eq_ignore_ascii_case("NULL")
}

/// One record: its fields as written (quotes included) and its terminator.
#[derive(Debug, PartialEq, Eq)]
struct Record<'a> {
    fields: Vec<&'a [u8]>,
    end: &'a [u8],
}

/// The records of a comma-separated file, RFC 4180: a quoted field may hold
/// commas, doubled quotes and line breaks.
fn records(data: &[u8]) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    let (mut start, mut field_start, mut quoted) = (0, 0, false);
    let mut fields = Vec::new();
    let mut i = 0;
    while i < data.len() {
        match data[i] {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                fields.push(&data[field_start..i]);
                field_start = i + 1;
            }
            b'\n' if !quoted => {
                let cr = i > field_start && data[i - 1] == b'\r';
                let field_end = if cr { i - 1 } else { i };
                fields.push(&data[field_start..field_end]);
                out.push(Record {
                    fields: std::mem::take(&mut fields),
                    end: &data[field_end..=i],
                });
                start = i + 1;
                field_start = start;
            }
            _ => {}
        }
        i += 1;
    }
    if start < data.len() {
        fields.push(&data[field_start..]);
        out.push(Record { fields, end: &[] });
    }
    out
}

/// A field's value: without its quotes, doubled quotes made single.
fn value(field: &[u8]) -> Vec<u8> {
    if field.len() >= 2 && field[0] == b'"' && field[field.len() - 1] == b'"' {
        let inner = &field[1..field.len() - 1];
        let mut v = Vec::with_capacity(inner.len());
        let mut i = 0;
        while i < inner.len() {
            v.push(inner[i]);
            i += if inner[i] == b'"' && inner.get(i + 1) == Some(&b'"') {
                2
            } else {
                1
            };
        }
        v
    } else {
        field.to_vec()
    }
}

/// Each original of a job's pseudonymized column with the pseudonym its
/// output row holds (cells passed through left out), for P10's order.
pub fn pairs(job: &JobObservation) -> Vec<(String, String)> {
    let Some(output) = &job.output else {
        return Vec::new();
    };
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    records(&job.input)
        .iter()
        .zip(records(output).iter())
        .skip(1)
        .filter_map(|(i, o)| {
            let original = value(i.fields.get(job.column)?);
            if passes_through(&original) {
                return None;
            }
            Some((text(original), text(value(o.fields.get(job.column)?))))
        })
        .collect()
}

/// The 1-based line where two files first differ.
fn first_different_line(a: &[u8], b: &[u8]) -> usize {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    a[..at].iter().filter(|&&c| c == b'\n').count() + 1
}

/// P7 over every job of the run.
pub fn check(jobs: &[JobObservation]) -> Verdict {
    if jobs.is_empty() {
        return Verdict {
            property: Property::Jobs,
            validity: Validity::Unknown,
            summary: "no job was accepted: nothing to judge".into(),
            evidence: Vec::new(),
        };
    }
    let mut violations = Vec::new();
    let mut undecided = 0;
    // One original, one pseudonym: across every job of the run.
    let mut pseudonyms: HashMap<Vec<u8>, (Vec<u8>, String)> = HashMap::new();
    let mut rows_checked = 0usize;
    for job in jobs {
        let id = &job.id;
        undecided += job.undecided.len();
        violations.extend(resumed_behind(job));
        if job.state != "completed" {
            violations.push(format!(
                "job {id} ended {}: {}",
                if job.state.is_empty() {
                    "unknown"
                } else {
                    &job.state
                },
                job.error
            ));
            continue;
        }
        let Some(output) = &job.output else {
            continue;
        };
        let input = records(&job.input);
        let written = records(output);
        if input.len() != written.len() {
            violations.push(format!(
                "job {id}: {} output rows for {} input rows (first difference at line {})",
                written.len(),
                input.len(),
                first_different_line(&job.input, output)
            ));
            continue;
        }
        for (n, (i, o)) in input.iter().zip(&written).enumerate().skip(1) {
            let row = n + 1;
            if i.fields.len() != o.fields.len() || i.end != o.end {
                violations.push(format!(
                    "job {id} row {row}: its shape changed ({} fields → {})",
                    i.fields.len(),
                    o.fields.len()
                ));
                continue;
            }
            if let Some(f) =
                (0..i.fields.len()).find(|&f| f != job.column && i.fields[f] != o.fields[f])
            {
                violations.push(format!("job {id} row {row}: field {f} changed"));
                continue;
            }
            let (Some(original), Some(cell)) = (i.fields.get(job.column), o.fields.get(job.column))
            else {
                continue;
            };
            let (original, pseudonym) = (value(original), value(cell));
            rows_checked += 1;
            if passes_through(&original) {
                if original != pseudonym {
                    violations.push(format!(
                        "job {id} row {row}: a blank or placeholder cell was rewritten"
                    ));
                }
                continue;
            }
            match pseudonyms.get(&original) {
                Some((p, seen)) if *p != pseudonym => violations.push(format!(
                    "job {id} row {row}: original {} has pseudonym {}… here and {}… in {seen}",
                    crate::redact(&String::from_utf8_lossy(&original)),
                    super::short(&String::from_utf8_lossy(&pseudonym)),
                    super::short(&String::from_utf8_lossy(p)),
                )),
                Some(_) => {}
                None => {
                    pseudonyms.insert(original, (pseudonym, format!("job {id} row {row}")));
                }
            }
        }
        match (&job.restored, &job.restore_failed) {
            (Some(restored), _) if *restored != job.input => violations.push(format!(
                "job {id}: de-pseudonymizing its output does not restore the input (line {} differs)",
                first_different_line(&job.input, restored)
            )),
            (None, Some(why)) => {
                violations.push(format!("job {id}: de-pseudonymizing its output failed: {why}"))
            }
            _ => {}
        }
    }
    for job in jobs {
        for (original, answer) in &job.api {
            let Some((csv, at)) = pseudonyms.get(original.as_bytes()) else {
                continue;
            };
            match answer {
                Answer::Value(p) if p.as_bytes() == csv.as_slice() => {}
                Answer::Value(p) => violations.push(format!(
                    "{}: the API answers {}…, the CSV ({at}) has {}…",
                    super::pair(original, p),
                    super::short(p),
                    super::short(&String::from_utf8_lossy(csv)),
                )),
                Answer::NotFound => violations.push(format!(
                    "original {}: the API has no pseudonym, the CSV ({at}) has one",
                    crate::redact(original)
                )),
                Answer::Error(_) => undecided += 1,
            }
        }
    }
    let mut v = Verdict::from_violations(Property::Jobs, violations, undecided, "job violations");
    v.summary = format!(
        "{}; {} jobs, {rows_checked} rows checked",
        v.summary,
        jobs.len()
    );
    v
}

/// Takeovers that resumed behind the job's last checkpoint: behind what the
/// job recorded, or behind the progress it had already shown.
fn resumed_behind(job: &JobObservation) -> Vec<String> {
    let mut out = Vec::new();
    for t in &job.takeovers {
        let shown = job
            .samples
            .iter()
            .filter(|s| s.epoch < t.epoch && s.at_micros <= t.at_micros)
            .map(|s| s.rows)
            .max()
            .unwrap_or(0);
        let behind = t.checkpointed_rows.max(shown);
        if t.resumed_rows < behind {
            out.push(format!(
                "job {}: the takeover by {} (epoch {}) resumed at row {} though {} rows were checkpointed",
                job.id, t.runner, t.epoch, t.resumed_rows, behind
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUT: &[u8] = b"row,name,note\r\n1,alice,plain\r\n2,\"bob\",\"a, \"\"quoted\"\"\nnote\"\n3,NA,x\n4,alice,\n";

    fn completed() -> JobObservation {
        JobObservation {
            id: "j1".into(),
            column: 1,
            state: "completed".into(),
            input: INPUT.to_vec(),
            output: Some(
                b"row,name,note\r\n1,P-ALICE,plain\r\n2,\"P-BOB\",\"a, \"\"quoted\"\"\nnote\"\n3,NA,x\n4,P-ALICE,\n"
                    .to_vec(),
            ),
            restored: Some(INPUT.to_vec()),
            api: vec![("alice".into(), Answer::Value("P-ALICE".into()))],
            samples: vec![Sample {
                at_micros: 10,
                epoch: 1,
                rows: 2,
                runner: "a".into(),
            }],
            takeovers: vec![Takeover {
                at_micros: 20,
                epoch: 2,
                runner: "b".into(),
                checkpointed_rows: 2,
                resumed_rows: 2,
            }],
            ..Default::default()
        }
    }

    fn fails(job: JobObservation, needle: &str) {
        let v = check(&[job]);
        assert_eq!(v.validity, Validity::Invalid, "{v:#?}");
        assert!(
            v.evidence.iter().any(|e| e.contains(needle)),
            "{needle:?} not in {:#?}",
            v.evidence
        );
    }

    #[test]
    fn the_reader_keeps_quoted_commas_newlines_and_line_endings() {
        let r = records(INPUT);
        assert_eq!(r.len(), 5);
        assert_eq!(r[0].end, b"\r\n");
        assert_eq!(r[2].fields.len(), 3);
        assert_eq!(value(r[2].fields[2]), b"a, \"quoted\"\nnote");
        assert_eq!(r[4].fields, vec![&b"4"[..], b"alice", b""]);
    }

    #[test]
    fn a_job_as_promised_passes() {
        let v = check(&[completed()]);
        assert!(v.passed(), "{v:#?}");
        assert!(v.summary.contains("4 rows checked"), "{}", v.summary);
    }

    #[test]
    fn a_missing_row_fails() {
        let mut j = completed();
        j.output = Some(b"row,name,note\r\n1,P-ALICE,plain\r\n3,NA,x\n4,P-ALICE,\n".to_vec());
        fails(j, "4 output rows for 5 input rows");
    }

    #[test]
    fn a_swapped_pseudonym_fails() {
        let mut j = completed();
        j.api = vec![("alice".into(), Answer::Value("P-BOB".into()))];
        fails(j, "the API answers");
        let mut j = completed();
        j.output = Some(
            b"row,name,note\r\n1,P-ALICE,plain\r\n2,\"P-BOB\",\"a, \"\"quoted\"\"\nnote\"\n3,NA,x\n4,P-BOB,\n"
                .to_vec(),
        );
        fails(j, "has pseudonym");
    }

    #[test]
    fn a_changed_field_or_line_ending_fails() {
        let mut j = completed();
        j.output = Some(
            b"row,name,note\r\n1,P-ALICE,plain\n2,\"P-BOB\",\"a, \"\"quoted\"\"\nnote\"\n3,NA,x\n4,P-ALICE,\n"
                .to_vec(),
        );
        fails(j, "row 2: its shape changed");
        let mut j = completed();
        j.output = Some(
            b"row,name,note\r\n1,P-ALICE,plain\r\n2,\"P-BOB\",a quoted note\n3,NA,x\n4,P-ALICE,\n"
                .to_vec(),
        );
        fails(j, "field 2 changed");
    }

    #[test]
    fn an_output_that_does_not_round_trip_fails() {
        let mut j = completed();
        let mut restored = INPUT.to_vec();
        let n = restored.len();
        restored[n - 3] = b'X';
        j.restored = Some(restored);
        fails(j, "does not restore the input (line 6 differs)");
        let mut j = completed();
        j.restored = None;
        j.restore_failed = Some("Failed: the namespace was deleted".into());
        fails(j, "de-pseudonymizing its output failed");
    }

    #[test]
    fn a_restart_from_zero_fails() {
        let mut j = completed();
        j.takeovers[0].resumed_rows = 0;
        fails(j, "resumed at row 0 though 2 rows were checkpointed");
        // The job's own note may claim nothing was checkpointed: the progress
        // it showed before still counts.
        let mut j = completed();
        j.takeovers[0].resumed_rows = 0;
        j.takeovers[0].checkpointed_rows = 0;
        fails(j, "resumed at row 0 though 2 rows were checkpointed");
    }

    #[test]
    fn a_job_that_did_not_finish_fails_and_none_at_all_is_unknown() {
        let mut j = completed();
        j.state = "failed".into();
        j.error = "lost".into();
        fails(j, "job j1 ended failed: lost");
        assert_eq!(check(&[]).validity, Validity::Unknown);
    }

    #[test]
    fn an_api_answer_that_kept_failing_is_undecided_not_a_pass() {
        let mut j = completed();
        j.api = vec![("alice".into(), Answer::Error("Unavailable".into()))];
        assert_eq!(check(&[j]).validity, Validity::Unknown);
    }
}
