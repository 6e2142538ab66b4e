//! Transaction Bundles, all or nothing, from their answers and what
//! verification found of their fresh originals (part of the `bundles`
//! verdict):
//!
//! - acknowledged: every fresh original is stored with the pseudonym the
//!   transaction answered (its answers then obey P2–P4 like single calls,
//!   `erasable-subjects`);
//! - refused: none of its fresh originals is stored;
//! - unknown (a 5xx or a lost answer): all of them or none;
//! - one with an entry meant to fail it: none, whatever its answer.
//!
//! An original erased since (its subject was sampled for an erasure) or
//! answered by another call is not the transaction's to judge: it is left
//! out.

use std::collections::HashSet;

use super::short;
use crate::{
    history::erasures::{ErasureHistory, Meaning, Transaction},
    history::verified::{Observed, Seen},
    redact,
};

/// What was found of one transaction's fresh originals that it may judge.
#[derive(Debug, Default, PartialEq, Eq)]
struct Found {
    stored: usize,
    absent: usize,
    undecided: usize,
    /// Stored with another pseudonym than the one answered.
    otherwise: Vec<String>,
}

fn found(t: &Transaction, seen: &[Seen], skip: &dyn Fn(&str) -> bool) -> Found {
    let mut f = Found::default();
    for (n, s) in t.new.iter().zip(seen) {
        if skip(&n.original) {
            continue;
        }
        match s {
            Seen::Value(p) => {
                f.stored += 1;
                if let Some(answered) = n.pseudonym.as_ref().filter(|a| *a != p) {
                    f.otherwise.push(format!(
                        "{} is stored as {}…, the transaction answered {}…",
                        redact(&n.original),
                        short(p),
                        short(answered)
                    ));
                }
            }
            Seen::NotFound => f.absent += 1,
            Seen::Error(_) => f.undecided += 1,
        }
    }
    f
}

