//! Assert and report: every checker over a run's history, into its summary.

use std::path::Path;

use anyhow::Context;

use super::RunInfo;
use crate::{
    checker::{self, Answer, FinalChecks, History, Observation},
    history::{self, CallsReport, Entry, Row, Status},
    mix::Mix,
    operation::Operation,
    report::{self, markers, Summary},
};

/// Seconds of acknowledged Creates that were lost (P2/P3, on any replica or
/// online), and seconds with one verified intact through every replica.
pub(super) fn lost_and_verified_seconds(
    ledger: &[Entry],
    observations: &[Observation],
    calls: &CallsReport,
) -> (Vec<u64>, Vec<u64>) {
    let mut lost = std::collections::BTreeSet::new();
    let mut verified = std::collections::BTreeSet::new();
    for (e, o) in ledger.iter().zip(observations) {
        let (Status::Ok, Some(acked)) = (e.status, e.pseudonym.as_deref()) else {
            continue;
        };
        let intact = |a: &checker::ReplicaAnswer| {
            a.recreated == Answer::Value(acked.to_owned())
                && a.reverse == Some(Answer::Value(e.original.clone()))
        };
        let broken = |a: &checker::ReplicaAnswer| {
            matches!(&a.recreated, Answer::Value(p) if p != acked)
                || a.recreated == Answer::NotFound
                || matches!(&a.reverse, Some(Answer::Value(v)) if *v != e.original)
                || a.reverse == Some(Answer::NotFound)
        };
        if o.replicas.iter().any(broken) {
            lost.insert(e.second);
        } else if !o.replicas.is_empty() && o.replicas.iter().all(intact) {
            verified.insert(e.second);
        }
    }
    // An online finding about a pair counts at the second the pair was
    // acknowledged, not the second it was found broken.
    let acknowledged: std::collections::HashMap<String, u64> = ledger
        .iter()
        .filter(|e| e.status == Status::Ok)
        .filter_map(|e| {
            Some((
                checker::pair(&e.original, e.pseudonym.as_deref()?),
                e.second,
            ))
        })
        .collect();
    for f in calls
        .findings_of(history::Broken::Stability)
        .chain(calls.findings_of(history::Broken::ReverseLookup))
    {
        let at = f.pair.as_ref().and_then(|p| acknowledged.get(p));
        lost.insert(at.copied().unwrap_or(f.second));
    }
    (lost.into_iter().collect(), verified.into_iter().collect())
}

/// What assert judges.
pub struct Evidence<'a> {
    pub info: &'a RunInfo,
    pub rows: &'a [Row],
    pub ledger: &'a [Entry],
    pub observations: &'a [Observation],
    pub calls: &'a CallsReport,
    pub finals: &'a FinalChecks,
    /// Acknowledged lines and entries read back from `ledger.jsonl`, when the
    /// ledger came from the file.
    pub ledger_read: Option<(u64, u64)>,
    /// The run's CSV jobs, when it ran any (P7).
    pub jobs: Option<&'a [checker::jobs::JobObservation]>,
    /// P10's samples beside the ledger, when the probe ran.
    pub privacy: Option<&'a checker::privacy::Observed>,
    /// The browser probe's steps and the API's word on what it created.
    pub ui: Option<(&'a [checker::ui::StepRecord], &'a [checker::ui::Agreement])>,
    pub erasures: Option<(
        &'a history::erasures::ErasureHistory,
        Option<&'a crate::history::verified::Observed>,
    )>,
}

