//! P10 — pseudonyms carry no information (docs/privacy.md):
//!
//! - **time and replica**: for every random method, no position of the
//!   pseudonyms has a symbol distribution that depends on when or where they
//!   were made: Pearson's chi-square per position, the ledger's acknowledged
//!   pseudonyms early against late, the probe's early round against its late
//!   one and replica against replica, Bonferroni-corrected over every test;
//! - **order**: within every job output, Bundle and List page of sequential
//!   originals, the rank correlation between the originals and the
//!   pseudonyms (or the listing's order) is within chance: Kendall's τ,
//!   exact up to 100 items, Bonferroni-corrected over every sample;
//! - **siblings**: the pseudonyms of one original in a multi-pseudonym
//!   namespace share no longer common prefix, and no more often the time a
//!   `read` token is shown, than strangers made about as close in time.
//!
//! The samples come from the run ([`Observed`], `privacy.json`): the
//! ledger, the workload's jobs and Bundles, and the probe of
//! `workload::privacy`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{
    stats::{
        chi_square_independence, greater_mean_p, greater_share_p, kendall_p, kendall_s,
        kendall_tau_bound,
    },
    Property, Validity, Verdict,
};
use crate::history::{Entry, Status};

/// The chance of any false alarm of one verdict: its tests share it
/// (Bonferroni). The leaks it is there for stand hundreds of orders of
/// magnitude beyond it.
pub const FAMILY_ALPHA: f64 = 1e-4;

/// Fewer acknowledged pseudonyms than this in the ledger: no early/late test
/// of it (the probe's still stand).
const MIN_LEDGER: usize = 400;

/// Fewer sibling pairs than this: the sibling checks are undecided.
const MIN_SIBLING_PAIRS: usize = 20;

/// The probe's rounds: before the load window and after verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Round {
    Early,
    Late,
}

/// Pseudonyms the probe made in a namespace of one random method, through
/// one replica, in one round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    pub method: String,
    pub round: Round,
    pub replica: usize,
    pub pseudonyms: Vec<String>,
}

/// What kind of ordered sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderKind {
    Job,
    Bundle,
    ListPage,
}

/// One ordered sample of sequential originals: Kendall's S of their
/// pseudonyms (or listed positions) against their order, over `n`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub kind: OrderKind,
    /// Which one, for people (a job's id, a Bundle's second).
    pub what: String,
    pub n: usize,
    pub s: i64,
}

impl Order {
    /// From `(rank of the original, pseudonym or position)`: distinct ranks.
    pub fn of<B: Ord + Clone>(kind: OrderKind, what: String, mut pairs: Vec<(u64, B)>) -> Self {
        let n = pairs.len();
        let s = kendall_s(&mut pairs);
        Self { kind, what, n, s }
    }

    /// From `(original, pseudonym or position)`: the originals ranked as
    /// text (the harness's sequential originals are zero-padded), each once.
    pub fn of_originals<B: Ord + Clone>(
        kind: OrderKind,
        what: String,
        pairs: Vec<(String, B)>,
    ) -> Self {
        let mut seen = std::collections::HashSet::new();
        let mut pairs: Vec<(String, B)> = pairs
            .into_iter()
            .filter(|(o, _)| seen.insert(o.clone()))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let ranked = pairs
            .into_iter()
            .enumerate()
            .map(|(i, (_, b))| (i as u64, b))
            .collect();
        Self::of(kind, what, ranked)
    }

    fn tau(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        self.s as f64 / (self.n * (self.n - 1) / 2) as f64
    }
}

/// Two pseudonyms of a multi-pseudonym namespace, and the times List showed
/// for them (microseconds; `None` where one was not listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairSeen {
    pub a: String,
    pub b: String,
    pub shown: Option<(i64, i64)>,
}

/// Sibling pairs (one per acknowledged create of several pseudonyms) and
/// stranger pairs (different originals, acknowledged within a second).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Siblings {
    pub siblings: Vec<PairSeen>,
    pub strangers: Vec<PairSeen>,
}

