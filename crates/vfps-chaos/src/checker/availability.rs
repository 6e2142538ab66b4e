//! P1, availability, as durations: the longest run of consecutive seconds with
//! well-formed calls offered and none succeeding (invalid input is answered
//! without the database, so it never ends an outage), and (failed + shed) / rate — over the
//! whole run, and per scenario (each second belongs to the scenario during
//! which it began).

use serde::{Deserialize, Serialize};

use super::{History, Property, Verdict};
use crate::{
    history::Row,
    operation::Operation,
    scenario::{events::Window, ScenarioName, ScenarioPlan},
};

/// P1 figures over a range of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    pub offered: u64,
    pub ok: u64,
    pub failed: u64,
    pub shed: u64,
    /// Longest run of consecutive seconds with well-formed calls offered and
    /// none of them ok.
    pub longest_outage_seconds: u64,
    /// (failed + shed) / rate.
    pub unavailable_seconds: f64,
}

pub fn of(rows: &[Row], rate_per_second: u32) -> Availability {
    let (mut run, mut longest) = (0u64, 0u64);
    let mut a = Availability {
        offered: 0,
        ok: 0,
        failed: 0,
        shed: 0,
        longest_outage_seconds: 0,
        unavailable_seconds: 0.0,
    };
    for r in rows {
        a.offered += r.offered;
        a.ok += r.ok;
        a.failed += r.failed;
        a.shed += r.shed;
        match dead(r) {
            Some(true) => {
                run += 1;
                longest = longest.max(run);
            }
            Some(false) => run = 0,
            None => {}
        }
    }
    a.longest_outage_seconds = longest;
    a.unavailable_seconds = (a.failed + a.shed) as f64 / f64::from(rate_per_second.max(1));
    a
}

/// Whether a second was an outage: well-formed calls offered and none ok
/// (`None`: none offered, the second says nothing). Invalid input is answered
/// without the database: a second in which only those were served is still
/// an outage.
fn dead(r: &Row) -> Option<bool> {
    let bad = r.ops[Operation::Bad.index()];
    let (offered, ok) = (
        r.offered - bad.offered.min(r.offered),
        r.ok - bad.ok.min(r.ok),
    );
    (offered > 0).then_some(ok == 0)
}

/// The longest outage as a probe that looks once every `blind_seconds` may
/// see it: outages joined across the service's up-stretches of at most that
/// many seconds (counted in), since such a probe can miss them altogether.
/// A double failover's second primary, up for a second between two
/// outages, is one outage to a browser that takes a step every 3 s.
pub fn longest_outage_seen_every(rows: &[Row], blind_seconds: u64) -> u64 {
    // The current outage's seconds so far (0: none), and the up seconds since
    // its last dead one; seconds with nothing offered count for neither.
    let (mut longest, mut run, mut up) = (0u64, 0u64, 0u64);
    for r in rows {
        match dead(r) {
            Some(true) => {
                run = if run > 0 && up <= blind_seconds {
                    run + up + 1
                } else {
                    1
                };
                up = 0;
                longest = longest.max(run);
            }
            Some(false) => up += 1,
            None => {}
        }
    }
    longest
}

/// The whole run's longest outage against its budget.
pub fn longest_outage(h: &History<'_>) -> Verdict {
    let (a, budget) = (h.availability, h.budgets.max_outage_seconds);
    Verdict::holds(
        Property::LongestOutage,
        a.longest_outage_seconds <= budget,
        format!(
            "longest outage {} s, budget {budget} s",
            a.longest_outage_seconds
        ),
    )
}

/// The whole run's unavailable seconds against their budget.
pub fn unavailable_seconds(h: &History<'_>) -> Verdict {
    let (a, budget) = (h.availability, h.budgets.max_unavailable_seconds);
    Verdict::holds(
        Property::UnavailableSeconds,
        a.unavailable_seconds <= budget,
        format!(
            "unavailable {:.2} s, budget {budget:.2} s",
            a.unavailable_seconds
        ),
    )
}

/// P1 of one scenario's window.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub scenario: ScenarioName,
    pub availability: Availability,
    pub max_outage_seconds: u64,
    pub verdict: Verdict,
    /// Findings the workload made while the scenario ran (filled by the driver).
    pub findings: usize,
}

/// A window of a scenario the plan does not have: attribution would have no
/// budget to hold it to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the chaos timeline has a window for scenario {0:?}, which the plan does not list")]
pub struct UnknownScenario(pub ScenarioName);

