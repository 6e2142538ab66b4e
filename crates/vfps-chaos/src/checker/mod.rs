//! Checkers: pure functions from a run's history (and verification
//! observations) to verdicts — one checker per property, composed (Jepsen's
//! `checker/compose`). Each returns valid, invalid or unknown with its evidence.
//!
//! # Layout
//! - this file: [`Property`], [`Verdict`], the [`History`] a load run's checkers
//!   read, and [`compose`].
//! - [`availability`]: P1 — longest outage and unavailable seconds, over the
//!   whole run and per scenario.
//! - [`stability`]: P2 — acknowledged pairs re-create to the same pseudonym.
//! - [`reverse_lookup`]: P3 — acknowledged pseudonyms resolve to their original.
//! - [`subjects`]: P4 — one subject, one pseudonym (indeterminate Creates too).
//! - [`innocent`]: P5 — no well-formed call answered with a code no model allows.
//! - [`lifecycle`]: P6 — side namespaces' pairs resolve until their delete is
//!   acknowledged, and not after.
//! - [`restore`]: P9 — the restore drill: what was acknowledged before the
//!   restore point kept with its pseudonym, no pseudonym issued twice, RPO and
//!   RTO within the scenario's budgets.
//! - [`jobs`]: P7 — CSV jobs finish, row for row, with the API's pseudonyms,
//!   round-trip byte for byte, and resume where they were checkpointed.
//! - [`ui`]: the web UI through every scenario (the browser probe) — P1's
//!   budgets, the user kept signed in, results the API agrees with.
//! - [`inputs`]: invalid input gets its documented code; List pages keep
//!   originals out and list only pseudonyms that resolve.
//! - [`margins`]: every budgeted figure with its budget and what is left;
//!   a thin margin is a warning.
//! - [`guards`]: the run served traffic, recorded every acknowledged Create, and
//!   acknowledged every operation of its mix (no vacuous pass).
//! - [`cost`]: the harness's own CPU as a caveat on the verdict.
//! - [`erasure`]: P8 (erased stays erased), P2–P4 until erasure, batch
//!   Bundles, and the guards that the run erased at all and in every scenario.
//! - [`multi`]: multi-pseudonym namespaces — pseudonyms resolve to their own
//!   original, are not shared, `count` 0 answers them all, erased ones stay
//!   erased — and the guard that the run made, read and erased them.
//! - [`privacy`]: P10 — pseudonyms carry no time, replica, order or
//!   sibling (with [`stats`], the tests it judges with).
//! - [`at_rest`]: P11 — none of the run's originals in any byte at rest.
//! - [`chaos`]: the scenarios all ran, without error, inside the load window;
//!   every fault window has a verified write; one-node commits lost nothing.

use serde::{Deserialize, Serialize};

use crate::{
    history::{Broken, CallsReport, Entry, Row},
    operation::Operation,
};

pub mod at_rest;
pub mod availability;
pub mod cache_check;
pub mod chaos;
pub mod cost;
pub mod erasure;
pub mod guards;
pub mod innocent;
pub mod inputs;
pub mod jobs;
pub mod lifecycle;
pub mod margins;
pub mod multi;
pub mod privacy;
pub mod restore;
pub mod reverse_lookup;
pub mod stability;
pub mod stats;
pub mod subjects;
pub mod transaction;
pub mod ui;

pub use availability::Availability;

