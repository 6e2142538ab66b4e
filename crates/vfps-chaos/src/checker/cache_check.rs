//! P8 on the replicas' caches, from the load's cache checks
//! (`workload::mii::cache_check`): an erasure acknowledged, then every
//! replica asked again on its own address. Any replica that answers the
//! erased mapping after the acknowledgement — a `$pseudonymize` of the
//! original answering the erased pseudonym, a `$de-pseudonymize` of it
//! resolving to anyone — breaks P8, with its replica and how long after the
//! acknowledgement. Unanswered questions (a replica paused or cut off) are
//! counted, not judged: verification after the run asks every replica again.

use super::short;
use crate::{
    history::erasures::{CacheCheck, ErasureHistory, Heard, Meaning, Path},
    redact,
};

/// Said in every finding of a cache check (the self-test counts them).
pub const AFTER_ACK: &str = "after the acknowledgement";

/// The violations of every cache check, and a note for P8's summary.
pub fn judge(h: &ErasureHistory) -> (Vec<String>, String) {
    let mut violations = Vec::new();
    let (mut asked, mut unanswered, mut warmed) = (0, 0, 0);
    let acknowledged: Vec<&CacheCheck> = h
        .cache_checks
        .iter()
        .filter(|c| c.meaning == Meaning::Acknowledged)
        .collect();
    for c in &acknowledged {
        warmed += c
            .before
            .iter()
            .filter(|b| b.heard == Heard::Value(c.pseudonym.clone()))
            .count();
        for a in &c.after {
            asked += 1;
            let after_ms = a.sent_micros.saturating_sub(c.answered_micros) / 1000;
            let what = match (&a.heard, a.path) {
                (Heard::Value(p), Path::Pseudonymize) if *p == c.pseudonym => {
                    "$pseudonymize of the original answered the erased pseudonym".to_owned()
                }
                (Heard::Value(o), Path::DePseudonymize) if *o == c.original => {
                    "$de-pseudonymize resolved the erased pseudonym to its original".to_owned()
                }
                (Heard::Value(o), Path::DePseudonymize) => format!(
                    "$de-pseudonymize resolved the erased pseudonym to another original {}",
                    redact(o)
                ),
                (Heard::Failed(_), _) => {
                    unanswered += 1;
                    continue;
                }
                _ => continue,
            };
            violations.push(format!(
                "t={}s replica {}: {what} {}… of {} ({}), asked {after_ms} ms {AFTER_ACK}",
                c.second,
                a.replica,
                short(&c.pseudonym),
                redact(&c.original),
                c.kind.operation(),
            ));
        }
    }
    let note = format!(
        "cache checks: {} erasures acknowledged and asked of every replica again ({warmed} caches filled before, {asked} asked after, {unanswered} unanswered)",
        acknowledged.len()
    );
    (violations, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::erasures::{ErasureKind, ReplicaAnswer};

    const ACK: u64 = 10_000_000;

    fn answer(replica: usize, path: Path, sent: u64, heard: Heard) -> ReplicaAnswer {
        ReplicaAnswer {
            replica,
            path,
            sent_micros: sent,
            answered_micros: sent + 1_000,
            heard,
        }
    }

    /// o1 → p1 anonymized (acknowledged at 10 s); three replicas filled
    /// their caches before and, after, resolve nothing and answer a new
    /// pseudonym, except as `stale` says.
    fn history(meaning: Meaning, stale: Option<(usize, Path)>) -> ErasureHistory {
        let value = |v: &str| Heard::Value(v.into());
        let mut after: Vec<ReplicaAnswer> = (0..3)
            .map(|i| answer(i, Path::DePseudonymize, ACK + 1_000, Heard::NotFound))
            .chain((0..3).map(|i| answer(i, Path::Pseudonymize, ACK + 5_000, value("p2"))))
            .collect();
        if let Some((replica, path)) = stale {
            for a in &mut after {
                if a.replica == replica && a.path == path {
                    a.heard = match path {
                        Path::DePseudonymize => value("o1"),
                        _ => value("p1"),
                    };
                }
            }
        }
        // Replica 2 could not be asked (paused): not a violation.
        after[2].heard = Heard::Failed("timeout".into());
        ErasureHistory {
            namespace: "ns-erasable".into(),
            cache_checks: vec![CacheCheck {
                second: 9,
                kind: ErasureKind::Anonymize,
                original: "o1".into(),
                pseudonym: "p1".into(),
                meaning,
                answered_micros: ACK,
                before: (0..3)
                    .map(|i| answer(i, Path::Pseudonymize, ACK - 900_000, value("p1")))
                    .collect(),
                after,
            }],
            ..ErasureHistory::default()
        }
    }

    #[test]
    fn a_stale_answer_after_the_acknowledgement_is_a_violation_naming_its_replica() {
        let (none, note) = judge(&history(Meaning::Acknowledged, None));
        assert!(none.is_empty(), "{none:?}");
        assert!(note.contains("3 caches filled before, 6 asked after, 1 unanswered"));
        let (v, _) = judge(&history(
            Meaning::Acknowledged,
            Some((1, Path::Pseudonymize)),
        ));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with(
            "t=9s replica 1: $pseudonymize of the original answered the erased pseudonym p1…"
        ));
        assert!(v[0].contains(AFTER_ACK));
        let (v, _) = judge(&history(
            Meaning::Acknowledged,
            Some((0, Path::DePseudonymize)),
        ));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("replica 0: $de-pseudonymize resolved the erased pseudonym"));
    }

    #[test]
    fn an_erasure_not_acknowledged_is_not_judged_here() {
        let (v, note) = judge(&history(Meaning::Unknown, Some((1, Path::Pseudonymize))));
        assert!(v.is_empty());
        assert!(note.starts_with("cache checks: 0 erasures"));
    }
}