/// P1 per scenario window, against each scenario's own budget.
pub fn per_scenario(
    rows: &[Row],
    windows: &[Window],
    plan: &ScenarioPlan,
    rate_per_second: u32,
) -> Result<Vec<ScenarioResult>, UnknownScenario> {
    windows
        .iter()
        .map(|w| {
            let planned = plan
                .get(&w.scenario)
                .ok_or_else(|| UnknownScenario(w.scenario.clone()))?;
            let inside: Vec<Row> = rows
                .iter()
                .filter(|r| {
                    (r.second as f64) >= w.start_seconds.floor()
                        && (r.second as f64) < w.end_seconds
                })
                .cloned()
                .collect();
            let a = of(&inside, rate_per_second);
            let budget = planned.max_outage_seconds;
            let within = a.longest_outage_seconds <= budget;
            let summary = if planned.gate {
                format!(
                    "{}: longest outage {} s (budget {budget} s), unavailable {:.2} s",
                    w.scenario, a.longest_outage_seconds, a.unavailable_seconds
                )
            } else {
                format!(
                    "{}: longest outage {} s (reference {budget} s{}; reported, the run's budgets decide), unavailable {:.2} s",
                    w.scenario,
                    a.longest_outage_seconds,
                    if within { "" } else { ", above it" },
                    a.unavailable_seconds
                )
            };
            Ok(ScenarioResult {
                scenario: w.scenario.clone(),
                availability: a,
                max_outage_seconds: budget,
                verdict: Verdict::holds(
                    Property::ScenarioOutage,
                    within || !planned.gate,
                    summary,
                ),
                findings: 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{test_support::row, Budgets, Validity},
        scenario::events::{ChaosEvent, EventKind},
        target::Target,
    };

    fn budgets(max_outage_seconds: u64, max_unavailable_seconds: f64) -> Budgets {
        Budgets {
            max_outage_seconds,
            max_unavailable_seconds,
        }
    }

    /// Under the mixed workload invalid input is answered every second without
    /// the database; before the fix those answers ended every outage (a paused
    /// primary showed a 1 s longest outage for 10 s without a write).
    #[test]
    fn invalid_input_answered_does_not_end_an_outage() {
        use crate::history::OpCounts;
        let dead = |s: u64| {
            let mut r = row(s, 10, 1);
            r.failed = 9;
            r.ops[Operation::Create.index()] = OpCounts {
                offered: 9,
                ok: 0,
                failed: 9,
            };
            r.ops[Operation::Bad.index()] = OpCounts {
                offered: 1,
                ok: 1,
                failed: 0,
            };
            r
        };
        let rows = [row(0, 10, 10), dead(1), dead(2), dead(3), row(4, 10, 10)];
        assert_eq!(of(&rows, 10).longest_outage_seconds, 3);
        // Only invalid input offered: nothing well-formed to be unavailable for.
        let mut quiet = row(5, 1, 1);
        quiet.ops[Operation::Bad.index()] = OpCounts {
            offered: 1,
            ok: 1,
            failed: 0,
        };
        assert_eq!(of(&[quiet], 10).longest_outage_seconds, 0);
    }

    #[test]
    fn a_probe_that_looks_every_few_seconds_sees_outages_joined() {
        // Two outages (3 s and 4 s) with the service up for 2 s between
        // them, then 5 s up and a third outage of 2 s.
        let mut rows = Vec::new();
        for (i, ok) in [0, 0, 0, 10, 10, 0, 0, 0, 0, 10, 10, 10, 10, 10, 0, 0]
            .into_iter()
            .enumerate()
        {
            rows.push(row(i as u64, 10, ok));
        }
        assert_eq!(longest_outage_seen_every(&rows, 0), 4);
        assert_eq!(
            longest_outage_seen_every(&rows, 0),
            of(&rows, 10).longest_outage_seconds,
            "a probe that misses nothing sees what P1 counts"
        );
        assert_eq!(longest_outage_seen_every(&rows, 1), 4, "2 s up is seen");
        assert_eq!(
            longest_outage_seen_every(&rows, 2),
            9,
            "3 + 2 + 4: the 2 s between them may fall between two looks"
        );
        assert_eq!(longest_outage_seen_every(&rows, 5), 16);
        rows.insert(4, row(99, 0, 0));
        assert_eq!(
            longest_outage_seen_every(&rows, 2),
            9,
            "a second with nothing offered neither extends nor breaks it"
        );
    }

    #[test]
    fn longest_outage_counts_consecutive_dead_seconds() {
        let rows = [
            row(0, 10, 10),
            row(1, 10, 0),
            row(2, 10, 0),
            row(3, 10, 5),
            row(4, 10, 0),
            row(5, 0, 0),
            row(6, 10, 0),
        ];
        let verdicts = |b| {
            let h = History::new(&rows, 10, b, &[], &[]);
            (
                longest_outage(&h).validity,
                unavailable_seconds(&h).validity,
            )
        };
        let a = of(&rows, 10);
        assert_eq!(
            a.longest_outage_seconds, 2,
            "a second with nothing offered neither extends nor breaks a run"
        );
        assert!((a.unavailable_seconds - 4.5).abs() < 1e-9);
        assert_eq!(verdicts(budgets(1, 100.0)).0, Validity::Invalid);
        assert_eq!(
            verdicts(budgets(2, 4.5)),
            (Validity::Valid, Validity::Valid)
        );
        assert_eq!(verdicts(budgets(2, 4.4)).1, Validity::Invalid);
    }

    fn timeline_row(second: u64, ok: u64) -> Row {
        Row {
            failed: 10 - ok,
            ..row(second, 10, ok)
        }
    }

    fn event(at: f64, scenario: &str, kind: EventKind) -> ChaosEvent {
        ChaosEvent {
            at_seconds: at,
            scenario: Some(ScenarioName::new(scenario)),
            kind,
            text: String::new(),
        }
    }

    #[test]
    fn failures_are_attributed_to_the_scenario_they_were_offered_in() {
        let rows: Vec<Row> = (0..10)
            .map(|s| timeline_row(s, if (5..8).contains(&s) { 0 } else { 10 }))
            .collect();
        let events = vec![
            event(0.2, "baseline", EventKind::Start),
            event(4.0, "baseline", EventKind::End),
            event(4.0, "db-primary-kill", EventKind::Start),
            event(9.5, "db-primary-kill", EventKind::End),
        ];
        let plan = ScenarioPlan::from_env("baseline,db-primary-kill", Target::Local, |k| {
            (k == "MAX_OUTAGE_DB_PRIMARY_KILL").then(|| "2".into())
        })
        .unwrap();
        let windows = crate::scenario::events::windows(&events);
        let r = per_scenario(&rows, &windows, &plan, 10).unwrap();
        assert_eq!(r[0].availability.longest_outage_seconds, 0);
        assert_eq!(r[0].verdict.validity, Validity::Valid);
        assert_eq!(r[1].availability.longest_outage_seconds, 3);
        assert_eq!(
            r[1].verdict.validity,
            Validity::Invalid,
            "3 s exceeds the 2 s budget"
        );
        assert!((r[1].availability.unavailable_seconds - 3.0).abs() < 1e-9);
    }

    #[test]
    fn on_kubernetes_a_scenario_budget_is_reported_unless_set_or_switched_on() {
        let rows: Vec<Row> = (0..10)
            .map(|s| timeline_row(s, if (5..8).contains(&s) { 0 } else { 10 }))
            .collect();
        let events = vec![
            event(0.0, "rollout", EventKind::Start),
            event(9.5, "rollout", EventKind::End),
        ];
        let windows = crate::scenario::events::windows(&events);
        let verdict = |vars: &[(&str, &str)]| {
            let plan = ScenarioPlan::from_env("rollout", Target::Kind, |k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
            .unwrap();
            per_scenario(&rows, &windows, &plan, 10).unwrap()[0]
                .verdict
                .clone()
        };
        // Default on kind: 3 s against a 0 s reference is reported, not failed.
        let reported = verdict(&[]);
        assert_eq!(reported.validity, Validity::Valid);
        assert!(
            reported.summary.contains("above it"),
            "{}",
            reported.summary
        );
        // Switched on for every scenario, or one budget set explicitly: a gate.
        assert_eq!(
            verdict(&[("SCENARIO_GATES", "on")]).validity,
            Validity::Invalid
        );
        assert_eq!(
            verdict(&[("MAX_OUTAGE_ROLLOUT", "2")]).validity,
            Validity::Invalid
        );
        assert_eq!(
            verdict(&[("MAX_OUTAGE_ROLLOUT", "5")]).validity,
            Validity::Valid
        );
        assert!(ScenarioPlan::from_env("rollout", Target::Kind, |k| {
            (k == "SCENARIO_GATES").then(|| "sometimes".into())
        })
        .is_err());
    }

    #[test]
    fn a_window_of_an_unplanned_scenario_is_an_error_not_a_zero_budget() {
        let plan = ScenarioPlan::from_env("baseline", Target::Local, |_| None).unwrap();
        let windows = crate::scenario::events::windows(&[
            event(0.0, "baseline", EventKind::Start),
            event(1.0, "baseline", EventKind::End),
            event(1.0, "drian", EventKind::Start),
        ]);
        let e = per_scenario(&[], &windows, &plan, 10).unwrap_err();
        assert_eq!(e, UnknownScenario(ScenarioName::new("drian")));
    }
}
