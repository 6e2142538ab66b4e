//! Each violation of P8 and its companions fed to the checkers, and each seen
//! to fail; the same histories without the violation pass.

use super::*;
use crate::{
    history::erasures::{Answered, Bundle, Erasure, ErasureKind, NotFound, Path, Transaction},
    history::verified::ReplicaSeen,
    scenario::ScenarioName,
};

const ACK: u64 = 10_000_000;

fn answered(sent: u64, path: Path, o: &str, p: &str) -> Answered {
    Answered {
        second: sent / 1_000_000,
        sent_micros: sent,
        path,
        original: o.into(),
        pseudonym: p.into(),
    }
}

fn erasure(kind: ErasureKind, meaning: Meaning) -> Erasure {
    Erasure {
        second: 9,
        kind,
        original: "o1".into(),
        pseudonym: "p1".into(),
        sent_micros: ACK - 500_000,
        answered_micros: ACK,
        meaning,
        answer: "200".into(),
        raced: false,
    }
}

/// o1 → p1 acknowledged at 1 s, erased (acknowledged) at 10 s; o2 → p2 live.
fn history(kind: ErasureKind, meaning: Meaning) -> ErasureHistory {
    ErasureHistory {
        namespace: "ns-erasable".into(),
        answers: vec![
            answered(1_000_000, Path::Pseudonymize, "o1", "p1"),
            answered(2_000_000, Path::BundleEntry, "o2", "p2"),
        ],
        erasures: vec![erasure(kind, meaning)],
        bundles: vec![Bundle {
            second: 2,
            entries: 10,
            meant_to_fail: 1,
            meaning: Meaning::Acknowledged,
            entries_ok: 9,
            wrong: Vec::new(),
            order: None,
        }],
        // Acknowledged, of subjects already known (no fresh original).
        transactions: vec![Transaction {
            second: 3,
            sent_micros: 3_000_000,
            entries: 1,
            meant_to_fail: None,
            meaning: Meaning::Acknowledged,
            answer: "200".into(),
            new: Vec::new(),
            wrong: Vec::new(),
        }],
        ..ErasureHistory::default()
    }
}

fn replica(lookup: Seen, recreated: Seen) -> ReplicaSeen {
    ReplicaSeen {
        grpc_get: lookup.clone(),
        rest_get: lookup.clone(),
        fhir_de_pseudonymize: lookup,
        recreated,
    }
}

fn gone() -> ReplicaSeen {
    replica(Seen::NotFound, Seen::Value("p9".into()))
}

fn kept() -> ReplicaSeen {
    replica(Seen::Value("o1".into()), Seen::Value("p1".into()))
}

fn observed(erased: Vec<ReplicaSeen>) -> Observed {
    Observed {
        erasures: vec![SubjectSeen {
            original: "o1".into(),
            pseudonym: "p1".into(),
            replicas: erased,
        }],
        live: vec![SubjectSeen {
            original: "o2".into(),
            pseudonym: "p2".into(),
            replicas: vec![replica(Seen::Value("o2".into()), Seen::Value("p2".into())); 3],
        }],
        transactions: Vec::new(),
        multi: None,
    }
}

fn validity(v: &Verdict) -> Validity {
    v.validity
}

#[test]
fn an_erasure_seen_everywhere_passes_every_verdict() {
    for kind in [ErasureKind::Delete, ErasureKind::Anonymize] {
        let h = history(kind, Meaning::Acknowledged);
        let seen = observed(vec![gone(), gone(), gone()]);
        for v in check(&h, Some(&seen)) {
            assert_eq!(
                v.validity,
                Validity::Valid,
                "{kind:?} {}: {}",
                v.property,
                v.summary
            );
        }
    }
}

#[test]
fn an_erased_mapping_answered_by_one_replica_after_the_ack_fails_p8() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let seen = observed(vec![gone(), kept(), gone()]);
    let v = erased_stays_erased(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v
        .evidence
        .iter()
        .any(|e| e.contains("replica 1 gRPC Get still answers")));
    assert!(v
        .evidence
        .iter()
        .any(|e| e.contains("replica 1 Create of the original answers the erased")));
    assert!(
        v.evidence[0].starts_with("t=9s"),
        "attributable: {}",
        v.evidence[0]
    );
}

#[test]
fn only_the_fhir_path_still_answering_fails_p8() {
    let h = history(ErasureKind::Anonymize, Meaning::Acknowledged);
    let mut stale = gone();
    stale.fhir_de_pseudonymize = Seen::Value("o1".into());
    let v = erased_stays_erased(&h, Some(&observed(vec![gone(), gone(), stale])));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence[0].contains("FHIR $de-pseudonymize"));
}

#[test]
fn an_acknowledged_erasure_lost_in_a_failover_fails_p8() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let v = erased_stays_erased(&h, Some(&observed(vec![kept(), kept(), kept()])));
    assert_eq!(validity(&v), Validity::Invalid);
}

