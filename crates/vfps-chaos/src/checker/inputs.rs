//! What the service says about input: invalid input gets its documented code
//! (never `OK`, never `INTERNAL`), and List pages keep originals out and list
//! only pseudonyms that resolve.

use super::{History, Property, Verdict};
use crate::history::Broken;

pub fn invalid_input_codes(h: &History<'_>) -> Verdict {
    Verdict::from_violations(
        Property::InvalidInputCodes,
        h.findings(Broken::InvalidInput).collect(),
        0,
        "invalid calls answered other than with their documented code",
    )
}

pub fn list_pages(h: &History<'_>) -> Verdict {
    let mut violations: Vec<String> = h.findings(Broken::ListPage).collect();
    violations.extend(h.finals.listed_unresolved.iter().cloned());
    Verdict::from_violations(
        Property::ListPages,
        violations,
        0,
        "listed items exposing originals or not resolving",
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
    fn a_misanswered_invalid_call_and_an_unresolvable_listed_pseudonym_fail() {
        let calls = Calls::default();
        calls.found(
            1,
            Broken::InvalidInput,
            Operation::Bad,
            "t=1s original with U+0000 was answered Ok".into(),
        );
        let calls = calls.report();
        let finals = FinalChecks {
            listed_unresolved: vec!["listed pseudonym abc… does not resolve".into()],
            ..FinalChecks::default()
        };
        let h = History {
            calls: &calls,
            finals: &finals,
            ..History::new(&[], 1, NO_BUDGET, &[], &[])
        };
        assert_eq!(invalid_input_codes(&h).validity, Validity::Invalid);
        assert_eq!(list_pages(&h).validity, Validity::Invalid);
        let empty = History::new(&[], 1, NO_BUDGET, &[], &[]);
        assert!(invalid_input_codes(&empty).passed() && list_pages(&empty).passed());
    }
}
