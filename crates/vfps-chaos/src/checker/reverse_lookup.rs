//! P3, reverse lookup: `Get(namespace, pseudonym)` of every acknowledged pair
//! returns its original — through every replica after settling, and while the
//! faults happen (online Gets); `NOT_FOUND` is a lost write.

use super::{pair, per_pair, Answer, History, Property, Verdict};
use crate::{
    history::{Broken, Status},
    redact,
};

pub fn check(h: &History<'_>) -> Verdict {
    let (mut violations, mut undecided) = (Vec::new(), 0);
    for (e, o) in h.observed().filter(|(e, _)| e.status == Status::Ok) {
        let Some(acked) = e.pseudonym.as_deref() else {
            continue;
        };
        let mut wrong = Vec::new();
        for (replica, a) in o.replicas.iter().enumerate() {
            match &a.reverse {
                Some(Answer::Value(orig)) if orig == &e.original => {}
                Some(Answer::Value(orig)) => {
                    wrong.push((replica, format!("resolves to {}", redact(orig))));
                }
                Some(Answer::NotFound) => {
                    wrong.push((replica, "does not resolve (lost write)".to_owned()));
                }
                Some(Answer::Error(_)) | None => undecided += 1,
            }
        }
        let key = pair(&e.original, acked);
        if let Some(line) = per_pair(&key, &wrong) {
            violations.push((key, line));
        }
    }
    let violations = h.pair_violations(violations, Broken::ReverseLookup);
    Verdict::from_violations(
        Property::ReverseLookup,
        violations,
        undecided,
        "acknowledged pseudonyms not resolving to their original",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{test_support::*, Validity};

    #[test]
    fn a_lost_or_misattributed_pseudonym_violates_p3() {
        let ledger = [
            ok_entry("o1", "p1"),
            ok_entry("o2", "p2"),
            ok_entry("o3", "p3"),
        ];
        let observations = [
            obs(value("p1"), Some(value("o1"))),
            obs(value("p2"), Some(Answer::NotFound)),
            obs(value("p3"), Some(value("someone else"))),
        ];
        let v = over(check, &ledger, &observations);
        assert_eq!(v.validity, Validity::Invalid);
        assert_eq!(v.evidence.len(), 2);
        assert!(v.evidence[0].contains("lost write"));
        assert!(!v.evidence[1].contains("someone else"), "redacted");
        let unknown = over(check, &[ok_entry("o", "p")], &[obs(value("p"), None)]);
        assert_eq!(unknown.validity, Validity::Unknown);
    }

    /// A write lost everywhere is one lost pair, not one per replica (the
    /// unsafe-async self-test reported 998 "pseudonyms" for 333 pairs).
    #[test]
    fn a_pair_lost_through_every_replica_counts_once() {
        let v = over(
            check,
            &[ok_entry("o1", "p1"), ok_entry("o2", "p2")],
            &[
                obs3(value("p1"), Some(Answer::NotFound)),
                obs3(value("p2"), Some(value("o2"))),
            ],
        );
        assert_eq!(v.validity, Validity::Invalid);
        assert!(v.summary.starts_with("1 acknowledged"), "{}", v.summary);
        assert_eq!(v.evidence.len(), 1);
        assert!(
            v.evidence[0].contains("does not resolve (lost write) through replicas 0, 1, 2"),
            "{}",
            v.evidence[0]
        );
    }
}
