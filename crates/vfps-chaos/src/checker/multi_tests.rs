//! Each violation of the multi-pseudonym properties fed to the checker, and
//! each seen to fail; the same history without it passes.

use super::*;
use crate::{
    checker::Validity,
    history::{
        erasures::ErasureKind,
        multi::{MultiCreate, MultiRead, MultiResolve},
        verified::MultiReplicaSeen,
    },
};

/// When the erasure of o1 is acknowledged (µs).
const ACK: u64 = 10_000_000;

fn create(at: u64, o: &str, ps: &[&str]) -> MultiCreate {
    MultiCreate {
        second: at / 1_000_000,
        sent_micros: at,
        answered_micros: at + 1_000,
        original: o.into(),
        count: ps.len() as u32,
        meaning: Meaning::Acknowledged,
        answer: "201".into(),
        pseudonyms: ps.iter().map(|p| (*p).to_owned()).collect(),
    }
}

fn read(at: u64, o: &str, found: Found) -> MultiRead {
    MultiRead {
        second: at / 1_000_000,
        sent_micros: at,
        answered_micros: at + 1_000,
        original: o.into(),
        found,
    }
}

fn resolve(at: u64, o: &str, p: &str, resolved: Resolved) -> MultiResolve {
    MultiResolve {
        second: at / 1_000_000,
        sent_micros: at,
        answered_micros: at + 1_000,
        original: o.into(),
        pseudonym: p.into(),
        resolved,
    }
}

fn pseudonyms_found(ps: &[&str]) -> Found {
    Found::Pseudonyms(ps.iter().map(|p| (*p).to_owned()).collect())
}

fn erasure(meaning: Meaning) -> MultiErasure {
    MultiErasure {
        second: 9,
        kind: ErasureKind::Anonymize,
        original: "o1".into(),
        sent_micros: ACK - 500_000,
        answered_micros: ACK,
        meaning,
        answer: "200".into(),
    }
}

/// o1 → a1, a2 (then a3) erased at 10 s; o2 → b1, b2, b3 live, read and
/// resolved.
fn history(meaning: Meaning) -> MultiHistory {
    MultiHistory {
        namespace: "ns-multi".into(),
        creates: vec![
            create(1_000_000, "o1", &["a1", "a2"]),
            create(2_000_000, "o1", &["a3"]),
            create(3_000_000, "o2", &["b1", "b2"]),
            create(4_000_000, "o2", &["b3"]),
        ],
        reads: vec![
            read(5_000_000, "o2", pseudonyms_found(&["b1", "b2", "b3"])),
            read(12_000_000, "o1", Found::NotFound),
        ],
        resolves: vec![
            resolve(6_000_000, "o2", "b2", Resolved::Original("o2".into())),
            resolve(13_000_000, "o1", "a2", Resolved::NotFound),
        ],
        erasures: vec![erasure(meaning)],
    }
}

fn replica(resolved: &[Seen], all: Found) -> MultiReplicaSeen {
    MultiReplicaSeen {
        resolved: resolved.to_vec(),
        all,
    }
}

fn value(o: &str) -> Seen {
    Seen::Value(o.into())
}

/// Verification as it should be: o1 gone everywhere, o2 whole everywhere.
fn seen() -> MultiSeen {
    MultiSeen {
        originals: vec![
            OriginalSeen {
                original: "o1".into(),
                pseudonyms: vec!["a1".into(), "a2".into(), "a3".into()],
                replicas: vec![replica(&vec![Seen::NotFound; 3], Found::NotFound); 2],
            },
            OriginalSeen {
                original: "o2".into(),
                pseudonyms: vec!["b1".into(), "b2".into(), "b3".into()],
                replicas: vec![
                    replica(
                        &[value("o2"), value("o2"), value("o2")],
                        pseudonyms_found(&["b1", "b2", "b3", "b4"])
                    );
                    2
                ],
            },
        ],
    }
}

fn validities(h: &MultiHistory, s: Option<&MultiSeen>) -> Vec<Validity> {
    check(Some(h), s).iter().map(|v| v.validity).collect()
}

#[test]
fn a_healthy_multi_history_passes_every_check() {
    let h = history(Meaning::Acknowledged);
    for v in check(Some(&h), Some(&seen())) {
        assert!(v.passed(), "{v:?}");
    }
    // A run from before multi-pseudonym namespaces is not judged here.
    assert!(check(None, None).is_empty());
}

#[test]
fn a_pseudonym_answered_for_two_originals_fails() {
    let mut h = history(Meaning::Acknowledged);
    h.creates.push(create(6_000_000, "o3", &["b2"]));
    let v = pseudonyms(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("was answered for"),
        "{:?}",
        v.evidence
    );
    // Also when only a read answers another original's pseudonym.
    let mut h = history(Meaning::Acknowledged);
    h.reads
        .push(read(6_000_000, "o3", pseudonyms_found(&["b1"])));
    assert_eq!(pseudonyms(&h, Some(&seen())).validity, Validity::Invalid);
}

