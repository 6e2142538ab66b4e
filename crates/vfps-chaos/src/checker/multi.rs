//! Multi-pseudonym namespaces through the faults, from the run's record
//! (`ErasureHistory::multi`) and what verification asked every replica
//! (`Observed::multi`):
//!
//! - **multi-pseudonyms**: no pseudonym is acknowledged or answered for two
//!   originals; a `count` 0 sent after a create's acknowledgement (and before
//!   any erasure of the original was sent) answers every pseudonym that
//!   create acknowledged; a `$de-pseudonymize` during the load answers the
//!   pseudonym's own original (a 404 only once an erasure of it was sent);
//!   after settling, on every replica, each
//!   acknowledged pseudonym of a never-erased original resolves
//!   (`$de-pseudonymize`) to its own original and `count` 0 answers all of
//!   them.
//! - **P8 for multi originals**: from an erasure's acknowledgement on, no
//!   call sent after it answers any of the original's pseudonyms (for it or
//!   anyone), and after settling no replica resolves one or answers one to
//!   `count` 0; an erasure whose answer was lost is found fully done or not
//!   at all, a refused one not at all. "The original's pseudonyms" are those
//!   acknowledged before the erasure was sent (a create still in flight may
//!   rightly have made new ones after it).
//! - **guard-multi-exercised**: a create acknowledged, a `count` 0 answered,
//!   an erasure acknowledged, and verification asked about them; otherwise
//!   the run could not prove the properties above and fails.

use std::collections::{BTreeMap, HashMap};

use super::{short, Property, Verdict};
use crate::{
    history::{
        erasures::{DatabaseRows, Meaning},
        multi::{Found, MultiErasure, MultiHistory, Resolved},
        verified::{MultiSeen, OriginalSeen, Seen},
    },
    redact,
};

/// The erasure that decides what an original should be: acknowledged over
/// unknown over refused, the earliest of each.
fn erasures(h: &MultiHistory) -> HashMap<&str, &MultiErasure> {
    let rank = |m: Meaning| match m {
        Meaning::Acknowledged => 0,
        Meaning::Unknown => 1,
        Meaning::Refused => 2,
    };
    let mut by: HashMap<&str, &MultiErasure> = HashMap::new();
    for e in &h.erasures {
        let keep = by
            .get(e.original.as_str())
            .is_some_and(|k| (rank(k.meaning), k.sent_micros) <= (rank(e.meaning), e.sent_micros));
        if !keep {
            by.insert(&e.original, e);
        }
    }
    by
}

/// When an erasure of the original that may have happened (not refused)
/// was first sent.
fn erasure_sent(h: &MultiHistory) -> HashMap<&str, u64> {
    let mut at: HashMap<&str, u64> = HashMap::new();
    for e in h.erasures.iter().filter(|e| e.meaning != Meaning::Refused) {
        let t = at.entry(e.original.as_str()).or_insert(e.sent_micros);
        *t = (*t).min(e.sent_micros);
    }
    at
}

/// The pseudonyms of `original` acknowledged before `before` (µs).
fn acknowledged_before<'a>(h: &'a MultiHistory, original: &str, before: u64) -> Vec<&'a str> {
    h.creates
        .iter()
        .filter(|c| {
            c.meaning == Meaning::Acknowledged
                && c.original == original
                && c.answered_micros < before
        })
        .flat_map(|c| c.pseudonyms.iter().map(String::as_str))
        .collect()
}

/// The pseudonyms every erasure of a multi original (any answer) was to
/// erase: (pseudonym, original, the erasure deciding it).
pub fn erased_pseudonyms(h: &MultiHistory) -> Vec<(&str, &str, &MultiErasure)> {
    let mut out: Vec<_> = erasures(h)
        .into_values()
        .flat_map(|e| {
            acknowledged_before(h, &e.original, e.sent_micros)
                .into_iter()
                .map(move |p| (p, e.original.as_str(), e))
        })
        .collect();
    out.sort_by_key(|(p, _, _)| *p);
    out
}

