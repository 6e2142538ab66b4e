//! P6, namespace lifecycle: until a side namespace's delete is acknowledged
//! every acknowledged pair in it resolves; after it, none does — while the
//! faults happen (the churn's own reads) and after settling.

use super::{History, Property, Verdict};
use crate::history::Broken;

pub fn check(h: &History<'_>) -> Verdict {
    let mut violations: Vec<String> = h.findings(Broken::Lifecycle).collect();
    violations.extend(h.finals.side_violations.iter().cloned());
    Verdict::from_violations(
        Property::NamespaceLifecycle,
        violations,
        0,
        "side-namespace pairs against their namespace's lifecycle",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{test_support::NO_BUDGET, FinalChecks, Validity},
        history::Calls,
        operation::Operation,
    };

    #[test]
    fn a_pair_that_outlives_its_deleted_namespace_violates_p6() {
        let finals = FinalChecks {
            side_violations: vec!["pair x of side namespace s resolves after its delete".into()],
            ..FinalChecks::default()
        };
        let v = check(&History {
            finals: &finals,
            ..History::new(&[], 1, NO_BUDGET, &[], &[])
        });
        assert_eq!(v.validity, Validity::Invalid);
        let calls = Calls::default();
        calls.found(
            9,
            Broken::Lifecycle,
            Operation::Churn,
            "t=9s side namespace vanished before its delete".into(),
        );
        let calls = calls.report();
        let online = check(&History {
            calls: &calls,
            ..History::new(&[], 1, NO_BUDGET, &[], &[])
        });
        assert_eq!(online.validity, Validity::Invalid);
    }
}
