//! Erasure through the faults (P8) and the MII interface's subjects, from
//! `erasures.json` and what verification asked every replica:
//!
//! - **P8, erased stays erased**: from an erasure's acknowledgement on, no
//!   call sent after it is answered the erased pseudonym (for its original or
//!   anyone's), and after settling no replica on any path (gRPC Get, REST,
//!   FHIR `$de-pseudonymize`) resolves it, nor does a Create of the original
//!   answer it; an erasure whose answer was lost is found either fully done
//!   on every replica and path or not at all; a refused one not at all.
//!   Erasures checked against every replica's cache during the load are
//!   judged by [`super::cache_check`].
//! - **P2–P4 until erasure** (`erasable-subjects`): an acknowledged subject's
//!   pseudonym is answered for it until an erasure of it was sent; lookups
//!   find it; no pseudonym is answered for two originals (so an anonymized
//!   pseudonym is never issued to anyone else); live subjects resolve on
//!   every replica after settling.
//! - **bundles**: every batch entry answered as its model allows (a meant
//!   failure 404, a well-formed entry 200 or 503), entries in order; its
//!   pairs obey the properties above like single calls. Transaction Bundles
//!   all or nothing ([`super::transaction`]).
//! - **guard-erasure-exercised**: an erasure was acknowledged, a batch and a
//!   transaction Bundle answered; an erasure refused for want of a right or
//!   a setting fails.
//!
//! Multi-pseudonym namespaces (`$pseudonymize-multiple`) are judged apart,
//! in [`super::multi`]; here only that `$pseudonymize-multiple` in the
//! (single-pseudonym) erasable namespace is still refused 405.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{short, Property, Validity, Verdict};
use crate::{
    history::{
        erasures::{acknowledged, DatabaseRows, ErasureHistory, Meaning, Unsupported},
        verified::{Observed, Seen, SubjectSeen},
        Row,
    },
    operation::Operation,
    redact,
    scenario::events::Window,
};

/// Said by every erasure verdict: where multi-pseudonym namespaces are judged.
pub const MULTI_NOTE: &str =
    "multi-pseudonym namespaces judged apart (multi-pseudonyms, P8-multi-erased-stays-erased)";

/// How long after an answer's call was sent an erasure may still have raced it.
const RACE_MICROS: u64 = 10_000_000;

/// P8 from the answers during the load and what verification saw.
pub fn erased_stays_erased(h: &ErasureHistory, seen: Option<&Observed>) -> Verdict {
    // Right after the acknowledgement, every replica (its cache filled
    // before): first, so that the evidence kept shows them.
    let (mut violations, cache_note) = super::cache_check::judge(h);
    let mut undecided = 0;
    let acked: Vec<_> = h
        .erasures
        .iter()
        .filter(|e| e.meaning == Meaning::Acknowledged)
        .collect();
    // Online: a call sent after an acknowledgement answered the erased pseudonym.
    let by_pseudonym: HashMap<&str, Vec<&crate::history::erasures::Answered>> =
        h.answers.iter().fold(HashMap::new(), |mut m, a| {
            m.entry(a.pseudonym.as_str()).or_default().push(a);
            m
        });
    for e in &acked {
        for a in by_pseudonym.get(e.pseudonym.as_str()).into_iter().flatten() {
            if a.sent_micros > e.answered_micros {
                violations.push(format!(
                    "t={}s the pseudonym {}… of {} erased ({}) at t={}s was answered again by {:?} {}",
                    a.second,
                    short(&e.pseudonym),
                    redact(&e.original),
                    e.kind.operation(),
                    e.second,
                    a.path,
                    if a.original == e.original {
                        "for its original".to_owned()
                    } else {
                        format!("for {}", redact(&a.original))
                    }
                ));
            }
        }
    }
    // After settling: every replica, every path.
    match seen {
        None => undecided += h.erasures.len(),
        Some(seen) => {
            for (e, s) in h.erasures.iter().zip(&seen.erasures) {
                let (broken, unknown) = judge_erased(e.meaning, &e.pseudonym, s);
                undecided += unknown;
                for how in broken {
                    violations.push(format!(
                        "t={}s {} of {} ({:?}, answered {}): {how}",
                        e.second,
                        e.kind.operation(),
                        redact(&e.original),
                        e.meaning,
                        e.answer
                    ));
                }
            }
        }
    }
    let mut v = Verdict::from_violations(
        Property::ErasedStaysErased,
        violations,
        undecided,
        "erased mappings answered after their erasure",
    );
    let count = |m: Meaning| h.erasures.iter().filter(|e| e.meaning == m).count();
    v.summary.push_str(&format!(
        " ({} erasures: {} acknowledged, {} refused, {} unknown; {cache_note}; {MULTI_NOTE})",
        h.erasures.len(),
        count(Meaning::Acknowledged),
        count(Meaning::Refused),
        count(Meaning::Unknown)
    ));
    v
}