/// What a verdict is about. Serialized under the names reports have always used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Property {
    #[serde(rename = "P1-longest-outage")]
    LongestOutage,
    #[serde(rename = "P1-unavailable-seconds")]
    UnavailableSeconds,
    /// P1 within one scenario's window (one verdict per scenario).
    #[serde(rename = "P1-scenario-outage")]
    ScenarioOutage,
    #[serde(rename = "P2-pseudonym-stability")]
    PseudonymStability,
    #[serde(rename = "P3-reverse-lookup")]
    ReverseLookup,
    #[serde(rename = "P4-one-subject-one-pseudonym")]
    OneSubjectOnePseudonym,
    #[serde(rename = "P5-no-innocent-failure")]
    NoInnocentFailure,
    #[serde(rename = "P6-namespace-lifecycle")]
    NamespaceLifecycle,
    #[serde(rename = "P7-jobs")]
    Jobs,
    #[serde(rename = "P9-restore-drill")]
    RestoreDrill,
    /// P10: no position of a random method's pseudonyms depends on when or
    /// where they were made.
    #[serde(rename = "P10-time-and-replica")]
    PseudonymsTimeless,
    /// P10: no job output, Bundle or List page follows its originals' order.
    #[serde(rename = "P10-order")]
    PseudonymsUnordered,
    /// P10: multi-pseudonym siblings share no more than strangers.
    #[serde(rename = "P10-siblings")]
    SiblingsUnlinked,
    /// P11: none of the run's originals in plain text at rest.
    #[serde(rename = "P11-nothing-at-rest")]
    NothingAtRest,
    /// P1 for the web UI: the browser probe's outages within the budgets.
    #[serde(rename = "P1-ui-outage")]
    UiOutage,
    /// The browser stays signed in through every fault.
    #[serde(rename = "ui-session-kept")]
    UiSession,
    /// Every form's result is right, and the API agrees with it.
    #[serde(rename = "ui-results-agree")]
    UiResults,

    #[serde(rename = "invalid-input-codes")]
    InvalidInputCodes,
    #[serde(rename = "list-pages")]
    ListPages,
    #[serde(rename = "guard-served-traffic")]
    ServedTraffic,
    #[serde(rename = "guard-ledger-non-empty")]
    LedgerNonEmpty,
    #[serde(rename = "guard-ledger-matches-acknowledged")]
    LedgerMatchesAcknowledged,
    #[serde(rename = "guard-every-operation-acknowledged")]
    EveryOperationAcknowledged,
    #[serde(rename = "guard-fault-windows-verified")]
    FaultWindowsVerified,
    #[serde(rename = "chaos-completed-within-window")]
    ChaosWithinWindow,
    #[serde(rename = "one-node-commits")]
    OneNodeCommits,
    /// P8: from an erasure's acknowledgement on, no replica answers the mapping.
    #[serde(rename = "P8-erased-stays-erased")]
    ErasedStaysErased,
    /// P2–P4 in the erasable namespace, until erasure.
    #[serde(rename = "erasable-subjects")]
    ErasableSubjects,
    /// Batch Bundles' entries answered as their model allows.
    #[serde(rename = "bundles")]
    Bundles,
    /// The run erased and sent Bundles (no vacuous pass of P8).
    #[serde(rename = "guard-erasure-exercised")]
    ErasureExercised,
    /// Every scenario's window erased and sent Bundles.
    #[serde(rename = "guard-erasure-in-every-scenario")]
    ErasureInEveryScenario,
    /// P8 in the database itself, asked directly after the run.
    #[serde(rename = "P8-erased-in-database")]
    ErasedInDatabase,
    /// Multi-pseudonym namespaces: every acknowledged pseudonym resolves to
    /// its own original, none is shared, `count` 0 answers every one.
    #[serde(rename = "multi-pseudonyms")]
    MultiPseudonyms,
    /// P8 for multi originals: none of an erased original's pseudonyms answered.
    #[serde(rename = "P8-multi-erased-stays-erased")]
    MultiErasedStaysErased,
    /// The run made, read and erased multi originals (no vacuous pass).
    #[serde(rename = "guard-multi-exercised")]
    MultiExercised,
}

impl Property {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Property::LongestOutage => "P1-longest-outage",
            Property::UnavailableSeconds => "P1-unavailable-seconds",
            Property::ScenarioOutage => "P1-scenario-outage",
            Property::PseudonymStability => "P2-pseudonym-stability",
            Property::ReverseLookup => "P3-reverse-lookup",
            Property::OneSubjectOnePseudonym => "P4-one-subject-one-pseudonym",
            Property::NoInnocentFailure => "P5-no-innocent-failure",
            Property::NamespaceLifecycle => "P6-namespace-lifecycle",
            Property::Jobs => "P7-jobs",
            Property::RestoreDrill => "P9-restore-drill",
            Property::PseudonymsTimeless => "P10-time-and-replica",
            Property::PseudonymsUnordered => "P10-order",
            Property::SiblingsUnlinked => "P10-siblings",
            Property::NothingAtRest => "P11-nothing-at-rest",
            Property::UiOutage => "P1-ui-outage",
            Property::UiSession => "ui-session-kept",
            Property::UiResults => "ui-results-agree",