/// Violations, undecided transactions, and a note for the summary.
pub fn judge(h: &ErasureHistory, seen: Option<&Observed>) -> (Vec<String>, usize, String) {
    let mut violations: Vec<String> = h
        .transactions
        .iter()
        .flat_map(|t| {
            t.wrong
                .iter()
                .map(move |w| format!("t={}s a transaction of {}: {w}", t.second, t.entries))
        })
        .collect();
    let mut undecided = 0;
    let erased: HashSet<&str> = h
        .erasures
        .iter()
        .filter(|e| e.meaning != Meaning::Refused)
        .map(|e| e.original.as_str())
        .collect();
    let answered: HashSet<&str> = h.answers.iter().map(|a| a.original.as_str()).collect();
    let mut verified = 0;
    match seen {
        None => undecided += h.transactions.len(),
        Some(seen) => {
            for ts in &seen.transactions {
                let Some(t) = h.transactions.get(ts.index) else {
                    violations.push(format!(
                        "verification names transaction {} of {}",
                        ts.index,
                        h.transactions.len()
                    ));
                    continue;
                };
                verified += 1;
                // An acknowledged transaction's own answers are in `answers`
                // too: only erasures take its originals out of its judgement.
                let skip = |o: &str| {
                    erased.contains(o)
                        || (t.meaning != Meaning::Acknowledged && answered.contains(o))
                };
                let f = found(t, &ts.new, &skip);
                let what = format!(
                    "t={}s a transaction of {} ({:?}, answered {})",
                    t.second, t.entries, t.meaning, t.answer
                );
                if f.undecided > 0 {
                    undecided += 1;
                }
                violations.extend(f.otherwise.iter().map(|o| format!("{what}: {o}")));
                let applied = match (t.meaning, t.meant_to_fail) {
                    (_, Some(failing)) if f.stored > 0 => Some(format!(
                        "{} of its fresh originals are stored although its entry {} ({:?}) fails it",
                        f.stored, failing.index, failing.how
                    )),
                    (Meaning::Acknowledged, _) if f.absent > 0 => Some(format!(
                        "{} of its {} fresh originals are not stored (acknowledged)",
                        f.absent,
                        f.stored + f.absent
                    )),
                    (Meaning::Refused, _) if f.stored > 0 => Some(format!(
                        "{} of its fresh originals are stored although it was refused",
                        f.stored
                    )),
                    (Meaning::Unknown, _) if f.stored > 0 && f.absent > 0 => Some(format!(
                        "half applied: {} of its fresh originals stored, {} not",
                        f.stored, f.absent
                    )),
                    _ => None,
                };
                violations.extend(applied.map(|a| format!("{what}: {a}")));
            }
        }
    }
    let count = |m: Meaning| h.transactions.iter().filter(|t| t.meaning == m).count();
    let failing = h
        .transactions
        .iter()
        .filter(|t| t.meant_to_fail.is_some())
        .count();
    let new: usize = h.transactions.iter().map(|t| t.new.len()).sum();
    let note = format!(
        "{} transaction Bundles ({} acknowledged, {} refused, {} unknown; {failing} with an entry meant to fail; {new} fresh originals), {verified} verified all or nothing",
        h.transactions.len(),
        count(Meaning::Acknowledged),
        count(Meaning::Refused),
        count(Meaning::Unknown),
    );
    (violations, undecided, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{erasure::bundles, Validity},
        history::erasures::{
            Answered, Erasure, ErasureKind, Failing, FailingEntry, NewEntry, Path,
        },
        history::verified::TransactionSeen,
    };

    fn transaction(meaning: Meaning, meant_to_fail: Option<FailingEntry>) -> Transaction {
        let acknowledged = meaning == Meaning::Acknowledged;
        Transaction {
            second: 5,
            sent_micros: 5_000_000,
            entries: 4,
            meant_to_fail,
            meaning,
            answer: match meaning {
                Meaning::Acknowledged => "200".into(),
                Meaning::Refused => "404".into(),
                Meaning::Unknown => "timeout".into(),
            },
            new: (1..=3)
                .map(|i| NewEntry {
                    original: format!("t{i}"),
                    pseudonym: acknowledged.then(|| format!("q{i}")),
                })
                .collect(),
            wrong: Vec::new(),
        }
    }

    fn history(t: Transaction) -> ErasureHistory {
        let answers = t
            .new
            .iter()
            .filter_map(|n| {
                Some(Answered {
                    second: 5,
                    sent_micros: 5_000_000,
                    path: Path::TransactionEntry,
                    original: n.original.clone(),
                    pseudonym: n.pseudonym.clone()?,
                })
            })
            .collect();
        ErasureHistory {
            namespace: "ns-erasable".into(),
            answers,
            transactions: vec![t],
            ..ErasureHistory::default()
        }
    }

    fn seen(new: Vec<Seen>) -> Observed {
        Observed {
            transactions: vec![TransactionSeen { index: 0, new }],
            ..Observed::default()
        }
    }

    fn all_stored() -> Vec<Seen> {
        (1..=3).map(|i| Seen::Value(format!("q{i}"))).collect()
    }

    fn none_stored() -> Vec<Seen> {
        vec![Seen::NotFound; 3]
    }

    fn half_applied() -> Vec<Seen> {
        vec![Seen::Value("q1".into()), Seen::NotFound, Seen::NotFound]
    }

    fn validity(h: &ErasureHistory, s: Vec<Seen>) -> (Validity, Vec<String>) {
        let v = bundles(h, Some(&seen(s)));
        (v.validity, v.evidence)
    }

    const FAILING: FailingEntry = FailingEntry {
        index: 3,
        how: Failing::UnknownNamespace,
    };

    #[test]
    fn an_acknowledged_transaction_stored_whole_passes_and_half_applied_fails() {
        let h = history(transaction(Meaning::Acknowledged, None));
        assert_eq!(validity(&h, all_stored()).0, Validity::Valid);
        let (v, evidence) = validity(&h, half_applied());
        assert_eq!(v, Validity::Invalid);
        assert!(evidence[0].contains("2 of its 3 fresh originals are not stored"));
    }

    #[test]
    fn an_acknowledged_transaction_stored_with_other_pseudonyms_fails() {
        let h = history(transaction(Meaning::Acknowledged, None));
        let mut s = all_stored();
        s[1] = Seen::Value("q9".into());
        let (v, evidence) = validity(&h, s);
        assert_eq!(v, Validity::Invalid);
        assert!(
            evidence[0].contains("the transaction answered"),
            "{evidence:?}"
        );
    }

    #[test]
    fn a_refused_transaction_with_any_original_stored_fails() {
        let h = history(transaction(Meaning::Refused, Some(FAILING)));
        assert_eq!(validity(&h, none_stored()).0, Validity::Valid);
        let (v, evidence) = validity(&h, half_applied());
        assert_eq!(v, Validity::Invalid);
        assert!(evidence[0].contains("fails it"), "{evidence:?}");
        // A well-formed one refused (an innocent failure, judged by P5) too.
        let h = history(transaction(Meaning::Refused, None));
        let (v, evidence) = validity(&h, half_applied());
        assert_eq!(v, Validity::Invalid);
        assert!(
            evidence[0].contains("although it was refused"),
            "{evidence:?}"
        );
    }

    #[test]
    fn an_unknown_transaction_is_all_or_none() {
        let h = history(transaction(Meaning::Unknown, None));
        assert_eq!(validity(&h, all_stored()).0, Validity::Valid);
        assert_eq!(validity(&h, none_stored()).0, Validity::Valid);
        let (v, evidence) = validity(&h, half_applied());
        assert_eq!(v, Validity::Invalid);
        assert!(evidence[0].contains("half applied"), "{evidence:?}");
        // Meant to fail, it must not be applied at all.
        let h = history(transaction(Meaning::Unknown, Some(FAILING)));
        assert_eq!(validity(&h, all_stored()).0, Validity::Invalid);
    }

    #[test]
    fn an_original_erased_since_or_acknowledged_elsewhere_is_not_the_transactions() {
        let mut h = history(transaction(Meaning::Acknowledged, None));
        h.erasures.push(Erasure {
            second: 6,
            kind: ErasureKind::Delete,
            original: "t2".into(),
            pseudonym: "q2".into(),
            sent_micros: 6_000_000,
            answered_micros: 6_100_000,
            meaning: Meaning::Acknowledged,
            answer: "200".into(),
            raced: false,
        });
        let mut s = all_stored();
        s[1] = Seen::NotFound;
        assert_eq!(validity(&h, s).0, Validity::Valid);
        let mut h = history(transaction(Meaning::Refused, None));
        h.answers.push(Answered {
            second: 7,
            sent_micros: 7_000_000,
            path: Path::Pseudonymize,
            original: "t1".into(),
            pseudonym: "q1".into(),
        });
        assert_eq!(validity(&h, half_applied()).0, Validity::Valid);
    }

    #[test]
    fn a_lookup_that_failed_or_no_verification_is_unknown_not_a_pass() {
        let h = history(transaction(Meaning::Unknown, None));
        let (v, _) = validity(&h, vec![Seen::Error("timeout".into()); 3]);
        assert_eq!(v, Validity::Unknown);
        assert_eq!(bundles(&h, None).validity, Validity::Unknown);
    }

    #[test]
    fn a_wrong_answer_fails() {
        let mut t = transaction(Meaning::Refused, Some(FAILING));
        t.wrong
            .push("refused 404 naming entry Some(0), not its failing entry 3".into());
        let (v, evidence) = validity(&history(t), none_stored());
        assert_eq!(v, Validity::Invalid);
        assert!(evidence[0].contains("naming entry"), "{evidence:?}");
    }
}