/// P8 in the database for multi originals: every acknowledged erasure's
/// pseudonym a database instance still holds with its original.
pub fn held_in_database(h: &MultiHistory, asked: &[DatabaseRows]) -> Vec<String> {
    let erased: HashMap<&str, (&str, &MultiErasure)> = erased_pseudonyms(h)
        .into_iter()
        .filter(|(_, _, e)| e.meaning == Meaning::Acknowledged)
        .map(|(p, o, e)| (p, (o, e)))
        .collect();
    let mut found = Vec::new();
    for instance in asked {
        for (p, stored) in &instance.rows {
            let held = erased
                .get(p.as_str())
                .filter(|(o, _)| crate::history::erasures::stands_for(stored, o));
            if let Some((_, e)) = held {
                found.push(format!(
                    "t={}s {} of the multi original {} acknowledged, yet {} still holds {}… with it",
                    e.second,
                    e.kind.operation(),
                    redact(&e.original),
                    instance.instance,
                    short(p)
                ));
            }
        }
    }
    found
}

/// Every acknowledged pseudonym resolves to its own original, none is
/// shared, `count` 0 answers every one.
pub fn pseudonyms(h: &MultiHistory, seen: Option<&MultiSeen>) -> Verdict {
    let mut violations = Vec::new();
    let mut undecided = 0;
    // One pseudonym, one original: acknowledged by creates, answered by reads.
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let answers = h
        .creates
        .iter()
        .filter(|c| c.meaning == Meaning::Acknowledged)
        .flat_map(|c| c.pseudonyms.iter().map(move |p| (c.second, &c.original, p)))
        .chain(h.reads.iter().flat_map(|r| match &r.found {
            Found::Pseudonyms(ps) => ps.iter().map(|p| (r.second, &r.original, p)).collect(),
            _ => Vec::new(),
        }));
    for (second, o, p) in answers {
        match owner.get(p.as_str()) {
            Some(first) if *first != o.as_str() => violations.push(format!(
                "t={second}s the pseudonym {}… was answered for {} and for {}",
                short(p),
                redact(first),
                redact(o)
            )),
            Some(_) => {}
            None => {
                owner.insert(p, o);
            }
        }
    }
    // Reads during the load: every pseudonym acknowledged before they were sent.
    let erased_at = erasure_sent(h);
    for r in &h.reads {
        if erased_at
            .get(r.original.as_str())
            .is_some_and(|&at| at <= r.answered_micros)
        {
            continue;
        }
        let expected = acknowledged_before(h, &r.original, r.sent_micros);
        match &r.found {
            Found::Pseudonyms(ps) => {
                let missing = expected.iter().filter(|p| !ps.iter().any(|q| q == *p)).count();
                if missing > 0 {
                    violations.push(format!(
                        "t={}s count 0 of {} left out {missing} of its {} acknowledged pseudonyms",
                        r.second,
                        redact(&r.original),
                        expected.len()
                    ));
                }
            }
            Found::NotFound if !expected.is_empty() => violations.push(format!(
                "t={}s count 0 of {} answered 404, {} pseudonyms acknowledged, never erased (lost writes)",
                r.second,
                redact(&r.original),
                expected.len()
            )),
            Found::NotFound | Found::NoAnswer(_) => {}
        }
    }
    // Reverse lookups during the load: the pseudonym's own original.
    for r in &h.resolves {
        match &r.resolved {
            Resolved::Original(o) if *o == r.original => {}
            Resolved::Original(o) => violations.push(format!(
                "t={}s {}… of {} was resolved to another original {}",
                r.second,
                short(&r.pseudonym),
                redact(&r.original),
                redact(o)
            )),
            Resolved::NotFound
                if erased_at
                    .get(r.original.as_str())
                    .is_none_or(|&at| at > r.answered_micros) =>
            {
                violations.push(format!(
                    "t={}s {}… of {} was not found, never erased (a lost write)",
                    r.second,
                    short(&r.pseudonym),
                    redact(&r.original)
                ))
            }
            Resolved::NotFound | Resolved::NoAnswer(_) => {}
        }
    }
    // After settling, the originals no erasure may have touched.
    match seen {
        None => undecided += 1,
        Some(seen) => {
            let erased = erasures(h);
            for s in &seen.originals {
                let touched = erased
                    .get(s.original.as_str())
                    .is_some_and(|e| e.meaning != Meaning::Refused);
                if !touched {
                    undecided += judge_live(s, &mut violations);
                }
            }
        }
    }
    let acked = h.acknowledged();
    let mut v = Verdict::from_violations(
        Property::MultiPseudonyms,
        violations,
        undecided,
        "multi-pseudonym answers against their originals",
    );
    v.summary.push_str(&format!(
        " ({} originals with {} acknowledged pseudonyms; {} creates, {} count-0 reads, {} reverse lookups; {} originals verified)",
        acked.len(),
        acked.values().map(Vec::len).sum::<usize>(),
        h.creates.len(),
        h.reads.len(),
        h.resolves.len(),
        seen.map_or(0, |s| s.originals.len())
    ));
    v
}

