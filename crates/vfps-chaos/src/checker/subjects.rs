//! P4, one subject, one pseudonym: no pseudonym belongs to two originals, and
//! every indeterminate Create resolves afterwards to exactly one pseudonym,
//! which resolves back to its original.

use std::collections::{BTreeMap, BTreeSet};

use super::{pair, short, Answer, History, Property, ReplicaAnswer, Verdict};
use crate::{
    history::{Entry, Status},
    redact,
};

/// One replica's account of an indeterminate Create: resolved to a pseudonym
/// that resolves back to the original.
fn one_replica_indeterminate<'a>(
    e: &'a Entry,
    a: &'a ReplicaAnswer,
    owners: &mut BTreeMap<&'a str, BTreeSet<&'a str>>,
    violations: &mut Vec<String>,
    undecided: &mut usize,
) {
    match &a.recreated {
        Answer::Value(p) => {
            owners.entry(p).or_default().insert(&e.original);
            match &a.reverse {
                Some(Answer::Value(orig)) if orig == &e.original => {}
                Some(Answer::Value(orig)) => violations.push(format!(
                    "{} but the pseudonym resolves to {}",
                    pair(&e.original, p),
                    redact(orig)
                )),
                Some(Answer::NotFound) => violations.push(format!(
                    "{} but the pseudonym does not resolve",
                    pair(&e.original, p)
                )),
                Some(Answer::Error(_)) | None => *undecided += 1,
            }
        }
        Answer::NotFound => violations.push(format!(
            "indeterminate original {} cannot be resolved",
            redact(&e.original)
        )),
        Answer::Error(_) => *undecided += 1,
    }
}

pub fn check(h: &History<'_>) -> Verdict {
    let (mut violations, mut undecided) = (Vec::new(), 0);
    // Every pseudonym seen anywhere, with the originals it was seen for.
    let mut owners: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (e, o) in h.observed() {
        match e.status {
            Status::Ok => {
                if let Some(acked) = e.pseudonym.as_deref() {
                    owners.entry(acked).or_default().insert(&e.original);
                }
                for a in &o.replicas {
                    if let Answer::Value(p) = &a.recreated {
                        owners.entry(p).or_default().insert(&e.original);
                    }
                }
            }
            Status::Indeterminate => {
                // Every replica must resolve the subject to one and the same
                // pseudonym.
                let values: BTreeSet<&str> = o
                    .replicas
                    .iter()
                    .filter_map(|a| match &a.recreated {
                        Answer::Value(p) => Some(p.as_str()),
                        _ => None,
                    })
                    .collect();
                if values.len() > 1 {
                    violations.push(format!(
                        "indeterminate original {} resolves to {} pseudonyms across replicas",
                        redact(&e.original),
                        values.len()
                    ));
                }
                for a in &o.replicas {
                    one_replica_indeterminate(e, a, &mut owners, &mut violations, &mut undecided);
                }
            }
        }
    }
    for (pseudonym, originals) in &owners {
        if originals.len() > 1 {
            let list: Vec<String> = originals.iter().map(|o| redact(o)).collect();
            violations.push(format!(
                "pseudonym {}… belongs to {} originals: {}",
                short(pseudonym),
                originals.len(),
                list.join(", ")
            ));
        }
    }
    Verdict::from_violations(
        Property::OneSubjectOnePseudonym,
        violations,
        undecided,
        "subjects with other than exactly one pseudonym",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{test_support::*, Validity};

    #[test]
    fn a_pseudonym_shared_by_two_originals_violates_p4() {
        let ledger = [ok_entry("o1", "p1"), indeterminate("o2")];
        let observations = [
            obs(value("p1"), Some(value("o1"))),
            obs(value("p1"), Some(value("o1"))),
        ];
        let v = over(check, &ledger, &observations);
        assert_eq!(v.validity, Validity::Invalid, "{v:?}");
        assert!(v
            .evidence
            .iter()
            .any(|e| e.contains("belongs to 2 originals")));
    }

    #[test]
    fn an_indeterminate_create_must_resolve_to_exactly_one_pseudonym() {
        let unresolved = over(check, &[indeterminate("o")], &[obs(Answer::NotFound, None)]);
        assert_eq!(unresolved.validity, Validity::Invalid);
        let resolved = over(
            check,
            &[indeterminate("o")],
            &[obs(value("p"), Some(value("o")))],
        );
        assert_eq!(resolved.validity, Validity::Valid);
        let undecided = over(
            check,
            &[indeterminate("o")],
            &[obs(Answer::Error("Unavailable".into()), None)],
        );
        assert_eq!(undecided.validity, Validity::Unknown);
    }
}