/// What verification found of one erasure: violations, undecided paths.
fn judge_erased(meaning: Meaning, pseudonym: &str, s: &SubjectSeen) -> (Vec<String>, usize) {
    let mut found = Vec::new();
    let mut errors = 0;
    let (mut resolved, mut gone) = (0, 0);
    for (i, r) in s.replicas.iter().enumerate() {
        for (path, seen) in r.lookups() {
            match seen {
                Seen::Value(o) if *o == s.original => {
                    resolved += 1;
                    if meaning == Meaning::Acknowledged {
                        found.push(format!(
                            "replica {i} {path} still answers the erased mapping"
                        ));
                    }
                }
                Seen::Value(o) => found.push(format!(
                    "replica {i} {path} resolves the erased pseudonym to another original {}",
                    redact(o)
                )),
                Seen::NotFound => gone += 1,
                Seen::Error(_) => errors += 1,
            }
        }
        match &r.recreated {
            Seen::Value(p) if p == pseudonym => {
                resolved += 1;
                if meaning == Meaning::Acknowledged {
                    found.push(format!(
                        "replica {i} Create of the original answers the erased pseudonym"
                    ));
                }
            }
            Seen::Value(_) => gone += 1,
            Seen::NotFound => found.push(format!("replica {i} Create of the original NOT_FOUND")),
            Seen::Error(_) => errors += 1,
        }
    }
    match meaning {
        Meaning::Acknowledged => {}
        // Unknown: all done or not at all, everywhere.
        Meaning::Unknown if resolved > 0 && gone > 0 => found.push(format!(
            "half done: {resolved} answers keep the mapping, {gone} have it erased"
        )),
        Meaning::Unknown => {}
        Meaning::Refused if gone > 0 => found.push(format!(
            "refused, yet {gone} answers have the mapping erased"
        )),
        Meaning::Refused => {}
    }
    (found, errors)
}

/// P2–P4 in the erasable namespace, until erasure.
pub fn erasable_subjects(h: &ErasureHistory, seen: Option<&Observed>) -> Verdict {
    let mut violations = Vec::new();
    let mut undecided = 0;
    let first = acknowledged(h);
    // When an erasure of each original was sent (not refused ones).
    let mut erased_at: HashMap<&str, u64> = HashMap::new();
    let mut ever_erased: HashSet<&str> = HashSet::new();
    for e in &h.erasures {
        ever_erased.insert(e.original.as_str());
        if e.meaning != Meaning::Refused {
            let at = erased_at
                .entry(e.original.as_str())
                .or_insert(e.sent_micros);
            *at = (*at).min(e.sent_micros);
        }
    }
    for a in &h.answers {
        let Some(&(p, _)) = first.get(a.original.as_str()) else {
            continue;
        };
        let raced_by_erasure = erased_at
            .get(a.original.as_str())
            .is_some_and(|&at| at <= a.sent_micros + RACE_MICROS);
        if a.pseudonym != p && !raced_by_erasure {
            violations.push(format!(
                "t={}s {} was answered {}… by {:?}, acknowledged as {}…",
                a.second,
                redact(&a.original),
                short(&a.pseudonym),
                a.path,
                short(p)
            ));
        }
    }
    // One pseudonym, one original (an anonymized one never reissued).
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for a in &h.answers {
        match owner.get(a.pseudonym.as_str()) {
            Some(o) if *o != a.original => violations.push(format!(
                "t={}s the pseudonym {}… was answered for {} and for {}",
                a.second,
                short(&a.pseudonym),
                redact(o),
                redact(&a.original)
            )),
            Some(_) => {}
            None => {
                owner.insert(&a.pseudonym, &a.original);
            }
        }
    }
    for n in &h.not_found {
        if !ever_erased.contains(n.original.as_str()) {
            violations.push(format!(
                "t={}s {} answered 404 by {:?}, never erased (lost write)",
                n.second,
                redact(&n.original),
                n.path
            ));
        }
    }
    match seen {
        None => undecided += 1,
        Some(seen) => {
            for s in &seen.live {
                for (i, r) in s.replicas.iter().enumerate() {
                    for (path, seen) in r.lookups() {
                        match seen {
                            Seen::Value(o) if *o == s.original => {}
                            Seen::Error(_) => undecided += 1,
                            _ => violations.push(format!(
                                "live subject {} does not resolve through replica {i} {path}",
                                redact(&s.original)
                            )),
                        }
                    }
                    match &r.recreated {
                        Seen::Value(p) if *p == s.pseudonym => {}
                        Seen::Error(_) => undecided += 1,
                        _ => violations.push(format!(
                            "live subject {} re-created otherwise through replica {i}",
                            redact(&s.original)
                        )),
                    }
                }
            }
        }
    }
    let mut v = Verdict::from_violations(
        Property::ErasableSubjects,
        violations,
        undecided,
        "subjects answered against P2-P4 before their erasure",
    );
    v.summary.push_str(&format!(
        " ({} subjects, {} answers)",
        first.len(),
        h.answers.len()
    ));
    v
}