/// A never-erased original after settling: undecided answers.
fn judge_live(s: &OriginalSeen, violations: &mut Vec<String>) -> usize {
    let mut undecided = 0;
    for (i, r) in s.replicas.iter().enumerate() {
        for (p, seen) in s.pseudonyms.iter().zip(&r.resolved) {
            match seen {
                Seen::Value(o) if *o == s.original => {}
                Seen::Value(o) => violations.push(format!(
                    "replica {i} resolves {}… of {} to another original {}",
                    short(p),
                    redact(&s.original),
                    redact(o)
                )),
                Seen::NotFound => violations.push(format!(
                    "replica {i} does not resolve {}… of {} (never erased)",
                    short(p),
                    redact(&s.original)
                )),
                Seen::Error(_) => undecided += 1,
            }
        }
        match &r.all {
            Found::Pseudonyms(ps) => {
                let missing = s.pseudonyms.iter().filter(|p| !ps.contains(p)).count();
                if missing > 0 {
                    violations.push(format!(
                        "replica {i} count 0 of {} leaves out {missing} of its {} acknowledged pseudonyms",
                        redact(&s.original),
                        s.pseudonyms.len()
                    ));
                }
            }
            Found::NotFound => violations.push(format!(
                "replica {i} count 0 of {} answers 404 (never erased)",
                redact(&s.original)
            )),
            Found::NoAnswer(_) => undecided += 1,
        }
    }
    undecided
}

/// P8 for multi originals, during the load and after settling.
pub fn erased_stays_erased(h: &MultiHistory, seen: Option<&MultiSeen>) -> Verdict {
    let mut violations = Vec::new();
    let mut undecided = 0;
    // Online: a call sent after an acknowledgement answered an erased pseudonym.
    let mut answered_at: HashMap<&str, Vec<(u64, u64, &str)>> = HashMap::new();
    for c in h
        .creates
        .iter()
        .filter(|c| c.meaning == Meaning::Acknowledged)
    {
        for p in &c.pseudonyms {
            answered_at
                .entry(p)
                .or_default()
                .push((c.second, c.sent_micros, &c.original));
        }
    }
    for r in &h.reads {
        if let Found::Pseudonyms(ps) = &r.found {
            for p in ps {
                answered_at
                    .entry(p)
                    .or_default()
                    .push((r.second, r.sent_micros, &r.original));
            }
        }
    }
    for r in &h.resolves {
        if let Resolved::Original(o) = &r.resolved {
            answered_at
                .entry(&r.pseudonym)
                .or_default()
                .push((r.second, r.sent_micros, o));
        }
    }
    let acked: Vec<&MultiErasure> = h
        .erasures
        .iter()
        .filter(|e| e.meaning == Meaning::Acknowledged)
        .collect();
    for e in &acked {
        for p in acknowledged_before(h, &e.original, e.sent_micros) {
            for (second, sent, o) in answered_at.get(p).into_iter().flatten() {
                if *sent > e.answered_micros {
                    violations.push(format!(
                        "t={second}s the pseudonym {}… of {} erased ({}) at t={}s was answered again {}",
                        short(p),
                        redact(&e.original),
                        e.kind.operation(),
                        e.second,
                        if *o == e.original {
                            "for its original".to_owned()
                        } else {
                            format!("for {}", redact(o))
                        }
                    ));
                }
            }
        }
    }
    // After settling: every verified original an erasure may have touched.
    match seen {
        None => undecided += h.erasures.len().min(1),
        Some(seen) => {
            let by = erasures(h);
            for s in &seen.originals {
                let Some(e) = by.get(s.original.as_str()) else {
                    continue;
                };
                let erased = acknowledged_before(h, &e.original, e.sent_micros);
                undecided += judge_erased(e, &erased, s, &mut violations);
            }
        }
    }
    let mut v = Verdict::from_violations(
        Property::MultiErasedStaysErased,
        violations,
        undecided,
        "erased multi pseudonyms answered after their erasure",
    );
    let count = |m: Meaning| h.erasures.iter().filter(|e| e.meaning == m).count();
    v.summary.push_str(&format!(
        " ({} erasures of multi originals: {} acknowledged, {} refused, {} unknown)",
        h.erasures.len(),
        count(Meaning::Acknowledged),
        count(Meaning::Refused),
        count(Meaning::Unknown)
    ));
    v
}

