//! P2, pseudonym stability: every acknowledged `(original → pseudonym)`
//! re-Creates to the byte-identical pseudonym — through every replica after
//! settling, and while the faults happen (online re-Creates).

use super::{pair, per_pair, short, Answer, History, Property, Verdict};
use crate::history::{Broken, Status};

pub fn check(h: &History<'_>) -> Verdict {
    let (mut violations, mut undecided) = (Vec::new(), 0);
    for (e, o) in h.observed().filter(|(e, _)| e.status == Status::Ok) {
        let Some(acked) = e.pseudonym.as_deref() else {
            continue;
        };
        let mut wrong = Vec::new();
        for (replica, a) in o.replicas.iter().enumerate() {
            match &a.recreated {
                Answer::Value(p) if p == acked => {}
                Answer::Value(p) => wrong.push((replica, format!("re-created as {}…", short(p)))),
                Answer::NotFound => {
                    wrong.push((replica, "re-create answered NOT_FOUND".to_owned()));
                }
                Answer::Error(_) => undecided += 1,
            }
        }
        let key = pair(&e.original, acked);
        if let Some(line) = per_pair(&key, &wrong) {
            violations.push((key, line));
        }
    }
    let violations = h.pair_violations(violations, Broken::Stability);
    Verdict::from_violations(
        Property::PseudonymStability,
        violations,
        undecided,
        "acknowledged pairs re-created differently",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{test_support::*, Observation, ReplicaAnswer, Validity},
        history::Calls,
        operation::Operation,
    };

    #[test]
    fn a_pair_changed_through_every_replica_counts_once() {
        let v = over(check, &[ok_entry("o1", "p1")], &[obs3(value("pX"), None)]);
        assert!(v.summary.starts_with("1 acknowledged"), "{}", v.summary);
        assert!(
            v.evidence[0].contains("through replicas 0, 1, 2"),
            "{}",
            v.evidence[0]
        );
    }

    #[test]
    fn a_changed_or_lost_pseudonym_violates_p2_and_evidence_is_redacted() {
        let ledger = [
            ok_entry("o1", "p1"),
            ok_entry("o2", "p2"),
            ok_entry("o3", "p3"),
        ];
        let observations = [
            obs(value("p1"), None),
            obs(value("pX"), None),
            obs(Answer::NotFound, None),
        ];
        let v = over(check, &ledger, &observations);
        assert_eq!(v.validity, Validity::Invalid);
        assert_eq!(v.evidence.len(), 2);
        assert!(v.evidence[0].contains("sha256:"), "evidence is redacted");
        assert!(!v.evidence.concat().contains("o2"));
    }

    #[test]
    fn undecided_verification_is_unknown_not_valid() {
        let v = over(
            check,
            &[ok_entry("o1", "p1")],
            &[obs(Answer::Error("Unavailable".into()), None)],
        );
        assert_eq!(v.validity, Validity::Unknown);
        assert_eq!(
            over(check, &[ok_entry("o1", "p1")], &[obs(value("p1"), None)]).validity,
            Validity::Valid
        );
    }

    #[test]
    fn one_replica_that_disagrees_violates_p2() {
        let agree = |p: &str| ReplicaAnswer {
            recreated: value(p),
            reverse: None,
        };
        let observations = [Observation {
            replicas: vec![agree("p1"), agree("p1"), agree("stale")],
        }];
        let v = over(check, &[ok_entry("o1", "p1")], &observations);
        assert_eq!(v.validity, Validity::Invalid);
        assert!(v.evidence[0].contains("replica 2"), "{v:?}");
    }

    /// A pair found changed online (twice) and again after settling is one
    /// pair, not three; another pair's online finding still counts.
    #[test]
    fn a_pair_found_broken_online_and_after_settling_counts_once() {
        let calls = Calls::default();
        for second in [8, 11] {
            calls.found_pair(
                second,
                Broken::Stability,
                Operation::Recreate,
                crate::checker::pair("o1", "p1"),
                "re-created as pX…",
            );
        }
        calls.found_pair(
            9,
            Broken::Stability,
            Operation::Recreate,
            crate::checker::pair("o2", "p2"),
            "re-created as pY…",
        );
        let calls = calls.report();
        let ledger = [ok_entry("o1", "p1"), ok_entry("o2", "p2")];
        let observations = [obs(value("pX"), None), obs(value("p2"), None)];
        let h = History {
            calls: &calls,
            ..History::new(&[], 1, NO_BUDGET, &ledger, &observations)
        };
        let v = check(&h);
        assert!(v.summary.starts_with("2 acknowledged"), "{v:?}");
        assert!(v.evidence[1].starts_with("t=9s"), "{v:?}");
    }

    #[test]
    fn an_online_finding_violates_p2_though_verification_agrees() {
        let calls = Calls::default();
        calls.found(
            12,
            Broken::Stability,
            Operation::Recreate,
            "t=12s re-created as x".into(),
        );
        let calls = calls.report();
        let ledger = [ok_entry("o1", "p1")];
        let observations = [obs(value("p1"), None)];
        let h = History {
            calls: &calls,
            ..History::new(&[], 1, NO_BUDGET, &ledger, &observations)
        };
        let v = check(&h);
        assert_eq!(v.validity, Validity::Invalid);
        assert!(v.evidence[0].starts_with("t=12s"));
    }
}