/// What P10 judges besides the ledger (`privacy.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// The random methods the probe was to cover.
    pub methods: Vec<String>,
    pub made: Vec<Made>,
    pub orders: Vec<Order>,
    pub siblings: Siblings,
    /// What the probe could not do, for people (a refused call, jobs off).
    pub notes: Vec<String>,
}

/// One chi-square test of one position.
struct SymbolTest {
    what: String,
    position: usize,
    stat: f64,
    df: usize,
    p: f64,
}

/// Per position of `groups` (each a list of pseudonyms of one length), a
/// test of the groups' symbol distributions against each other.
fn position_tests(what: &str, groups: &[Vec<&str>]) -> Vec<SymbolTest> {
    let width = groups
        .iter()
        .flat_map(|g| g.iter().map(|p| p.chars().count()))
        .max()
        .unwrap_or(0);
    let mut tests = Vec::new();
    for position in 0..width {
        let rows: Vec<HashMap<char, u64>> = groups
            .iter()
            .map(|g| {
                let mut counts = HashMap::new();
                for p in g {
                    if let Some(c) = p.chars().nth(position) {
                        *counts.entry(c).or_insert(0) += 1;
                    }
                }
                counts
            })
            .collect();
        if let Some((stat, df, p)) = chi_square_independence(&rows) {
            tests.push(SymbolTest {
                what: what.to_owned(),
                position,
                stat,
                df,
                p,
            });
        }
    }
    tests
}

/// The ledger's acknowledged pseudonyms, early half against late half by
/// the time they were acknowledged.
fn ledger_halves(ledger: &[Entry]) -> Option<[Vec<&str>; 2]> {
    let mut acked: Vec<(u64, &str)> = ledger
        .iter()
        .filter(|e| e.status == Status::Ok)
        .filter_map(|e| Some((e.acked_unix_ms?, e.pseudonym.as_deref()?)))
        .collect();
    if acked.len() < MIN_LEDGER {
        return None;
    }
    acked.sort_unstable();
    let half = acked.len() / 2;
    Some([
        acked[..half].iter().map(|(_, p)| *p).collect(),
        acked[half..].iter().map(|(_, p)| *p).collect(),
    ])
}

fn format_p(p: f64) -> String {
    if p == 0.0 {
        "< 1e-300".into()
    } else {
        format!("{p:.1e}")
    }
}

