//! Checkers: pure functions from history (and verification observations) to
//! verdicts. Each returns valid, invalid or unknown with its evidence.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{
    history::{Entry, Row, Status},
    redact,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Invalid,
    /// Could not be decided (e.g. verification calls kept failing): never a pass.
    Unknown,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Verdict {
    pub property: String,
    pub validity: Validity,
    pub summary: String,
    /// Violating pairs, redacted: never a full original.
    pub evidence: Vec<String>,
}

impl Verdict {
    fn new(property: &'static str, violations: Vec<String>, unknown: usize, what: &str) -> Self {
        let validity = if !violations.is_empty() {
            Validity::Invalid
        } else if unknown > 0 {
            Validity::Unknown
        } else {
            Validity::Valid
        };
        let summary = format!("{} {what}, {unknown} undecided", violations.len());
        let mut evidence = violations;
        evidence.truncate(100);
        Self {
            property: property.into(),
            validity,
            summary,
            evidence,
        }
    }
}

/// P1 figures over a range of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Availability {
    pub offered: u64,
    pub ok: u64,
    pub failed: u64,
    pub shed: u64,
    /// Longest run of consecutive seconds with offered > 0 and ok = 0.
    pub longest_outage_seconds: u64,
    /// (failed + shed) / rate.
    pub unavailable_seconds: f64,
}

pub fn availability(rows: &[Row], rate_per_second: u32) -> Availability {
    let (mut run, mut longest) = (0u64, 0u64);
    let mut a = Availability {
        offered: 0,
        ok: 0,
        failed: 0,
        shed: 0,
        longest_outage_seconds: 0,
        unavailable_seconds: 0.0,
    };
    for r in rows {
        a.offered += r.offered;
        a.ok += r.ok;
        a.failed += r.failed;
        a.shed += r.shed;
        if r.offered > 0 && r.ok == 0 {
            run += 1;
            longest = longest.max(run);
        } else if r.offered > 0 {
            run = 0;
        }
    }
    a.longest_outage_seconds = longest;
    a.unavailable_seconds = (a.failed + a.shed) as f64 / f64::from(rate_per_second.max(1));
    a
}

/// P1 against its two budgets.
pub fn p1(a: &Availability, max_outage_seconds: u64, max_unavailable_seconds: f64) -> Vec<Verdict> {
    let outage_ok = a.longest_outage_seconds <= max_outage_seconds;
    let unavailable_ok = a.unavailable_seconds <= max_unavailable_seconds;
    vec![
        Verdict {
            property: "P1-longest-outage".into(),
            validity: if outage_ok {
                Validity::Valid
            } else {
                Validity::Invalid
            },
            summary: format!(
                "longest outage {} s, budget {} s",
                a.longest_outage_seconds, max_outage_seconds
            ),
            evidence: Vec::new(),
        },
        Verdict {
            property: "P1-unavailable-seconds".into(),
            validity: if unavailable_ok {
                Validity::Valid
            } else {
                Validity::Invalid
            },
            summary: format!(
                "unavailable {:.2} s, budget {:.2} s",
                a.unavailable_seconds, max_unavailable_seconds
            ),
            evidence: Vec::new(),
        },
    ]
}

/// A verification answer for one ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Answer {
    /// The call succeeded with this value (a pseudonym, or an original).
    Value(String),
    NotFound,
    /// Verification could not complete (code after its retries).
    Error(String),
}

/// What verification observed for one ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Observation {
    /// Re-Create of the original.
    pub recreated: Answer,
    /// Get of the pseudonym the entry holds (ok) or that the re-Create returned
    /// (indeterminate); `None` when there was nothing to look up.
    pub reverse: Option<Answer>,
}

fn pair(original: &str, pseudonym: &str) -> String {
    let short: String = pseudonym.chars().take(8).collect();
    format!("original {} -> pseudonym {short}…", redact(original))
}

