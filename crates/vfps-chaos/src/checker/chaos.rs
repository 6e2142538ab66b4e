//! The chaos itself: every planned scenario started, none failed, and they all
//! finished inside the load window (a fault outside it is a fault without
//! load); every fault's window holds a write verified afterwards (a fault nobody
//! wrote through proves nothing); and no commit PostgreSQL left on one node lost
//! a write acknowledged around it.

use serde::{Deserialize, Serialize};

use super::{Property, Verdict};
use crate::scenario::{events::Window, Scenario, ScenarioName, ScenarioPlan};

/// What the `scenarios` step reports about the faults it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChaosOutcome {
    pub failovers: u32,
    #[serde(default)]
    pub replica_kills: u32,
    #[serde(default)]
    pub partitions: u32,
    /// Pauses, isolations and delays.
    #[serde(default)]
    pub gray_faults: u32,
    /// Seconds into the load window when the last scenario ended.
    pub finished_seconds: f64,
    /// Why the scenarios stopped early, if they did.
    pub error: Option<String>,
}

pub fn within_window(
    outcome: &ChaosOutcome,
    plan: &ScenarioPlan,
    windows: &[Window],
    load_seconds: u64,
) -> Verdict {
    let missing: Vec<&str> = plan
        .scenarios
        .iter()
        .filter(|p| !windows.iter().any(|w| w.scenario == p.name))
        .map(|p| p.name.as_str())
        .collect();
    let fits = outcome.error.is_none()
        && missing.is_empty()
        && outcome.finished_seconds <= load_seconds as f64;
    let summary = match &outcome.error {
        Some(e) => format!("a scenario failed: {e}"),
        None if !missing.is_empty() => format!("scenarios never started: {}", missing.join(", ")),
        None => format!(
            "chaos finished at {:.1} s of a {load_seconds} s window; {} replica kills, {} failovers, {} partitions, {} gray faults",
            outcome.finished_seconds, outcome.replica_kills, outcome.failovers, outcome.partitions, outcome.gray_faults
        ),
    };
    Verdict::holds(Property::ChaosWithinWindow, fits, summary)
}

/// Every fault scenario's window holds a second with an acknowledged Create
/// that verification found intact through every replica.
pub fn fault_windows_verified(
    plan: &ScenarioPlan,
    windows: &[Window],
    verified_seconds: &[u64],
) -> Verdict {
    let unverified: Vec<&str> = windows
        .iter()
        .filter(|w| {
            plan.get(&w.scenario)
                .is_some_and(|p| p.scenario != Scenario::Baseline)
        })
        .filter(|w| {
            !verified_seconds
                .iter()
                .any(|s| (*s as f64) >= w.start_seconds.floor() && (*s as f64) < w.end_seconds)
        })
        .map(|w| w.scenario.as_str())
        .collect();
    Verdict::holds(
        Property::FaultWindowsVerified,
        unverified.is_empty(),
        if unverified.is_empty() {
            "every fault window has an acknowledged write verified afterwards".into()
        } else {
            format!(
                "no acknowledged write verified in the window of: {}",
                unverified.join(", ")
            )
        },
    )
}

/// A commit PostgreSQL logged as cancelled while it waited for the synchronous
/// standby ("committed locally"): it existed on one node only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneNodeCommit {
    /// Seconds into the load window.
    pub at_seconds: f64,
    /// Which instance logged it.
    pub instance: String,
    pub scenario: Option<ScenarioName>,
}

/// How long before a one-node commit an acknowledged Create may have been
/// offered and still be the write it carried: the call deadline.
pub const ONE_NODE_COMMIT_REACH_SECONDS: u64 = 5;

/// One-node commits are reported; the run fails if a Create offered in the
/// seconds before one (within a call deadline) was lost.
pub fn one_node_commits(commits: &[OneNodeCommit], lost_seconds: &[u64]) -> Verdict {
    let harmful: Vec<String> = commits
        .iter()
        .filter(|c| {
            let at = c.at_seconds.max(0.0) as u64;
            lost_seconds
                .iter()
                .any(|s| *s <= at && at - s <= ONE_NODE_COMMIT_REACH_SECONDS)
        })
        .map(|c| {
            format!(
                "t={:.1}s ({}) a one-node commit on {} and a lost write offered just before",
                c.at_seconds,
                c.scenario
                    .as_ref()
                    .map_or("outside every scenario", |s| s.as_str()),
                c.instance
            )
        })
        .collect();
    let mut v = Verdict::holds(
        Property::OneNodeCommits,
        harmful.is_empty(),
        format!(
            "{} one-node commits logged, {} next to a lost write",
            commits.len(),
            harmful.len()
        ),
    );
    v.evidence = harmful;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{checker::Validity, scenario::ScenarioName, target::Target};

    fn window(name: &str) -> Window {
        Window {
            scenario: ScenarioName::new(name),
            start_seconds: 0.0,
            end_seconds: 10.0,
        }
    }

    #[test]
    fn chaos_fails_on_an_error_a_missing_scenario_or_an_overrun() {
        let plan = ScenarioPlan::from_env("baseline,drain", Target::Local, |_| None).unwrap();
        let both = [window("baseline"), window("drain")];
        let ok = ChaosOutcome {
            finished_seconds: 100.0,
            ..ChaosOutcome::default()
        };
        assert!(within_window(&ok, &plan, &both, 200).passed());
        let failed = ChaosOutcome {
            error: Some("scenario drain: timed out".into()),
            ..ok.clone()
        };
        assert_eq!(
            within_window(&failed, &plan, &both, 200).validity,
            Validity::Invalid
        );
        let v = within_window(&ok, &plan, &both[..1], 200);
        assert!(!v.passed() && v.summary.contains("drain"), "{v:?}");
        assert!(!within_window(&ok, &plan, &both, 99).passed(), "overran");
    }

    #[test]
    fn a_fault_window_without_a_verified_write_fails() {
        let plan = ScenarioPlan::from_env("baseline,drain", Target::Local, |_| None).unwrap();
        let windows = [
            Window {
                scenario: ScenarioName::new("baseline"),
                start_seconds: 0.0,
                end_seconds: 10.0,
            },
            Window {
                scenario: ScenarioName::new("drain"),
                start_seconds: 10.0,
                end_seconds: 20.0,
            },
        ];
        assert!(fault_windows_verified(&plan, &windows, &[3, 15]).passed());
        let v = fault_windows_verified(&plan, &windows, &[3]);
        assert!(!v.passed() && v.summary.contains("drain"), "{v:?}");
    }

    #[test]
    fn a_one_node_commit_fails_the_run_only_next_to_a_lost_write() {
        let commit = OneNodeCommit {
            at_seconds: 42.3,
            instance: "db-a".into(),
            scenario: Some(ScenarioName::new("db-primary-kill")),
        };
        assert!(one_node_commits(std::slice::from_ref(&commit), &[]).passed());
        assert!(one_node_commits(std::slice::from_ref(&commit), &[10]).passed());
        let v = one_node_commits(&[commit], &[40]);
        assert!(
            !v.passed() && v.evidence[0].contains("db-primary-kill"),
            "{v:?}"
        );
    }
}