#[test]
fn a_call_sent_after_the_ack_that_answers_the_erased_pseudonym_fails_p8_online() {
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    // Sent before the acknowledgement: it may rightly see the mapping.
    h.answers.push(answered(ACK - 1, Path::Race, "o1", "p1"));
    let seen = observed(vec![gone(), gone(), gone()]);
    assert_eq!(
        validity(&erased_stays_erased(&h, Some(&seen))),
        Validity::Valid
    );
    h.answers
        .push(answered(ACK + 1, Path::Pseudonymize, "o1", "p1"));
    let v = erased_stays_erased(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(
        v.evidence[0].contains("answered again"),
        "{}",
        v.evidence[0]
    );
}

#[test]
fn a_replica_answering_from_its_cache_after_the_ack_fails_p8_though_verification_sees_it_gone() {
    use crate::history::erasures::{CacheCheck, Heard, ReplicaAnswer};
    let ask = |replica, sent, heard| ReplicaAnswer {
        replica,
        path: Path::Pseudonymize,
        sent_micros: sent,
        answered_micros: sent + 1_000,
        heard,
    };
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    h.cache_checks.push(CacheCheck {
        second: 9,
        kind: ErasureKind::Delete,
        original: "o1".into(),
        pseudonym: "p1".into(),
        meaning: Meaning::Acknowledged,
        answered_micros: ACK,
        before: (0..3)
            .map(|i| ask(i, ACK - 900_000, Heard::Value("p1".into())))
            .collect(),
        after: (0..3)
            .map(|i| ask(i, ACK + 2_000, Heard::Value("p2".into())))
            .collect(),
    });
    // After a failover every cache is dropped: verification sees it gone.
    let seen = observed(vec![gone(), gone(), gone()]);
    let v = erased_stays_erased(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Valid, "{}", v.summary);
    h.cache_checks[0].after[2].heard = Heard::Value("p1".into());
    let v = erased_stays_erased(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(
        v.evidence[0].starts_with("t=9s replica 2:")
            && v.evidence[0].contains(crate::checker::cache_check::AFTER_ACK),
        "{}",
        v.evidence[0]
    );
}

#[test]
fn an_anonymized_pseudonym_reissued_to_another_original_fails() {
    let mut h = history(ErasureKind::Anonymize, Meaning::Acknowledged);
    h.answers
        .push(answered(ACK + 5, Path::BundleEntry, "o3", "p1"));
    let seen = observed(vec![gone(), gone(), gone()]);
    assert_eq!(
        validity(&erased_stays_erased(&h, Some(&seen))),
        Validity::Invalid
    );
    let v = erasable_subjects(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence.iter().any(|e| e.contains("answered for")));
}

#[test]
fn an_unknown_erasure_is_all_done_or_not_at_all() {
    let h = history(ErasureKind::Delete, Meaning::Unknown);
    for whole in [vec![gone(), gone(), gone()], vec![kept(), kept(), kept()]] {
        let v = erased_stays_erased(&h, Some(&observed(whole)));
        assert_eq!(validity(&v), Validity::Valid, "{}", v.summary);
    }
    let v = erased_stays_erased(&h, Some(&observed(vec![gone(), kept(), gone()])));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence[0].contains("half done"));
}

#[test]
fn a_refused_erasure_must_not_be_applied() {
    let h = history(ErasureKind::Delete, Meaning::Refused);
    let seen = observed(vec![gone(), gone(), gone()]);
    assert_eq!(
        validity(&erased_stays_erased(&h, Some(&seen))),
        Validity::Invalid
    );
    let seen = observed(vec![kept(), kept(), kept()]);
    assert_eq!(
        validity(&erased_stays_erased(&h, Some(&seen))),
        Validity::Valid
    );
}

#[test]
fn without_verification_p8_is_unknown_never_valid() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    assert_eq!(validity(&erased_stays_erased(&h, None)), Validity::Unknown);
}

#[test]
fn a_subject_changed_or_lost_before_its_erasure_fails() {
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let seen = observed(vec![gone(), gone(), gone()]);
    h.answers
        .push(answered(3_000_000, Path::GetPseudonym, "o2", "p7"));
    assert_eq!(
        validity(&erasable_subjects(&h, Some(&seen))),
        Validity::Invalid
    );
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    h.not_found.push(NotFound {
        second: 4,
        sent_micros: 4_000_000,
        path: Path::DePseudonymize,
        original: "o2".into(),
        pseudonym: "p2".into(),
    });
    assert_eq!(
        validity(&erasable_subjects(&h, Some(&seen))),
        Validity::Invalid
    );
    // After a delete, a new pseudonym for the original is what it promises.
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    h.answers
        .push(answered(ACK + 1, Path::Pseudonymize, "o1", "p5"));
    assert_eq!(
        validity(&erasable_subjects(&h, Some(&seen))),
        Validity::Valid
    );
}