/// P2, P3 and P4 over the ledger and one observation per entry (same order).
pub fn properties(ledger: &[Entry], observations: &[Observation]) -> Vec<Verdict> {
    let (mut p2, mut p3, mut p4) = (Vec::new(), Vec::new(), Vec::new());
    let (mut u2, mut u3, mut u4) = (0, 0, 0);
    // Every pseudonym seen anywhere, with the originals it was seen for.
    let mut owners: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (e, o) in ledger.iter().zip(observations) {
        match e.status {
            Status::Ok => {
                let Some(acked) = e.pseudonym.as_deref() else {
                    continue;
                };
                owners.entry(acked).or_default().insert(&e.original);
                match &o.recreated {
                    Answer::Value(p) if p == acked => {}
                    Answer::Value(p) => {
                        owners.entry(p).or_default().insert(&e.original);
                        p2.push(format!(
                            "{} re-created as {}…",
                            pair(&e.original, acked),
                            p.chars().take(8).collect::<String>()
                        ));
                    }
                    Answer::NotFound => p2.push(format!(
                        "{} re-create answered NOT_FOUND",
                        pair(&e.original, acked)
                    )),
                    Answer::Error(_) => u2 += 1,
                }
                match &o.reverse {
                    Some(Answer::Value(orig)) if orig == &e.original => {}
                    Some(Answer::Value(orig)) => p3.push(format!(
                        "{} resolves to {}",
                        pair(&e.original, acked),
                        redact(orig)
                    )),
                    Some(Answer::NotFound) => p3.push(format!(
                        "{} does not resolve (lost write)",
                        pair(&e.original, acked)
                    )),
                    Some(Answer::Error(_)) | None => u3 += 1,
                }
            }
            Status::Indeterminate => match &o.recreated {
                Answer::Value(p) => {
                    owners.entry(p).or_default().insert(&e.original);
                    match &o.reverse {
                        Some(Answer::Value(orig)) if orig == &e.original => {}
                        Some(Answer::Value(orig)) => p4.push(format!(
                            "{} but the pseudonym resolves to {}",
                            pair(&e.original, p),
                            redact(orig)
                        )),
                        Some(Answer::NotFound) => p4.push(format!(
                            "{} but the pseudonym does not resolve",
                            pair(&e.original, p)
                        )),
                        Some(Answer::Error(_)) | None => u4 += 1,
                    }
                }
                Answer::NotFound => p4.push(format!(
                    "indeterminate original {} cannot be resolved",
                    redact(&e.original)
                )),
                Answer::Error(_) => u4 += 1,
            },
        }
    }
    for (pseudonym, originals) in &owners {
        if originals.len() > 1 {
            let list: Vec<String> = originals.iter().map(|o| redact(o)).collect();
            p4.push(format!(
                "pseudonym {}… belongs to {} originals: {}",
                pseudonym.chars().take(8).collect::<String>(),
                originals.len(),
                list.join(", ")
            ));
        }
    }
    vec![
        Verdict::new(
            "P2-pseudonym-stability",
            p2,
            u2,
            "acknowledged pairs re-created differently",
        ),
        Verdict::new(
            "P3-reverse-lookup",
            p3,
            u3,
            "acknowledged pseudonyms not resolving to their original",
        ),
        Verdict::new(
            "P4-one-subject-one-pseudonym",
            p4,
            u4,
            "subjects with other than exactly one pseudonym",
        ),
    ]
}