/// An original an erasure was sent for, after settling: undecided answers.
fn judge_erased(
    e: &MultiErasure,
    erased: &[&str],
    s: &OriginalSeen,
    violations: &mut Vec<String>,
) -> usize {
    let mut undecided = 0;
    let (mut kept, mut gone) = (0, 0);
    let what = format!(
        "t={}s {} of {} ({:?}, answered {})",
        e.second,
        e.kind.operation(),
        redact(&e.original),
        e.meaning,
        e.answer
    );
    for (i, r) in s.replicas.iter().enumerate() {
        for (p, seen) in s.pseudonyms.iter().zip(&r.resolved) {
            if !erased.contains(&p.as_str()) {
                continue;
            }
            match seen {
                Seen::Value(o) if *o == s.original => {
                    kept += 1;
                    if e.meaning == Meaning::Acknowledged {
                        violations
                            .push(format!("{what}: replica {i} still resolves {}…", short(p)));
                    }
                }
                Seen::Value(o) => violations.push(format!(
                    "{what}: replica {i} resolves {}… to another original {}",
                    short(p),
                    redact(o)
                )),
                Seen::NotFound => gone += 1,
                Seen::Error(_) => undecided += 1,
            }
        }
        match &r.all {
            Found::Pseudonyms(ps) => {
                let still = ps.iter().filter(|p| erased.contains(&p.as_str())).count();
                if still > 0 {
                    kept += 1;
                    if e.meaning == Meaning::Acknowledged {
                        violations.push(format!(
                            "{what}: replica {i} count 0 still answers {still} erased pseudonyms"
                        ));
                    }
                } else {
                    gone += 1;
                }
            }
            Found::NotFound => gone += 1,
            Found::NoAnswer(_) => undecided += 1,
        }
    }
    match e.meaning {
        Meaning::Acknowledged => {}
        Meaning::Unknown if kept > 0 && gone > 0 => violations.push(format!(
            "{what}: half done, {kept} answers keep the pseudonyms, {gone} have them erased"
        )),
        Meaning::Unknown => {}
        Meaning::Refused if gone > 0 => violations.push(format!(
            "{what}: refused, yet {gone} answers have the pseudonyms erased"
        )),
        Meaning::Refused => {}
    }
    undecided
}

/// No vacuous pass: a create acknowledged, a `count` 0 answered, an erasure
/// acknowledged, and verification asked about them.
pub fn exercised(h: &MultiHistory, seen: Option<&MultiSeen>) -> Verdict {
    let creates = h
        .creates
        .iter()
        .filter(|c| c.meaning == Meaning::Acknowledged)
        .count();
    let reads = h
        .reads
        .iter()
        .filter(|r| matches!(r.found, Found::Pseudonyms(_)))
        .count();
    let erasures = h
        .erasures
        .iter()
        .filter(|e| e.meaning == Meaning::Acknowledged)
        .count();
    let mut problems = Vec::new();
    if creates == 0 {
        problems.push("no $pseudonymize-multiple create was acknowledged".to_owned());
    }
    if reads == 0 {
        problems.push("no $pseudonymize-multiple count 0 was answered".to_owned());
    }
    if erasures == 0 {
        problems.push("no erasure of a multi original was acknowledged".to_owned());
    }
    match seen {
        None => problems.push("verification did not ask about the multi originals".to_owned()),
        Some(s) if creates > 0 && s.originals.is_empty() => {
            problems.push("verification asked about no multi original".to_owned())
        }
        Some(_) => {}
    }
    Verdict::exercised(
        Property::MultiExercised,
        problems,
        format!("{creates} multi creates acknowledged, {reads} count-0 reads answered, {erasures} erasures of multi originals acknowledged"),
        "multi-pseudonym namespaces",
    )
}

/// Every verdict of this module; none for a run from before multi-pseudonym
/// namespaces (its record has no multi part).
pub fn check(h: Option<&MultiHistory>, seen: Option<&MultiSeen>) -> Vec<Verdict> {
    let Some(h) = h else {
        return Vec::new();
    };
    vec![
        pseudonyms(h, seen),
        erased_stays_erased(h, seen),
        exercised(h, seen),
    ]
}

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
