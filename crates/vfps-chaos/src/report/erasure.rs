//! The MII side of a run in the report: erasures, batch and transaction
//! Bundles counted
//! per second (`erasure-timeline.csv`) and per scenario (a section of
//! `report.html`). Kept apart from the page's own code: the page calls
//! [`with_section`] once.

use std::{collections::BTreeMap, fmt::Write, path::Path};

use crate::{
    history::erasures::{ErasureHistory, ErasureKind, Meaning},
    scenario::events::Window,
};

pub const FILE: &str = "erasure-timeline.csv";

/// Counts of one second or one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub acknowledged: u64,
    pub refused: u64,
    pub unknown: u64,
    pub deletes: u64,
    pub anonymizes: u64,
    pub raced: u64,
    pub bundles: u64,
    pub bundles_answered: u64,
    pub entries: u64,
    pub entries_ok: u64,
    pub transactions: u64,
    pub transactions_acknowledged: u64,
    /// Refused as they had to be: one entry was meant to fail them.
    pub transactions_refused_meant: u64,
    pub transactions_unknown: u64,
}

/// Counts by the second the calls were offered in.
pub fn per_second(h: &ErasureHistory) -> BTreeMap<u64, Counts> {
    let mut out: BTreeMap<u64, Counts> = BTreeMap::new();
    for e in &h.erasures {
        let c = out.entry(e.second).or_default();
        match e.meaning {
            Meaning::Acknowledged => c.acknowledged += 1,
            Meaning::Refused => c.refused += 1,
            Meaning::Unknown => c.unknown += 1,
        }
        match e.kind {
            ErasureKind::Delete => c.deletes += 1,
            ErasureKind::Anonymize => c.anonymizes += 1,
        }
        c.raced += u64::from(e.raced);
    }
    for b in &h.bundles {
        let c = out.entry(b.second).or_default();
        c.bundles += 1;
        c.bundles_answered += u64::from(b.meaning == Meaning::Acknowledged);
        c.entries += b.entries as u64;
        c.entries_ok += b.entries_ok as u64;
    }
    for t in &h.transactions {
        let c = out.entry(t.second).or_default();
        c.transactions += 1;
        match t.meaning {
            Meaning::Acknowledged => c.transactions_acknowledged += 1,
            Meaning::Refused => {
                c.transactions_refused_meant += u64::from(t.meant_to_fail.is_some())
            }
            Meaning::Unknown => c.transactions_unknown += 1,
        }
    }
    out
}

fn add(a: &mut Counts, b: &Counts) {
    a.acknowledged += b.acknowledged;
    a.refused += b.refused;
    a.unknown += b.unknown;
    a.deletes += b.deletes;
    a.anonymizes += b.anonymizes;
    a.raced += b.raced;
    a.bundles += b.bundles;
    a.bundles_answered += b.bundles_answered;
    a.entries += b.entries;
    a.entries_ok += b.entries_ok;
    a.transactions += b.transactions;
    a.transactions_acknowledged += b.transactions_acknowledged;
    a.transactions_refused_meant += b.transactions_refused_meant;
    a.transactions_unknown += b.transactions_unknown;
}

/// `erasure-timeline.csv`: a row per second with any erasure or Bundle.
pub fn timeline_csv(h: &ErasureHistory) -> String {
    let mut s = String::from(
        "second,erasures_acknowledged,erasures_refused,erasures_unknown,deletes,anonymizes,raced,bundles,bundles_answered,bundle_entries,bundle_entries_ok,transactions,transactions_acknowledged,transactions_refused_meant,transactions_unknown\n",
    );
    for (second, c) in per_second(h) {
        let _ = writeln!(
            s,
            "{second},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            c.acknowledged,
            c.refused,
            c.unknown,
            c.deletes,
            c.anonymizes,
            c.raced,
            c.bundles,
            c.bundles_answered,
            c.entries,
            c.entries_ok,
            c.transactions,
            c.transactions_acknowledged,
            c.transactions_refused_meant,
            c.transactions_unknown
        );
    }
    s
}

/// Counts per scenario window, then the whole run.
pub fn per_window(h: &ErasureHistory, windows: &[Window]) -> Vec<(String, Counts)> {
    let seconds = per_second(h);
    let mut out = Vec::new();
    for w in windows {
        let mut c = Counts::default();
        for (second, s) in &seconds {
            let at = *second as f64;
            if at >= w.start_seconds.floor() && at < w.end_seconds {
                add(&mut c, s);
            }
        }
        out.push((w.scenario.to_string(), c));
    }
    let mut all = Counts::default();
    for s in seconds.values() {
        add(&mut all, s);
    }
    out.push(("whole run".into(), all));
    out
}