            Property::InvalidInputCodes => "invalid-input-codes",
            Property::ListPages => "list-pages",
            Property::ServedTraffic => "guard-served-traffic",
            Property::LedgerNonEmpty => "guard-ledger-non-empty",
            Property::LedgerMatchesAcknowledged => "guard-ledger-matches-acknowledged",
            Property::EveryOperationAcknowledged => "guard-every-operation-acknowledged",
            Property::FaultWindowsVerified => "guard-fault-windows-verified",
            Property::ChaosWithinWindow => "chaos-completed-within-window",
            Property::OneNodeCommits => "one-node-commits",
            Property::ErasedStaysErased => "P8-erased-stays-erased",
            Property::ErasableSubjects => "erasable-subjects",
            Property::Bundles => "bundles",
            Property::ErasureExercised => "guard-erasure-exercised",
            Property::ErasureInEveryScenario => "guard-erasure-in-every-scenario",
            Property::ErasedInDatabase => "P8-erased-in-database",
            Property::MultiPseudonyms => "multi-pseudonyms",
            Property::MultiErasedStaysErased => "P8-multi-erased-stays-erased",
            Property::MultiExercised => "guard-multi-exercised",
        }
    }
}

impl std::fmt::Display for Property {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Invalid,
    /// Could not be decided (e.g. verification calls kept failing): never a pass.
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub property: Property,
    pub validity: Validity,
    pub summary: String,
    /// Violating pairs, redacted: never a full original.
    pub evidence: Vec<String>,
}

/// Most pieces of evidence a verdict carries.
const MAX_EVIDENCE: usize = 100;

impl Verdict {
    /// Valid or invalid by a condition, with no evidence.
    pub fn holds(property: Property, ok: bool, summary: String) -> Self {
        Self {
            property,
            validity: if ok {
                Validity::Valid
            } else {
                Validity::Invalid
            },
            summary,
            evidence: Vec::new(),
        }
    }

    /// A guard against a vacuous pass: valid with `done` as its summary when
    /// nothing is missing, else invalid saying the run could not prove
    /// `what`, each missing thing its evidence.
    pub fn exercised(property: Property, missing: Vec<String>, done: String, what: &str) -> Self {
        let summary = if missing.is_empty() {
            done
        } else {
            format!("the run could not prove {what}: {}", missing.join("; "))
        };
        Self {
            property,
            validity: if missing.is_empty() {
                Validity::Valid
            } else {
                Validity::Invalid
            },
            summary,
            evidence: missing,
        }
    }

    /// Invalid with any violation, else unknown with any undecided case, else
    /// valid; `what` describes a violation for the summary.
    pub fn from_violations(
        property: Property,
        violations: Vec<String>,
        undecided: usize,
        what: &str,
    ) -> Self {
        let validity = if !violations.is_empty() {
            Validity::Invalid
        } else if undecided > 0 {
            Validity::Unknown
        } else {
            Validity::Valid
        };
        let summary = format!("{} {what}, {undecided} undecided", violations.len());
        let mut evidence = violations;
        evidence.truncate(MAX_EVIDENCE);
        Self {
            property,
            validity,
            summary,
            evidence,
        }
    }

    pub fn passed(&self) -> bool {
        self.validity == Validity::Valid
    }
}

/// P1 budgets of a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budgets {
    pub max_outage_seconds: u64,
    pub max_unavailable_seconds: f64,
}

/// A verification answer for one ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The call succeeded with this value (a pseudonym, or an original).
    Value(String),
    NotFound,
    /// Verification could not complete (code after its retries).
    Error(String),
}

/// What verification observed for one ledger entry through one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAnswer {
    /// Re-Create of the original.
    pub recreated: Answer,
    /// Get of the pseudonym the entry holds (ok) or that the re-Create returned
    /// (indeterminate); `None` when there was nothing to look up.
    pub reverse: Option<Answer>,
}

/// What verification observed for one ledger entry, through every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub replicas: Vec<ReplicaAnswer>,
}

/// What the final look at the workload's leftovers (listed pseudonyms, side
/// namespaces' pairs) found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalChecks {
    /// Listed pseudonyms that do not resolve.
    pub listed_unresolved: Vec<String>,
    /// Side namespaces' pairs against their lifecycle.
    pub side_violations: Vec<String>,
    pub checked: usize,
    /// Lookups that kept failing.
    pub undecided: usize,
}

/// What the checkers of a load run read.
pub struct History<'a> {
    pub rows: &'a [Row],
    pub availability: Availability,
    pub budgets: Budgets,
    pub ledger: &'a [Entry],
    /// One per ledger entry, in the same order.
    pub observations: &'a [Observation],
    /// Every answer and every finding made while the faults happened.
    pub calls: &'a CallsReport,
    pub finals: &'a FinalChecks,
    /// The operations the mix has.
    pub operations: &'a [Operation],
    /// Acknowledged Creates the ledger recorded (reservoir or not).
    pub ledger_ok_seen: u64,
    /// The ledger's file as written and as read back, when the ledger was
    /// re-read from a saved run.
    pub ledger_file: Option<LedgerFile>,
}

