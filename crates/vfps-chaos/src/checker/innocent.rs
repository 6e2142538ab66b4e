//! P5, no innocent failure: a well-formed call is answered only `OK`,
//! `UNAVAILABLE` or `DEADLINE_EXCEEDED` (and `NOT_FOUND` where its model allows
//! it) — never `INTERNAL`, `INVALID_ARGUMENT`, `UNKNOWN`, `FAILED_PRECONDITION`.
//! One caller's bad input must never fail another caller. The workload judges
//! each answer as it arrives; this checker collects the findings.

use super::{History, Property, Verdict};
use crate::history::Broken;

pub fn check(h: &History<'_>) -> Verdict {
    Verdict::from_violations(
        Property::NoInnocentFailure,
        h.findings(Broken::InnocentFailure).collect(),
        0,
        "well-formed calls answered with a code no model allows",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{test_support::NO_BUDGET, Validity},
        history::Calls,
        operation::Operation,
    };

    #[test]
    fn an_innocent_internal_violates_p5() {
        let calls = Calls::default();
        let clean = calls.report();
        assert!(check(&History {
            calls: &clean,
            ..History::new(&[], 1, NO_BUDGET, &[], &[])
        })
        .passed());
        calls.found(
            3,
            Broken::InnocentFailure,
            Operation::Create,
            "t=3s a well-formed create was answered Internal".into(),
        );
        let report = calls.report();
        let v = check(&History {
            calls: &report,
            ..History::new(&[], 1, NO_BUDGET, &[], &[])
        });
        assert_eq!(v.validity, Validity::Invalid);
        assert!(v.evidence[0].contains("Internal"));
    }
}
