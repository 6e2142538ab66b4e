//! Guards against a vacuous pass: a run that served nothing, or recorded no
//! ledger, proves nothing and fails.

use super::{History, Property, Verdict};

pub fn served_traffic(h: &History<'_>) -> Verdict {
    let ok = h.availability.ok;
    Verdict::holds(
        Property::ServedTraffic,
        ok > 0,
        format!("{ok} calls succeeded"),
    )
}

pub fn ledger_non_empty(h: &History<'_>) -> Verdict {
    let n = h.ledger.len();
    Verdict::holds(
        Property::LedgerNonEmpty,
        n > 0,
        format!("{n} ledger entries"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{test_support::*, Validity};

    #[test]
    fn an_empty_run_fails_its_guards() {
        let rows = [row(0, 10, 0)];
        let h = History::new(&rows, 10, NO_BUDGET, &[], &[]);
        assert_eq!(served_traffic(&h).validity, Validity::Invalid);
        assert_eq!(ledger_non_empty(&h).validity, Validity::Invalid);
        let served = [row(0, 10, 1)];
        let ledger = [ok_entry("o", "p")];
        let h = History::new(&served, 10, NO_BUDGET, &ledger, &[]);
        assert!(served_traffic(&h).passed() && ledger_non_empty(&h).passed());
    }
}