/// What the answers to the requests a single-pseudonym namespace refuses
/// say: violations (one was accepted) and a note for the summary.
/// Older runs' probes of transaction Bundles, which the service refused
/// then, are not judged: transactions are now.
fn unsupported(h: &ErasureHistory) -> (Vec<String>, String) {
    let mut violations = Vec::new();
    let mut multiples = 0;
    for p in &h.unsupported {
        if p.what != Unsupported::Multiple {
            continue;
        }
        match p.status {
            Some(405) => multiples += 1,
            Some(s) if (200..300).contains(&s) => violations.push(format!(
                "t={}s $pseudonymize-multiple in the single-pseudonym erasable namespace was answered {s}, not 405",
                p.second
            )),
            _ => {}
        }
    }
    let note = format!("{MULTI_NOTE} (refusals seen: {multiples} $pseudonymize-multiple 405)");
    (violations, note)
}

/// Every batch entry answered as its model allows; every transaction
/// applied whole or not at all.
pub fn bundles(h: &ErasureHistory, seen: Option<&Observed>) -> Verdict {
    let (accepted, note) = unsupported(h);
    let (in_transactions, undecided, transactions) = super::transaction::judge(h, seen);
    let violations: Vec<String> = h
        .bundles
        .iter()
        .flat_map(|b| {
            b.wrong
                .iter()
                .map(move |w| format!("t={}s a Bundle of {}: {w}", b.second, b.entries))
        })
        .chain(accepted)
        .chain(in_transactions)
        .collect();
    let answered = h
        .bundles
        .iter()
        .filter(|b| b.meaning == Meaning::Acknowledged)
        .count();
    let entries: usize = h.bundles.iter().map(|b| b.entries).sum();
    let mut v = Verdict::from_violations(
        Property::Bundles,
        violations,
        undecided,
        "Bundles answered or applied against their model",
    );
    v.summary.push_str(&format!(
        " ({} batch Bundles, {answered} answered, {entries} entries; {transactions}; {note})",
        h.bundles.len()
    ));
    v
}

/// No vacuous pass: erasures acknowledged and Bundles answered, and none
/// refused for want of the right or the namespace's setting.
pub fn exercised(h: &ErasureHistory) -> Verdict {
    let acked = h
        .erasures
        .iter()
        .filter(|e| e.meaning == Meaning::Acknowledged)
        .count();
    let bundles = h
        .bundles
        .iter()
        .filter(|b| b.meaning == Meaning::Acknowledged)
        .count();
    let transactions = h
        .transactions
        .iter()
        .filter(|t| t.meaning == Meaning::Acknowledged)
        .count();
    let mut problems = Vec::new();
    if acked == 0 {
        problems.push("no erasure was acknowledged".to_owned());
    }
    if bundles == 0 {
        problems.push("no batch Bundle was answered".to_owned());
    }
    if transactions == 0 {
        problems.push("no transaction Bundle was acknowledged".to_owned());
    }
    problems.extend(h.cannot_erase.iter().cloned());
    Verdict::exercised(
        Property::ErasureExercised,
        problems,
        format!("{acked} erasures acknowledged, {bundles} batch and {transactions} transaction Bundles answered; {MULTI_NOTE}"),
        "erasure",
    )
}

