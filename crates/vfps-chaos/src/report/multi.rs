//! The multi-pseudonym namespace's part of `report.html`: per scenario
//! window and for the whole run, what `$pseudonymize-multiple`, the reverse
//! lookups and the erasures of multi originals came to.

use std::fmt::Write;

use crate::{
    history::{
        erasures::Meaning,
        multi::{Found, MultiHistory, Resolved},
    },
    scenario::events::Window,
};

/// Counts of one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub creates: usize,
    pub creates_acknowledged: usize,
    pub pseudonyms: usize,
    pub reads: usize,
    pub reads_answered: usize,
    pub lookups: usize,
    pub lookups_answered: usize,
    pub erasures: usize,
    pub erasures_acknowledged: usize,
    pub erasures_unknown: usize,
}

/// Counts of the calls offered in the seconds `within` keeps.
fn count(h: &MultiHistory, within: impl Fn(u64) -> bool) -> Counts {
    let mut c = Counts::default();
    for x in h.creates.iter().filter(|x| within(x.second)) {
        c.creates += 1;
        if x.meaning == Meaning::Acknowledged {
            c.creates_acknowledged += 1;
            c.pseudonyms += x.pseudonyms.len();
        }
    }
    for r in h.reads.iter().filter(|r| within(r.second)) {
        c.reads += 1;
        c.reads_answered += usize::from(!matches!(r.found, Found::NoAnswer(_)));
    }
    for r in h.resolves.iter().filter(|r| within(r.second)) {
        c.lookups += 1;
        c.lookups_answered += usize::from(!matches!(r.resolved, Resolved::NoAnswer(_)));
    }
    for e in h.erasures.iter().filter(|e| within(e.second)) {
        c.erasures += 1;
        c.erasures_acknowledged += usize::from(e.meaning == Meaning::Acknowledged);
        c.erasures_unknown += usize::from(e.meaning == Meaning::Unknown);
    }
    c
}

/// Counts per scenario window, then the whole run.
pub fn per_window(h: &MultiHistory, windows: &[Window]) -> Vec<(String, Counts)> {
    let mut out: Vec<(String, Counts)> = windows
        .iter()
        .map(|w| {
            let within = |second: u64| {
                let at = second as f64;
                at >= w.start_seconds.floor() && at < w.end_seconds
            };
            (w.scenario.to_string(), count(h, within))
        })
        .collect();
    out.push(("whole run".into(), count(h, |_| true)));
    out
}

/// The section's table.
pub fn section(h: &MultiHistory, windows: &[Window]) -> String {
    let mut s = String::from(
        "<h3>Multi-pseudonym namespace</h3><table><tr><th>window</th><th>creates acknowledged / sent</th><th>pseudonyms acknowledged</th><th>count 0 answered / sent</th><th>$de-pseudonymize answered / sent</th><th>erasures acknowledged / unknown / sent</th></tr>",
    );
    for (name, c) in per_window(h, windows) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} / {}</td><td>{}</td><td>{} / {}</td><td>{} / {}</td><td>{} / {} / {}</td></tr>",
            name.replace('<', "&lt;"),
            c.creates_acknowledged,
            c.creates,
            c.pseudonyms,
            c.reads_answered,
            c.reads,
            c.lookups_answered,
            c.lookups,
            c.erasures_acknowledged,
            c.erasures_unknown,
            c.erasures
        );
    }
    s.push_str("</table><p>Every answer in <code>erasures.json</code> (<code>multi</code>), what verification asked every replica in <code>erasures-verify.json</code>; judged by <code>multi-pseudonyms</code>, <code>P8-multi-erased-stays-erased</code> and <code>guard-multi-exercised</code>.</p>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        history::{
            erasures::ErasureKind,
            multi::{MultiCreate, MultiErasure, MultiRead},
        },
        scenario::ScenarioName,
    };

    #[test]
    fn multi_calls_are_counted_per_scenario_and_for_the_run() {
        let create = |second, meaning| MultiCreate {
            second,
            sent_micros: 0,
            answered_micros: 0,
            original: "o".into(),
            count: 2,
            meaning,
            answer: "201".into(),
            pseudonyms: vec!["p1".into(), "p2".into()],
        };
        let mut h = MultiHistory::new("ns-multi");
        h.created(create(1, Meaning::Acknowledged));
        h.created(create(12, Meaning::Acknowledged));
        h.created(create(13, Meaning::Unknown));
        h.read(MultiRead {
            second: 14,
            sent_micros: 0,
            answered_micros: 0,
            original: "o".into(),
            found: Found::NoAnswer("HTTP 503".into()),
        });
        h.erased(MultiErasure {
            second: 15,
            kind: ErasureKind::Delete,
            original: "o".into(),
            sent_micros: 0,
            answered_micros: 0,
            meaning: Meaning::Acknowledged,
            answer: "200".into(),
        });
        let windows = [Window {
            scenario: ScenarioName::new("drain"),
            start_seconds: 10.0,
            end_seconds: 20.0,
        }];
        let rows = per_window(&h, &windows);
        assert_eq!(rows[0].1.creates, 2);
        assert_eq!(rows[0].1.creates_acknowledged, 1);
        assert_eq!(rows[0].1.pseudonyms, 2);
        assert_eq!((rows[0].1.reads, rows[0].1.reads_answered), (1, 0));
        assert_eq!(rows[0].1.erasures_acknowledged, 1);
        assert_eq!(rows[1].1.creates_acknowledged, 2);
        let html = section(&h, &windows);
        assert!(html.contains("<tr><td>drain</td><td>1 / 2</td><td>2</td><td>0 / 1</td><td>0 / 0</td><td>1 / 0 / 1</td></tr>"), "{html}");
    }
}