/// A saved ledger's counts as the run wrote them and as they were read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerFile {
    /// Acknowledged lines written, and read.
    pub ok_written: u64,
    pub ok_read: u64,
    /// Entries (distinct slots) the run kept, and read: a line replaced by a
    /// copy of another leaves one fewer.
    pub kept: Option<u64>,
    pub read: u64,
}

impl LedgerFile {
    /// What differs, for the guard's summary; `None` when the file is whole.
    pub fn damage(&self) -> Option<String> {
        if self.ok_read != self.ok_written {
            return Some(format!(
                "ledger.jsonl holds {} of {} acknowledged lines written",
                self.ok_read, self.ok_written
            ));
        }
        match self.kept {
            Some(kept) if kept != self.read => Some(format!(
                "ledger.jsonl holds {} of the {kept} entries the run kept",
                self.read
            )),
            _ => None,
        }
    }
}

impl<'a> History<'a> {
    /// A history of only the load and the ledger (no calls, findings or mix).
    pub fn new(
        rows: &'a [Row],
        rate_per_second: u32,
        budgets: Budgets,
        ledger: &'a [Entry],
        observations: &'a [Observation],
    ) -> Self {
        static NO_CALLS: std::sync::OnceLock<CallsReport> = std::sync::OnceLock::new();
        static NO_FINALS: std::sync::OnceLock<FinalChecks> = std::sync::OnceLock::new();
        Self {
            rows,
            availability: availability::of(rows, rate_per_second),
            budgets,
            ledger,
            observations,
            calls: NO_CALLS.get_or_init(CallsReport::default),
            finals: NO_FINALS.get_or_init(FinalChecks::default),
            operations: &[],
            ledger_ok_seen: 0,
            ledger_file: None,
        }
    }

    /// Each ledger entry with what verification observed for it.
    pub fn observed(&self) -> impl Iterator<Item = (&'a Entry, &'a Observation)> {
        self.ledger.iter().zip(self.observations)
    }

    /// The texts of the findings that break `broken`.
    pub fn findings(&self, broken: Broken) -> impl Iterator<Item = String> + 'a {
        self.calls.findings_of(broken).map(|f| f.text.clone())
    }

    /// The violations of a per-pair property: one line per pair found broken
    /// by verification (`verified`: the pair and its line), then the online
    /// findings of `broken` about any other pair, each pair once (a finding
    /// without a pair always counts): so the count is a count of pairs.
    pub fn pair_violations(&self, verified: Vec<(String, String)>, broken: Broken) -> Vec<String> {
        let mut seen: std::collections::HashSet<String> =
            verified.iter().map(|(p, _)| p.clone()).collect();
        let mut lines: Vec<String> = verified.into_iter().map(|(_, line)| line).collect();
        for f in self.calls.findings_of(broken) {
            match &f.pair {
                Some(p) if !seen.insert(p.clone()) => {}
                _ => lines.push(f.text.clone()),
            }
        }
        lines
    }
}