/// Every verdict of this module.
pub fn check(h: &ErasureHistory, seen: Option<&Observed>) -> Vec<Verdict> {
    vec![
        erased_stays_erased(h, seen),
        erasable_subjects(h, seen),
        bundles(h, seen),
        exercised(h),
    ]
    .into_iter()
    .chain(super::multi::check(
        h.multi.as_ref(),
        seen.and_then(|s| s.multi.as_ref()),
    ))
    .collect()
}

/// The MII side's record of a run directory (`erasures.json`), if it has one.
pub fn read_history(dir: &std::path::Path) -> anyhow::Result<Option<ErasureHistory>> {
    let path = dir.join("erasures.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// P8 in the database itself: no instance holds an acknowledged erasure's
/// mapping (the erased pseudonym with its original). Not asked, or an
/// instance that could not be read, is unknown, never a pass.
pub fn in_database(h: Option<&ErasureHistory>, asked: Option<&[DatabaseRows]>) -> Verdict {
    let (Some(h), Some(asked)) = (h, asked) else {
        return Verdict {
            property: Property::ErasedInDatabase,
            validity: Validity::Unknown,
            summary: "the database was not asked about the erasures".into(),
            evidence: Vec::new(),
        };
    };
    let mut violations = Vec::new();
    let mut undecided = 0;
    let acked: HashMap<&str, &crate::history::erasures::Erasure> = h
        .erasures
        .iter()
        .filter(|e| e.meaning == Meaning::Acknowledged)
        .map(|e| (e.pseudonym.as_str(), e))
        .collect();
    for instance in asked {
        if instance.error.is_some() {
            undecided += 1;
        }
        for (p, stored) in &instance.rows {
            let held = acked
                .get(p.as_str())
                .filter(|e| crate::history::erasures::stands_for(stored, &e.original));
            if let Some(e) = held {
                violations.push(format!(
                    "t={}s {} of {} acknowledged, yet {} still holds the mapping",
                    e.second,
                    e.kind.operation(),
                    redact(&e.original),
                    instance.instance
                ));
            }
        }
    }
    if let Some(m) = &h.multi {
        violations.extend(super::multi::held_in_database(m, asked));
    }
    let mut v = Verdict::from_violations(
        Property::ErasedInDatabase,
        violations,
        undecided,
        "acknowledged erasures whose mapping a database instance still holds",
    );
    v.summary.push_str(&format!(
        " ({} instances asked about {} erasures)",
        asked.len(),
        h.erasures.len()
    ));
    v
}

/// Whether a run's mix (as `summary.json` keeps it) has erasures or Bundles.
pub fn in_mix(mix: &str) -> bool {
    crate::mix::Mix::parse(mix)
        .is_ok_and(|m| m.weight(Operation::Erase) > 0 || m.weight(Operation::Bundle) > 0)
}

/// A platform run: every scenario's window issued erasures and Bundles that
/// were answered (from the timeline's per-operation columns).
pub fn per_scenario(rows: &[Row], windows: &[Window]) -> Verdict {
    let mut missing = Vec::new();
    let mut counts = Vec::new();
    for w in windows {
        let start = w.start_seconds.floor().max(0.0) as usize;
        let end = (w.end_seconds.ceil().max(0.0) as usize).min(rows.len());
        let sum = |op: Operation| {
            rows.get(start..end)
                .into_iter()
                .flatten()
                .fold((0, 0), |(o, k), r| {
                    let c = r.ops[op.index()];
                    (o + c.offered, k + c.ok)
                })
        };
        let (erase_offered, erase_ok) = sum(Operation::Erase);
        let (bundle_offered, bundle_ok) = sum(Operation::Bundle);
        counts.push(format!(
            "{}: {erase_ok}/{erase_offered} erasures, {bundle_ok}/{bundle_offered} Bundles answered",
            w.scenario
        ));
        if erase_ok == 0 || bundle_ok == 0 {
            missing.push(format!(
                "{}: {erase_offered} erasures and {bundle_offered} Bundles issued, {erase_ok} and {bundle_ok} answered",
                w.scenario
            ));
        }
    }
    Verdict {
        property: Property::ErasureInEveryScenario,
        validity: if missing.is_empty() && !windows.is_empty() {
            Validity::Valid
        } else {
            Validity::Invalid
        },
        summary: if missing.is_empty() {
            format!(
                "every scenario erased and sent Bundles: {}",
                counts.join("; ")
            )
        } else {
            format!(
                "{} scenarios without an answered erasure or Bundle (a hidden weakness is not a pass)",
                missing.len()
            )
        },
        evidence: missing,
    }
}

#[cfg(test)]
#[path = "erasure_tests.rs"]
mod tests;