/// Time and replica: every position of every random method.
pub fn time_and_replica(ledger: &[Entry], observed: Option<&Observed>) -> Verdict {
    let property = Property::PseudonymsTimeless;
    let mut tests = Vec::new();
    let mut sources = Vec::new();
    if let Some([early, late]) = ledger_halves(ledger) {
        sources.push(format!(
            "the ledger's {} acknowledged",
            early.len() + late.len()
        ));
        tests.extend(position_tests(
            "the ledger, acknowledged early vs late",
            &[early, late],
        ));
    }
    let mut missing = Vec::new();
    if let Some(o) = observed {
        for method in &o.methods {
            let of: Vec<&Made> = o.made.iter().filter(|m| &m.method == method).collect();
            let count: usize = of.iter().map(|m| m.pseudonyms.len()).sum();
            let rounds: Vec<Vec<&str>> = [Round::Early, Round::Late]
                .iter()
                .map(|r| {
                    of.iter()
                        .filter(|m| m.round == *r)
                        .flat_map(|m| m.pseudonyms.iter().map(String::as_str))
                        .collect()
                })
                .collect();
            if rounds.iter().any(Vec::is_empty) {
                missing.push(format!("{method} (a round without pseudonyms)"));
                continue;
            }
            sources.push(format!("{count} {method}"));
            tests.extend(position_tests(
                &format!("{method}, early vs late round"),
                &rounds,
            ));
            let mut replicas: Vec<usize> = of.iter().map(|m| m.replica).collect();
            replicas.sort_unstable();
            replicas.dedup();
            if replicas.len() > 1 {
                let groups: Vec<Vec<&str>> = replicas
                    .iter()
                    .map(|r| {
                        of.iter()
                            .filter(|m| m.replica == *r)
                            .flat_map(|m| m.pseudonyms.iter().map(String::as_str))
                            .collect()
                    })
                    .collect();
                tests.extend(position_tests(
                    &format!("{method}, replica vs replica"),
                    &groups,
                ));
            }
        }
    }
    if tests.is_empty() {
        return Verdict {
            property,
            validity: Validity::Unknown,
            summary: "no pseudonyms to test (no probe, too small a ledger)".into(),
            evidence: Vec::new(),
        };
    }
    let threshold = FAMILY_ALPHA / tests.len() as f64;
    let smallest = tests
        .iter()
        .min_by(|a, b| a.p.total_cmp(&b.p))
        .map(|t| format!("{} position {} (p {})", t.what, t.position, format_p(t.p)))
        .unwrap_or_default();
    let mut evidence: Vec<String> = tests
        .iter()
        .filter(|t| t.p < threshold)
        .map(|t| {
            format!(
                "{}: position {} depends on it (chi-square {:.1}, df {}, p {} < {})",
                t.what,
                t.position,
                t.stat,
                t.df,
                format_p(t.p),
                format_p(threshold)
            )
        })
        .collect();
    let found = evidence.len();
    evidence.extend(missing.iter().map(|m| format!("not tested: {m}")));
    let validity = if found > 0 {
        Validity::Invalid
    } else if !missing.is_empty() {
        Validity::Unknown
    } else {
        Validity::Valid
    };
    Verdict {
        property,
        validity,
        summary: format!(
            "{found} of {} position tests beyond chance over {}; smallest: {smallest}; threshold {}",
            tests.len(),
            sources.join(", "),
            format_p(threshold)
        ),
        evidence,
    }
}

/// Order: every job output, Bundle and List page within chance.
pub fn order(observed: Option<&Observed>) -> Verdict {
    let property = Property::PseudonymsUnordered;
    let samples: Vec<&Order> = observed
        .map(|o| o.orders.iter().filter(|s| s.n >= 2).collect())
        .unwrap_or_default();
    let count = |kind: OrderKind| samples.iter().filter(|s| s.kind == kind).count();
    let (jobs, bundles, pages) = (
        count(OrderKind::Job),
        count(OrderKind::Bundle),
        count(OrderKind::ListPage),
    );
    if bundles == 0 || pages == 0 {
        return Verdict {
            property,
            validity: Validity::Unknown,
            summary: format!(
                "too few ordered samples: jobs {jobs}, Bundles {bundles}, List pages {pages} \
                 (Bundles and List pages needed)"
            ),
            evidence: observed.map(|o| o.notes.clone()).unwrap_or_default(),
        };
    }
    let threshold = FAMILY_ALPHA / samples.len() as f64;
    let mut cache = HashMap::new();
    let judged: Vec<(&Order, f64)> = samples
        .iter()
        .map(|s| (*s, kendall_p(s.n, s.s, &mut cache)))
        .collect();
    let strongest = judged
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, p)| {
            format!(
                "tau {:.3} over {} ({}, bound {:.3}, p {})",
                s.tau(),
                s.n,
                s.what,
                kendall_tau_bound(s.n, threshold),
                format_p(*p)
            )
        })
        .unwrap_or_default();
    let evidence: Vec<String> = judged
        .iter()
        .filter(|(_, p)| *p < threshold)
        .map(|(s, p)| {
            format!(
                "{}: tau {:.3} over {} sequential originals, beyond chance (p {} < {})",
                s.what,
                s.tau(),
                s.n,
                format_p(*p),
                format_p(threshold)
            )
        })
        .collect();
    Verdict {
        property,
        validity: if evidence.is_empty() {
            Validity::Valid
        } else {
            Validity::Invalid
        },
        summary: format!(
            "{} of {} samples ordered beyond chance (jobs {jobs}, Bundles {bundles}, List pages \
             {pages}); the least likely: {strongest}; threshold {}",
            evidence.len(),
            samples.len(),
            format_p(threshold)
        ),
        evidence,
    }
}