/// Guards against a vacuous pass.
pub fn guards(a: &Availability, ledger_len: usize) -> Vec<Verdict> {
    let mk = |property: &str, ok: bool, summary: String| Verdict {
        property: property.into(),
        validity: if ok {
            Validity::Valid
        } else {
            Validity::Invalid
        },
        summary,
        evidence: Vec::new(),
    };
    vec![
        mk(
            "guard-served-traffic",
            a.ok > 0,
            format!("{} calls succeeded", a.ok),
        ),
        mk(
            "guard-ledger-non-empty",
            ledger_len > 0,
            format!("{ledger_len} ledger entries"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(second: u64, offered: u64, ok: u64) -> Row {
        Row {
            second,
            offered,
            ok,
            failed: offered - ok,
            shed: 0,
            mean_ms: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            max_ms: 0.0,
        }
    }

    fn ok_entry(original: &str, pseudonym: &str) -> Entry {
        Entry {
            slot: 0,
            second: 0,
            status: Status::Ok,
            original: original.into(),
            pseudonym: Some(pseudonym.into()),
            code: None,
        }
    }

    fn obs(recreated: Answer, reverse: Option<Answer>) -> Observation {
        Observation { recreated, reverse }
    }

    #[test]
    fn longest_outage_counts_consecutive_dead_seconds() {
        let rows = [
            row(0, 10, 10),
            row(1, 10, 0),
            row(2, 10, 0),
            row(3, 10, 5),
            row(4, 10, 0),
            row(5, 0, 0),
            row(6, 10, 0),
        ];
        let a = availability(&rows, 10);
        assert_eq!(
            a.longest_outage_seconds, 2,
            "a second with nothing offered neither extends nor breaks a run"
        );
        assert!((a.unavailable_seconds - 4.5).abs() < 1e-9);
        let v = p1(&a, 1, 100.0);
        assert_eq!(v[0].validity, Validity::Invalid);
        assert_eq!(p1(&a, 2, 4.5)[1].validity, Validity::Valid);
        assert_eq!(p1(&a, 2, 4.4)[1].validity, Validity::Invalid);
    }

    #[test]
    fn a_changed_or_lost_pseudonym_violates_p2_and_p3() {
        let ledger = [
            ok_entry("o1", "p1"),
            ok_entry("o2", "p2"),
            ok_entry("o3", "p3"),
        ];
        let observations = [
            obs(Answer::Value("p1".into()), Some(Answer::Value("o1".into()))),
            obs(Answer::Value("pX".into()), Some(Answer::NotFound)),
            obs(
                Answer::Error("Unavailable".into()),
                Some(Answer::Value("o3".into())),
            ),
        ];
        let v = properties(&ledger, &observations);
        assert_eq!(v[0].validity, Validity::Invalid);
        assert_eq!(v[0].evidence.len(), 1);
        assert!(v[0].evidence[0].contains("sha256:"), "evidence is redacted");
        assert!(!v[0].evidence[0].contains("o2"));
        assert_eq!(v[1].validity, Validity::Invalid);
        assert_eq!(v[2].validity, Validity::Valid);
    }

    #[test]
    fn undecided_verification_is_unknown_not_valid() {
        let v = properties(
            &[ok_entry("o1", "p1")],
            &[obs(
                Answer::Error("Unavailable".into()),
                Some(Answer::Error("x".into())),
            )],
        );
        assert_eq!(v[0].validity, Validity::Unknown);
        assert_eq!(v[1].validity, Validity::Unknown);
    }

    #[test]
    fn a_pseudonym_shared_by_two_originals_violates_p4() {
        let ind = Entry {
            slot: 1,
            second: 0,
            status: Status::Indeterminate,
            original: "o2".into(),
            pseudonym: None,
            code: Some("DeadlineExceeded".into()),
        };
        let ledger = [ok_entry("o1", "p1"), ind];
        let observations = [
            obs(Answer::Value("p1".into()), Some(Answer::Value("o1".into()))),
            obs(Answer::Value("p1".into()), Some(Answer::Value("o1".into()))),
        ];
        let v = properties(&ledger, &observations);
        assert_eq!(v[2].validity, Validity::Invalid, "{:?}", v[2]);
        assert!(v[2]
            .evidence
            .iter()
            .any(|e| e.contains("belongs to 2 originals")));
    }

    #[test]
    fn an_empty_run_fails_its_guards() {
        let a = availability(&[row(0, 10, 0)], 10);
        assert!(guards(&a, 0)
            .iter()
            .all(|g| g.validity == Validity::Invalid));
    }
}
