//! Guards against a vacuous pass: a run that served nothing, recorded no
//! ledger, lost track of an acknowledged Create, or never got an answer for an
//! operation of its mix proves nothing and fails.

use super::{History, Property, Verdict};
use crate::operation::Operation;

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

/// Every Create answered `OK` is in the ledger, and a ledger re-read from its
/// file holds every acknowledged line that was written to it.
pub fn ledger_matches_acknowledged(h: &History<'_>) -> Verdict {
    let acknowledged = h.calls.acknowledged(Operation::Create);
    let recorded = format!(
        "{} acknowledged Creates recorded, {acknowledged} answered OK",
        h.ledger_ok_seen
    );
    let (file_whole, summary) = match h.ledger_file.and_then(|f| f.damage()) {
        Some(damage) => (false, format!("{recorded}; {damage}")),
        None => (true, recorded),
    };
    Verdict::holds(
        Property::LedgerMatchesAcknowledged,
        file_whole && h.ledger_ok_seen == acknowledged,
        summary,
    )
}

/// Every operation of the mix was served at least once (answered by a replica;
/// invalid input's answer is its documented error).
pub fn every_operation_acknowledged(h: &History<'_>) -> Verdict {
    let never: Vec<&str> = h
        .operations
        .iter()
        .filter(|op| h.rows.iter().all(|r| r.ops[op.index()].ok == 0))
        .map(|op| op.name())
        .collect();
    Verdict::holds(
        Property::EveryOperationAcknowledged,
        never.is_empty(),
        if never.is_empty() {
            format!("each of {} operations was served", h.operations.len())
        } else {
            format!("never served: {}", never.join(", "))
        },
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

    #[test]
    fn a_ledger_that_lost_an_acknowledged_create_or_a_silent_operation_fails() {
        let calls = crate::history::Calls::default();
        calls.answered(Operation::Create, "Ok");
        calls.answered(Operation::Create, "Ok");
        calls.answered(Operation::Get, "Unavailable");
        let calls = calls.report();
        let mut served = row(0, 3, 2);
        served.ops[Operation::Create.index()].ok = 2;
        served.ops[Operation::Get.index()].failed = 1;
        let rows = [served];
        let h = History {
            calls: &calls,
            ledger_ok_seen: 1,
            operations: &[Operation::Create, Operation::Get],
            ..History::new(&rows, 1, NO_BUDGET, &[], &[])
        };
        assert_eq!(ledger_matches_acknowledged(&h).validity, Validity::Invalid);
        let v = every_operation_acknowledged(&h);
        assert!(
            v.validity == Validity::Invalid && v.summary.contains("get"),
            "{v:?}"
        );
        let fine = History {
            ledger_ok_seen: 2,
            operations: &[Operation::Create],
            ..h
        };
        assert!(ledger_matches_acknowledged(&fine).passed());
        assert!(every_operation_acknowledged(&fine).passed());
        let file = |ok_read, read| {
            Some(crate::checker::LedgerFile {
                ok_written: 2,
                ok_read,
                kept: Some(2),
                read,
            })
        };
        let cut = History {
            ledger_file: file(1, 1),
            ..fine
        };
        let v = ledger_matches_acknowledged(&cut);
        assert!(
            v.validity == Validity::Invalid && v.summary.contains("1 of 2"),
            "{v:?}"
        );
        // A line replaced by a copy of another: as many lines, one entry fewer.
        let copied = History {
            ledger_file: file(2, 1),
            ..cut
        };
        let v = ledger_matches_acknowledged(&copied);
        assert!(
            v.validity == Validity::Invalid && v.summary.contains("1 of the 2 entries"),
            "{v:?}"
        );
        let whole = History {
            ledger_file: file(2, 2),
            ..copied
        };
        assert!(ledger_matches_acknowledged(&whole).passed());
    }
}