/// One checker: one property, one verdict.
pub type Check = fn(&History<'_>) -> Verdict;

/// The checkers of a load run, in report order.
pub const LOAD_CHECKS: &[Check] = &[
    availability::longest_outage,
    availability::unavailable_seconds,
    stability::check,
    reverse_lookup::check,
    subjects::check,
    innocent::check,
    lifecycle::check,
    inputs::invalid_input_codes,
    inputs::list_pages,
    guards::served_traffic,
    guards::ledger_non_empty,
    guards::ledger_matches_acknowledged,
    guards::every_operation_acknowledged,
];

/// Runs every checker over the history.
pub fn compose(history: &History<'_>, checks: &[Check]) -> Vec<Verdict> {
    checks.iter().map(|check| check(history)).collect()
}

/// A pair for evidence: the original redacted, the pseudonym cut short.
pub(crate) fn pair(original: &str, pseudonym: &str) -> String {
    format!(
        "original {} -> pseudonym {}…",
        crate::redact(original),
        short(pseudonym)
    )
}

/// What the replicas answered wrongly about one pair, as one line: the same
/// answer through several replicas is one finding, named with all of them
/// (`through replicas 0, 1, 2`), so a count of lines is a count of pairs.
pub(crate) fn per_pair(pair: &str, wrong: &[(usize, String)]) -> Option<String> {
    let mut answers: Vec<(&str, Vec<usize>)> = Vec::new();
    for (replica, answer) in wrong {
        match answers.iter_mut().find(|(a, _)| a == answer) {
            Some((_, rs)) => rs.push(*replica),
            None => answers.push((answer, vec![*replica])),
        }
    }
    if answers.is_empty() {
        return None;
    }
    let parts: Vec<String> = answers
        .into_iter()
        .map(|(answer, rs)| {
            let list: Vec<String> = rs.iter().map(usize::to_string).collect();
            let noun = if rs.len() == 1 { "replica" } else { "replicas" };
            format!("{answer} through {noun} {}", list.join(", "))
        })
        .collect();
    Some(format!("{pair} {}", parts.join("; ")))
}

/// The first characters of a pseudonym: enough to tell two apart in evidence.
pub(crate) fn short(pseudonym: &str) -> String {
    pseudonym.chars().take(8).collect()
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::history::Status;

    pub fn row(second: u64, offered: u64, ok: u64) -> Row {
        Row {
            offered,
            ok,
            failed: offered - ok,
            ..Row::empty(second)
        }
    }

    pub fn ok_entry(original: &str, pseudonym: &str) -> Entry {
        Entry {
            slot: 0,
            second: 0,
            status: Status::Ok,
            original: original.into(),
            pseudonym: Some(pseudonym.into()),
            code: None,
            acked_unix_ms: None,
        }
    }

    pub fn indeterminate(original: &str) -> Entry {
        Entry {
            slot: 1,
            second: 0,
            status: Status::Indeterminate,
            original: original.into(),
            pseudonym: None,
            code: Some("DeadlineExceeded".into()),
            acked_unix_ms: None,
        }
    }

    /// The same answer from one replica.
    /// The same answers through three replicas.
    pub fn obs3(recreated: Answer, reverse: Option<Answer>) -> Observation {
        let one = ReplicaAnswer { recreated, reverse };
        Observation {
            replicas: vec![one.clone(), one.clone(), one],
        }
    }

    pub fn obs(recreated: Answer, reverse: Option<Answer>) -> Observation {
        Observation {
            replicas: vec![ReplicaAnswer { recreated, reverse }],
        }
    }

    pub fn value(v: &str) -> Answer {
        Answer::Value(v.into())
    }

    pub const NO_BUDGET: Budgets = Budgets {
        max_outage_seconds: 0,
        max_unavailable_seconds: 0.0,
    };

    /// Runs `check` over a ledger and its observations.
    pub fn over(check: Check, ledger: &[Entry], observations: &[Observation]) -> Verdict {
        check(&History::new(&[], 1, NO_BUDGET, ledger, observations))
    }
}

#[cfg(test)]
mod tests {
    use super::{test_support::*, *};

    #[test]
    fn properties_keep_the_names_reports_have_always_used() {
        for p in [
            Property::LongestOutage,
            Property::ScenarioOutage,
            Property::OneSubjectOnePseudonym,
            Property::ChaosWithinWindow,
            Property::MultiPseudonyms,
            Property::MultiErasedStaysErased,
            Property::MultiExercised,
        ] {
            assert_eq!(
                serde_json::to_string(&p).unwrap(),
                format!("\"{}\"", p.name())
            );
        }
    }

    #[test]
    fn a_healthy_history_passes_every_load_check() {
        let mut served = row(0, 2, 2);
        served.ops[Operation::Create.index()].ok = 2;
        let rows = [served];
        let ledger = [ok_entry("o1", "p1"), ok_entry("o2", "p2")];
        let observations = [
            obs(value("p1"), Some(value("o1"))),
            obs(value("p2"), Some(value("o2"))),
        ];
        let calls = {
            let c = crate::history::Calls::default();
            c.answered(Operation::Create, "Ok");
            c.answered(Operation::Create, "Ok");
            c.report()
        };
        let h = History {
            calls: &calls,
            operations: &[Operation::Create],
            ledger_ok_seen: 2,
            ..History::new(&rows, 2, NO_BUDGET, &ledger, &observations)
        };
        let verdicts = compose(&h, LOAD_CHECKS);
        assert_eq!(verdicts.len(), LOAD_CHECKS.len());
        assert!(verdicts.iter().all(Verdict::passed), "{verdicts:#?}");
    }
}
