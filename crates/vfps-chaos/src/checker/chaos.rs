//! The chaos itself: every planned scenario started, none failed, and they all
//! finished inside the load window (a fault outside it is a fault without load).

use serde::{Deserialize, Serialize};

use super::{Property, Verdict};
use crate::scenario::{events::Window, ScenarioPlan};

/// What the `scenarios` step reports about the faults it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChaosOutcome {
    pub failovers: u32,
    #[serde(default)]
    pub replica_kills: u32,
    #[serde(default)]
    pub partitions: u32,
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
            "chaos finished at {:.1} s of a {load_seconds} s window; {} replica kills, {} failovers, {} partitions",
            outcome.finished_seconds, outcome.replica_kills, outcome.failovers, outcome.partitions
        ),
    };
    Verdict::holds(Property::ChaosWithinWindow, fits, summary)
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
}