/// Assert: every checker over the history, into the run's summary.
pub fn assert(e: Evidence<'_>) -> anyhow::Result<Summary> {
    let Evidence {
        info,
        rows,
        ledger,
        observations,
        calls,
        finals,
        ledger_read,
        jobs,
        ui,
        erasures,
        privacy,
    } = e;
    let mix = Mix::parse(&info.mix)?;
    let operations: Vec<Operation> = mix.operations().collect();
    let history = History {
        calls,
        finals,
        operations: &operations,
        ledger_ok_seen: info.ledger_ok_seen,
        ledger_file: info.ledger_ok_written.zip(ledger_read).map(
            |(ok_written, (ok_read, read))| checker::LedgerFile {
                ok_written,
                ok_read,
                kept: info.ledger_kept,
                read,
            },
        ),
        ..History::new(
            rows,
            info.rate_per_second,
            info.budgets(),
            ledger,
            observations,
        )
    };
    let mut verdicts = checker::compose(&history, checker::LOAD_CHECKS);
    if let Some(jobs) = jobs {
        verdicts.push(checker::jobs::check(jobs));
    }
    verdicts.extend(checker::privacy::check(ledger, privacy));
    let mut margins = checker::margins::of_run(history.availability, history.budgets);
    if let Some((steps, agreements)) = ui {
        let window_end = info.load_start_unix + rows.len() as f64;
        let api_seen = checker::availability::longest_outage_seen_every(
            rows,
            checker::ui::PROBE_PERIOD_SECONDS,
        );
        verdicts.extend(checker::ui::check(
            steps,
            agreements,
            info.budgets(),
            api_seen,
            window_end,
        ));
        margins.extend(checker::margins::of_ui(
            steps,
            info.budgets(),
            api_seen,
            window_end,
        ));
    }
    if let Some((h, seen)) = erasures {
        verdicts.extend(checker::erasure::check(h, seen));
    }
    let mut warnings = info.warnings.clone();
    warnings.extend(checker::margins::warnings(&margins));
    let (lost_seconds, verified_seconds) = lost_and_verified_seconds(ledger, observations, calls);
    let mut per_operation = std::collections::BTreeMap::new();
    for op in Operation::ALL {
        let mut total = history::OpCounts::default();
        for r in rows {
            let c = r.ops[op.index()];
            total.offered += c.offered;
            total.ok += c.ok;
            total.failed += c.failed;
        }
        if total.offered > 0 {
            per_operation.insert(op.name().to_owned(), total);
        }
    }
    Ok(Summary {
        passed: verdicts.iter().all(checker::Verdict::passed),
        seed: info.seed,
        rate_per_second: info.rate_per_second,
        availability: history.availability,
        verdicts,
        failures_by_code: info.failures_by_code.clone(),
        ledger_entries: ledger.len(),
        ledger_indeterminate: ledger
            .iter()
            .filter(|e| e.status == Status::Indeterminate)
            .count(),
        max_dispatch_lag_ms: info.max_dispatch_lag_ms,
        warnings,
        mix: info.mix.clone(),
        operations: per_operation,
        calls: calls.clone(),
        lost_seconds,
        verified_seconds,
        load_start_unix: info.load_start_unix,
        one_node_commits: Vec::new(),
        margins,
        cpu: info.cpu.clone(),
        caveats: info
            .cpu
            .as_ref()
            .map(checker::cost::caveats)
            .unwrap_or_default(),
        failovers: Vec::new(),
    })
}

/// Report: the summary into the run directory (once) and on stdout between
/// markers, the verdicts on stderr.
pub fn report(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    report::write(dir, summary)?;
    markers::emit_summary(summary).context("cannot print the summary")?;
    report::print_verdicts(summary);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{checker::test_support::*, history::Calls};

    /// A write acknowledged at second 0 and found lost online at 8 and 11 is a
    /// loss of second 0 (what the one-node-commit verdict and the plots place).
    #[test]
    fn an_online_finding_places_its_loss_at_the_acknowledgement() {
        let calls = Calls::default();
        for second in [8, 11] {
            calls.found_pair(
                second,
                history::Broken::ReverseLookup,
                Operation::Get,
                checker::pair("o1", "p1"),
                "does not resolve (lost write)",
            );
        }
        calls.found(
            5,
            history::Broken::Stability,
            Operation::Recreate,
            "t=5s a finding of an older harness".into(),
        );
        let ledger = [ok_entry("o1", "p1")];
        let observations = [obs(value("p1"), Some(value("o1")))];
        let (lost, verified) = lost_and_verified_seconds(&ledger, &observations, &calls.report());
        assert_eq!(lost, [0, 5]);
        assert_eq!(verified, [0]);
    }
}