#[test]
fn a_count_0_during_the_load_that_leaves_out_an_acknowledged_pseudonym_fails() {
    let mut h = history(Meaning::Acknowledged);
    h.reads[0].found = pseudonyms_found(&["b1", "b3"]);
    let v = pseudonyms(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("left out 1 of its 3"),
        "{:?}",
        v.evidence
    );
    // A 404 for a never-erased original with acknowledged pseudonyms: lost writes.
    h.reads[0].found = Found::NotFound;
    assert_eq!(pseudonyms(&h, Some(&seen())).validity, Validity::Invalid);
    // Sent before the second create's acknowledgement: b3 may be missing.
    let mut h = history(Meaning::Acknowledged);
    h.reads[0] = read(3_500_000, "o2", pseudonyms_found(&["b1", "b2"]));
    assert!(pseudonyms(&h, Some(&seen())).passed());
}

#[test]
fn a_pseudonym_resolving_to_another_original_at_verification_fails() {
    let h = history(Meaning::Acknowledged);
    let mut s = seen();
    s.originals[1].replicas[1].resolved[2] = value("o1");
    let v = pseudonyms(&h, Some(&s));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("replica 1 resolves"),
        "{:?}",
        v.evidence
    );
    let mut s = seen();
    s.originals[1].replicas[0].resolved[0] = Seen::NotFound;
    assert_eq!(pseudonyms(&h, Some(&s)).validity, Validity::Invalid);
}

#[test]
fn a_count_0_at_verification_that_leaves_one_out_fails() {
    let h = history(Meaning::Acknowledged);
    let mut s = seen();
    s.originals[1].replicas[1].all = pseudonyms_found(&["b1", "b2"]);
    let v = pseudonyms(&h, Some(&s));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(v.evidence[0].contains("count 0"), "{:?}", v.evidence);
    let mut s = seen();
    s.originals[1].replicas[0].all = Found::NotFound;
    assert_eq!(pseudonyms(&h, Some(&s)).validity, Validity::Invalid);
}

#[test]
fn an_erased_pseudonym_answered_after_the_acknowledgement_fails_p8() {
    let mut h = history(Meaning::Acknowledged);
    h.reads[1].found = pseudonyms_found(&["a2"]);
    let v = erased_stays_erased(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("answered again for its original"),
        "{:?}",
        v.evidence
    );
    // Issued again to someone else (anonymized pseudonyms are reserved).
    let mut h = history(Meaning::Acknowledged);
    h.creates.push(create(11_000_000, "o4", &["a1"]));
    let v = erased_stays_erased(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    // The same answer to a call sent before the acknowledgement is no violation.
    let mut h = history(Meaning::Acknowledged);
    h.reads[1] = read(ACK - 100_000, "o1", pseudonyms_found(&["a1", "a2", "a3"]));
    assert!(erased_stays_erased(&h, Some(&seen())).passed());
}

#[test]
fn a_replica_still_answering_an_erased_pseudonym_at_verification_fails_p8() {
    let h = history(Meaning::Acknowledged);
    let mut s = seen();
    s.originals[0].replicas[1].resolved[1] = value("o1");
    let v = erased_stays_erased(&h, Some(&s));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("replica 1 still resolves"),
        "{:?}",
        v.evidence
    );
    let mut s = seen();
    s.originals[0].replicas[0].all = pseudonyms_found(&["a3"]);
    let v = erased_stays_erased(&h, Some(&s));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("count 0 still answers 1"),
        "{:?}",
        v.evidence
    );
}

#[test]
fn a_pseudonym_made_by_a_create_racing_the_erasure_may_stay() {
    let mut h = history(Meaning::Acknowledged);
    // Sent before the erasure, acknowledged after it was sent.
    let mut raced = create(ACK - 600_000, "o1", &["a4"]);
    raced.answered_micros = ACK + 10;
    h.creates.push(raced);
    let mut s = seen();
    s.originals[0].pseudonyms.push("a4".into());
    for r in &mut s.originals[0].replicas {
        r.resolved.push(value("o1"));
        r.all = pseudonyms_found(&["a4"]);
    }
    assert!(erased_stays_erased(&h, Some(&s)).passed());
}