/// The length of the common prefix of two pseudonyms, in characters.
fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// Siblings: no longer common prefix, no more often the same shown time,
/// than strangers.
pub fn siblings(observed: Option<&Observed>) -> Verdict {
    let property = Property::SiblingsUnlinked;
    let Some(s) = observed.map(|o| &o.siblings) else {
        return Verdict {
            property,
            validity: Validity::Unknown,
            summary: "no multi-pseudonym siblings observed".into(),
            evidence: Vec::new(),
        };
    };
    if s.siblings.len() < MIN_SIBLING_PAIRS || s.strangers.len() < MIN_SIBLING_PAIRS {
        return Verdict {
            property,
            validity: Validity::Unknown,
            summary: format!(
                "too few pairs: {} sibling, {} stranger (at least {MIN_SIBLING_PAIRS} each)",
                s.siblings.len(),
                s.strangers.len()
            ),
            evidence: Vec::new(),
        };
    }
    let threshold = FAMILY_ALPHA / 2.0;
    let prefixes = |pairs: &[PairSeen]| -> Vec<f64> {
        pairs
            .iter()
            .map(|p| common_prefix(&p.a, &p.b) as f64)
            .collect()
    };
    let (sp, rp) = (prefixes(&s.siblings), prefixes(&s.strangers));
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let prefix_p = greater_mean_p(&sp, &rp);
    let same_time = |pairs: &[PairSeen]| -> (usize, usize) {
        let shown: Vec<(i64, i64)> = pairs.iter().filter_map(|p| p.shown).collect();
        (shown.iter().filter(|(a, b)| a == b).count(), shown.len())
    };
    let ((s_same, s_shown), (r_same, r_shown)) = (same_time(&s.siblings), same_time(&s.strangers));
    let time_p = greater_share_p(s_same, s_shown, r_same, r_shown);
    let mut evidence = Vec::new();
    if prefix_p < threshold {
        evidence.push(format!(
            "siblings share longer prefixes: {:.2} characters on average against strangers' {:.2} \
             (p {} < {})",
            mean(&sp),
            mean(&rp),
            format_p(prefix_p),
            format_p(threshold)
        ));
    }
    if time_p < threshold {
        evidence.push(format!(
            "siblings are shown the same time more often: {s_same} of {s_shown} against \
             strangers' {r_same} of {r_shown} (p {} < {})",
            format_p(time_p),
            format_p(threshold)
        ));
    }
    let undecided = s_shown < MIN_SIBLING_PAIRS || r_shown < MIN_SIBLING_PAIRS;
    let validity = if !evidence.is_empty() {
        Validity::Invalid
    } else if undecided {
        Validity::Unknown
    } else {
        Validity::Valid
    };
    Verdict {
        property,
        validity,
        summary: format!(
            "common prefix: siblings {:.2}, strangers {:.2} characters (p {}); same shown time: \
             siblings {s_same}/{s_shown}, strangers {r_same}/{r_shown} (p {}); {} sibling and {} \
             stranger pairs",
            mean(&sp),
            mean(&rp),
            format_p(prefix_p),
            format_p(time_p),
            s.siblings.len(),
            s.strangers.len()
        ),
        evidence,
    }
}

/// P10's three verdicts with the probe's samples; without them (a run
/// without the probe), the ledger's early/late test alone, when the ledger
/// is large enough for it.
pub fn check(ledger: &[Entry], observed: Option<&Observed>) -> Vec<Verdict> {
    match observed {
        Some(o) => vec![
            time_and_replica(ledger, Some(o)),
            order(Some(o)),
            siblings(Some(o)),
        ],
        None if ledger_halves(ledger).is_some() => vec![time_and_replica(ledger, None)],
        None => Vec::new(),
    }
}

#[cfg(test)]
#[path = "privacy_tests.rs"]
mod tests;
