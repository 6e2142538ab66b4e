//! Every call's answer, counted by operation and status code, and the findings
//! the workload made while the faults happened: a re-Create that changed, a Get
//! that lost its original, an innocent call answered `INTERNAL`, a side
//! namespace that broke its lifecycle, invalid input answered with the wrong
//! code, a listed item that exposed its original. Each finding keeps the second
//! it happened in, so a report can name the scenario too.

use std::{collections::BTreeMap, sync::Mutex};

use serde::{Deserialize, Serialize};

use crate::operation::Operation;

/// Which promise a finding breaks (the checkers map these to properties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Broken {
    /// P2: an acknowledged original re-created to another pseudonym.
    Stability,
    /// P3: an acknowledged pseudonym that did not resolve to its original.
    ReverseLookup,
    /// P5: a well-formed call answered with a code no model allows.
    InnocentFailure,
    /// P6: a side namespace's pair resolving when it must not, or not when it must.
    Lifecycle,
    /// Invalid input answered other than with its documented code.
    InvalidInput,
    /// A listed item with its original, or a listed pseudonym that does not resolve.
    ListPage,
}

/// One finding, with the second of the load it was offered in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub second: u64,
    pub broken: Broken,
    pub operation: Operation,
    /// For people; redacted: never a full original or pseudonym.
    pub text: String,
    /// The acknowledged pair it is about (redacted, as the checkers name
    /// pairs), so one pair found broken online and after settling counts once,
    /// and its loss is placed at the second it was acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<String>,
}

/// Most findings kept (the rest are counted): a run that breaks everywhere
/// needs no more evidence than this.
const MAX_FINDINGS: usize = 10_000;

/// What [`Calls`] holds at the end, as saved in `calls.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallsReport {
    /// Answers by operation name and status code name.
    pub codes: BTreeMap<String, BTreeMap<String, u64>>,
    /// Calls not served (P1), by status code name: unavailable, too late, or
    /// answered with a code their operation does not document. A documented
    /// answer (INVALID_ARGUMENT to invalid input, NOT_FOUND to a churn step)
    /// is in `codes` only.
    #[serde(default)]
    pub failures: BTreeMap<String, u64>,
    pub findings: Vec<Finding>,
    /// Findings beyond [`MAX_FINDINGS`], counted only.
    pub findings_dropped: u64,
}

impl CallsReport {
    /// Calls of `op` answered `OK`.
    pub fn acknowledged(&self, op: Operation) -> u64 {
        self.codes
            .get(op.name())
            .and_then(|c| c.get("Ok"))
            .copied()
            .unwrap_or(0)
    }

    pub fn findings_of(&self, broken: Broken) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.broken == broken)
    }
}

/// Thread-safe accumulation of answers and findings.
#[derive(Default)]
pub struct Calls {
    inner: Mutex<CallsReport>,
}

impl Calls {
    /// A call of `op` ended with `code` (`"Ok"` for success).
    pub fn answered(&self, op: Operation, code: &str) {
        if let Ok(mut r) = self.inner.lock() {
            *r.codes
                .entry(op.name().to_owned())
                .or_default()
                .entry(code.to_owned())
                .or_default() += 1;
        }
    }

    /// A call that was not served ended with `code`.
    pub fn failed(&self, code: &str) {
        if let Ok(mut r) = self.inner.lock() {
            *r.failures.entry(code.to_owned()).or_default() += 1;
        }
    }

    pub fn found(&self, second: u64, broken: Broken, operation: Operation, text: String) {
        self.record(Finding {
            second,
            broken,
            operation,
            text,
            pair: None,
        });
    }

    /// A finding about one acknowledged pair (`pair` as the checkers name it):
    /// `t=<second>s <pair> <how>`.
    pub fn found_pair(
        &self,
        second: u64,
        broken: Broken,
        operation: Operation,
        pair: String,
        how: &str,
    ) {
        self.record(Finding {
            second,
            broken,
            operation,
            text: format!("t={second}s {pair} {how}"),
            pair: Some(pair),
        });
    }

    fn record(&self, finding: Finding) {
        if let Ok(mut r) = self.inner.lock() {
            if r.findings.len() < MAX_FINDINGS {
                r.findings.push(finding);
            } else {
                r.findings_dropped += 1;
            }
        }
    }

    pub fn report(&self) -> CallsReport {
        self.inner.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_and_findings_kept_with_their_second() {
        let c = Calls::default();
        c.answered(Operation::Get, "Ok");
        c.answered(Operation::Get, "Ok");
        c.answered(Operation::Get, "NotFound");
        c.found(
            7,
            Broken::ReverseLookup,
            Operation::Get,
            "lost write".into(),
        );
        let r = c.report();
        assert_eq!(r.acknowledged(Operation::Get), 2);
        assert_eq!(r.acknowledged(Operation::Create), 0);
        assert_eq!(r.findings_of(Broken::ReverseLookup).count(), 1);
        assert_eq!(r.findings[0].second, 7);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<CallsReport>(&json).unwrap(), r);
    }
}