#[test]
fn an_unknown_erasure_half_done_and_a_refused_one_done_fail_p8() {
    let h = history(Meaning::Unknown);
    let mut s = seen();
    s.originals[0].replicas[1] =
        replica(&vec![value("o1"); 3], pseudonyms_found(&["a1", "a2", "a3"]));
    let v = erased_stays_erased(&h, Some(&s));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(v.evidence[0].contains("half done"), "{:?}", v.evidence);
    // Wholly done or wholly not: both fine for an unknown erasure.
    assert!(erased_stays_erased(&h, Some(&seen())).passed());
    let mut whole = seen();
    whole.originals[0].replicas =
        vec![replica(&vec![value("o1"); 3], pseudonyms_found(&["a1", "a2", "a3"])); 2];
    assert!(erased_stays_erased(&h, Some(&whole)).passed());
    // Refused: nothing may be gone.
    let mut h = history(Meaning::Refused);
    h.reads.pop();
    let v = erased_stays_erased(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(v.evidence[0].contains("refused, yet"), "{:?}", v.evidence);
    assert!(erased_stays_erased(&h, Some(&whole)).passed());
}

#[test]
fn undecided_answers_and_no_verification_are_unknown_not_a_pass() {
    let h = history(Meaning::Acknowledged);
    let mut s = seen();
    s.originals[1].replicas[0].resolved[0] = Seen::Error("Unavailable".into());
    s.originals[0].replicas[0].all = Found::NoAnswer("HTTP 503".into());
    assert_eq!(pseudonyms(&h, Some(&s)).validity, Validity::Unknown);
    assert_eq!(
        erased_stays_erased(&h, Some(&s)).validity,
        Validity::Unknown
    );
    assert_eq!(
        validities(&h, None),
        vec![Validity::Unknown, Validity::Unknown, Validity::Invalid]
    );
}

#[test]
fn a_run_that_made_read_or_erased_no_multi_original_fails_its_guard() {
    let mut h = history(Meaning::Acknowledged);
    for c in &mut h.creates {
        c.meaning = Meaning::Unknown;
        c.pseudonyms.clear();
    }
    let v = exercised(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.summary
            .contains("no $pseudonymize-multiple create was acknowledged"),
        "{}",
        v.summary
    );
    let mut h = history(Meaning::Unknown);
    h.reads.clear();
    let v = exercised(&h, Some(&seen()));
    assert_eq!(v.evidence.len(), 2, "{:?}", v.evidence);
    let h = history(Meaning::Acknowledged);
    let v = exercised(&h, Some(&MultiSeen::default()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(exercised(&h, Some(&seen())).passed());
    // An empty record (the namespace made, nothing answered) fails too.
    let empty = MultiHistory::new("ns-multi");
    assert_eq!(
        exercised(&empty, Some(&MultiSeen::default())).validity,
        Validity::Invalid
    );
}

#[test]
fn a_reverse_lookup_during_the_load_answering_another_original_or_nothing_fails() {
    let mut h = history(Meaning::Acknowledged);
    h.resolves[0].resolved = Resolved::Original("o1".into());
    let v = pseudonyms(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("resolved to another original"),
        "{:?}",
        v.evidence
    );
    // Not found, never erased: a lost write.
    h.resolves[0].resolved = Resolved::NotFound;
    let v = pseudonyms(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(v.evidence[0].contains("never erased"), "{:?}", v.evidence);
    // Not found once an erasure of it was sent: fine.
    let h = history(Meaning::Unknown);
    assert!(pseudonyms(&h, Some(&seen())).passed());
}

#[test]
fn a_reverse_lookup_answering_an_erased_pseudonym_after_the_acknowledgement_fails_p8() {
    let mut h = history(Meaning::Acknowledged);
    h.resolves[1].resolved = Resolved::Original("o1".into());
    let v = erased_stays_erased(&h, Some(&seen()));
    assert_eq!(v.validity, Validity::Invalid);
    assert!(
        v.evidence[0].contains("answered again for its original"),
        "{:?}",
        v.evidence
    );
    // Sent before the acknowledgement: it may rightly have seen it.
    h.resolves[1].sent_micros = ACK - 100_000;
    assert!(erased_stays_erased(&h, Some(&seen())).passed());
}

#[test]
fn an_erased_multi_mapping_a_database_instance_still_holds_fails_p8_in_the_database() {
    let h = history(Meaning::Acknowledged);
    let rows = |rows: &[(&str, &str)]| DatabaseRows {
        instance: "db-b".into(),
        rows: rows
            .iter()
            .map(|(p, o)| ((*p).to_owned(), (*o).to_owned()))
            .collect(),
        error: None,
    };
    // Anonymized: the rows are kept, with a marker instead of the original.
    assert!(held_in_database(&h, &[rows(&[("a1", "anonymized-1"), ("b1", "o2")])]).is_empty());
    let held = held_in_database(&h, &[rows(&[("a2", "o1")])]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].contains("db-b still holds"), "{held:?}");
    // Through the P8-in-database verdict of the whole record.
    let record = crate::history::erasures::ErasureHistory {
        multi: Some(h.clone()),
        ..Default::default()
    };
    let v = super::super::erasure::in_database(Some(&record), Some(&[rows(&[("a3", "o1")])]));
    assert_eq!(v.validity, Validity::Invalid);
    let v = super::super::erasure::in_database(Some(&record), Some(&[rows(&[])]));
    assert_eq!(v.validity, Validity::Valid);
    // Only an unknown erasure: nothing it may hold is a violation here.
    let unknown = history(Meaning::Unknown);
    assert!(held_in_database(&unknown, &[rows(&[("a2", "o1")])]).is_empty());
}