/// The section: erasures, batch and transaction Bundles per scenario.
pub fn section(h: &ErasureHistory, windows: &[Window]) -> String {
    let mut s = String::from(
        "<h2>Erasures and Bundles (P8)</h2><table><tr><th>window</th><th>erasures acknowledged</th><th>refused</th><th>unknown</th><th>delete / anonymize</th><th>raced by a Create</th><th>Bundles answered / sent</th><th>entries ok / sent</th><th>transactions acknowledged / refused as meant / unknown / sent</th></tr>",
    );
    for (name, c) in per_window(h, windows) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{} / {}</td><td>{} / {}</td><td>{} / {} / {} / {}</td></tr>",
            name.replace('<', "&lt;"),
            c.acknowledged,
            c.refused,
            c.unknown,
            c.deletes,
            c.anonymizes,
            c.raced,
            c.bundles_answered,
            c.bundles,
            c.entries_ok,
            c.entries,
            c.transactions_acknowledged,
            c.transactions_refused_meant,
            c.transactions_unknown,
            c.transactions
        );
    }
    let _ = write!(
        s,
        "</table><p>Per second in <code>{FILE}</code>; every answer in <code>erasures.json</code>, what verification asked every replica in <code>erasures-verify.json</code>. A P8 violation names its scenario in the verdicts below. {}.</p>",
        crate::checker::erasure::MULTI_NOTE
    );
    if let Some(m) = &h.multi {
        s.push_str(&super::multi::section(m, windows));
    }
    s
}

/// The page with the section before its per-scenario table, when the run
/// directory has `erasures.json` (unchanged otherwise).
pub fn with_section(page: String, dir: &Path, windows: &[Window]) -> String {
    let Ok(Some(h)) = crate::checker::erasure::read_history(dir) else {
        return page;
    };
    const BEFORE: &str = "<h2>Per scenario</h2>";
    match page.find(BEFORE) {
        Some(at) => {
            let mut out = page;
            out.insert_str(at, &section(&h, windows));
            out
        }
        None => page,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        history::erasures::{Bundle, Erasure, Transaction},
        scenario::ScenarioName,
    };

    #[test]
    fn erasures_and_bundles_are_counted_per_second_and_per_scenario() {
        let erasure = |second, meaning, kind| Erasure {
            second,
            kind,
            original: "o".into(),
            pseudonym: "p".into(),
            sent_micros: 0,
            answered_micros: 0,
            meaning,
            answer: "200".into(),
            raced: second == 1,
        };
        let h = ErasureHistory {
            erasures: vec![
                erasure(1, Meaning::Acknowledged, ErasureKind::Delete),
                erasure(1, Meaning::Unknown, ErasureKind::Anonymize),
                erasure(12, Meaning::Acknowledged, ErasureKind::Delete),
            ],
            bundles: vec![Bundle {
                second: 12,
                entries: 40,
                meant_to_fail: 4,
                meaning: Meaning::Acknowledged,
                entries_ok: 36,
                wrong: Vec::new(),
                order: None,
            }],
            transactions: vec![Transaction {
                second: 12,
                sent_micros: 0,
                entries: 3,
                meant_to_fail: None,
                meaning: Meaning::Acknowledged,
                answer: "200".into(),
                new: Vec::new(),
                wrong: Vec::new(),
            }],
            ..ErasureHistory::default()
        };
        let csv = timeline_csv(&h);
        assert!(csv.contains("\n1,1,0,1,1,1,2,0,0,0,0,0,0,0,0\n"), "{csv}");
        assert!(
            csv.contains("\n12,1,0,0,1,0,0,1,1,40,36,1,1,0,0\n"),
            "{csv}"
        );
        let windows = [Window {
            scenario: ScenarioName::new("drain"),
            start_seconds: 10.0,
            end_seconds: 20.0,
        }];
        let rows = per_window(&h, &windows);
        assert_eq!(rows[0].1.acknowledged, 1);
        assert_eq!(rows[0].1.entries, 40);
        assert_eq!(rows[0].1.transactions_acknowledged, 1);
        assert_eq!(rows[1].1.acknowledged, 2);
        let html = section(&h, &windows);
        assert!(html.contains("<td>drain</td>"));
        assert!(html.contains("multi-pseudonyms"));
    }
}