#[test]
fn a_live_subject_that_does_not_resolve_on_a_replica_fails() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let mut seen = observed(vec![gone(), gone(), gone()]);
    seen.live[0].replicas[2].rest_get = Seen::NotFound;
    assert_eq!(
        validity(&erasable_subjects(&h, Some(&seen))),
        Validity::Invalid
    );
}

#[test]
fn a_batch_entry_answered_against_its_model_fails() {
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    h.bundles[0]
        .wrong
        .push("entry 9 (unknown context) answered 500, not 404".into());
    assert_eq!(validity(&bundles(&h, None)), Validity::Invalid);
}

#[test]
fn a_run_that_could_not_erase_or_sent_no_bundle_fails_its_guard() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    assert_eq!(validity(&exercised(&h)), Validity::Valid);
    assert!(exercised(&h).summary.contains(MULTI_NOTE));
    let mut none = h.clone();
    none.erasures[0].meaning = Meaning::Refused;
    none.cannot_erase
        .push("$delete-pseudonym answered 403: the load's token lacks the erase right".into());
    let v = exercised(&none);
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.summary.contains("no erasure was acknowledged"));
    assert!(v.summary.contains("erase right"));
    let mut no_bundle = h.clone();
    no_bundle.bundles.clear();
    assert_eq!(validity(&exercised(&no_bundle)), Validity::Invalid);
    let mut no_transaction = h;
    no_transaction.transactions[0].meaning = Meaning::Refused;
    let v = exercised(&no_transaction);
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.summary.contains("no transaction Bundle was acknowledged"));
}

#[test]
fn a_scenario_without_erasures_or_bundles_fails_the_guard() {
    let mut rows: Vec<Row> = (0..20).map(Row::empty).collect();
    for r in &mut rows[..10] {
        for op in [Operation::Erase, Operation::Bundle] {
            r.ops[op.index()].offered = 1;
            r.ops[op.index()].ok = 1;
        }
    }
    let window = |name: &str, start: f64, end: f64| Window {
        scenario: ScenarioName::new(name),
        start_seconds: start,
        end_seconds: end,
    };
    let first = [window("baseline", 0.0, 10.0)];
    assert_eq!(validity(&per_scenario(&rows, &first)), Validity::Valid);
    let both = [window("baseline", 0.0, 10.0), window("drain", 10.0, 20.0)];
    let v = per_scenario(&rows, &both);
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence[0].starts_with("drain"));
    assert_eq!(validity(&per_scenario(&rows, &[])), Validity::Invalid);
}

#[test]
fn a_database_instance_still_holding_an_acknowledged_erasure_fails() {
    let h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let rows = |rows: Vec<(String, String)>| DatabaseRows {
        instance: "db-a".into(),
        rows,
        error: None,
    };
    // Anonymized: the pseudonym's row stays, with another original.
    let fine = [rows(vec![("p1".into(), "vfps-anonymized-x".into())])];
    assert_eq!(
        validity(&in_database(Some(&h), Some(&fine))),
        Validity::Valid
    );
    let held = [rows(vec![]), rows(vec![("p1".into(), "o1".into())])];
    let v = in_database(Some(&h), Some(&held));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence[0].starts_with("t=9s"));
    // Sealed at rest, the row keeps the original's blind index: still held
    // (CI's erasure self-test passed unseen when only the original counted);
    // anonymized, a tombstone: not.
    let sealed = [rows(vec![("p1".into(), format!("~k1.{}", "A".repeat(43)))])];
    assert_eq!(
        validity(&in_database(Some(&h), Some(&sealed))),
        Validity::Invalid
    );
    let tombstone = [rows(vec![(
        "p1".into(),
        format!("{}0123", "~".repeat(2049)),
    )])];
    assert_eq!(
        validity(&in_database(Some(&h), Some(&tombstone))),
        Validity::Valid
    );
    assert_eq!(validity(&in_database(Some(&h), None)), Validity::Unknown);
    let unread = [DatabaseRows {
        instance: "db-b".into(),
        rows: Vec::new(),
        error: Some("timeout".into()),
    }];
    assert_eq!(
        validity(&in_database(Some(&h), Some(&unread))),
        Validity::Unknown
    );
}

#[test]
fn multiple_pseudonyms_accepted_fails_until_judged() {
    use crate::history::erasures::{Probe, Unsupported};
    let mut h = history(ErasureKind::Delete, Meaning::Acknowledged);
    let seen = observed(vec![gone(); 3]);
    h.unsupported = vec![
        // An older run's probe, from before transactions were offered: not judged.
        Probe {
            second: 3,
            what: Unsupported::Transaction,
            status: Some(200),
        },
        Probe {
            second: 3,
            what: Unsupported::Multiple,
            status: Some(405),
        },
    ];
    let v = bundles(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Valid, "{v:#?}");
    assert!(
        v.summary.contains("1 $pseudonymize-multiple 405"),
        "{}",
        v.summary
    );
    h.unsupported[1].status = Some(200);
    let v = bundles(&h, Some(&seen));
    assert_eq!(validity(&v), Validity::Invalid);
    assert!(v.evidence[0].contains("not 405"));
}
