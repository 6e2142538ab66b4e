//! Scenarios: named faults with durations, run in sequence under one load window.
//!
//! # Layout
//! - this file: [`Scenario`] (what a fault is), [`ScenarioName`] (the name a run
//!   planned it under), [`ScenarioPlan`] (the scenarios in order and the load
//!   window computed from them).
//! - [`events`]: the chaos timeline — typed events on the load's clock, and the
//!   scenario windows read from it.

use std::time::Duration;

use serde::Serialize;

use crate::target::Target;

pub mod events;

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    Baseline,
    VfpsPodKill,
    DbPrimaryKill,
    DbNetworkPartition,
    Rollout,
    Drain,
}

impl Scenario {
    pub const ALL: [Scenario; 6] = [
        Scenario::Baseline,
        Scenario::VfpsPodKill,
        Scenario::DbPrimaryKill,
        Scenario::DbNetworkPartition,
        Scenario::Rollout,
        Scenario::Drain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::VfpsPodKill => "vfps-pod-kill",
            Scenario::DbPrimaryKill => "db-primary-kill",
            Scenario::DbNetworkPartition => "db-network-partition",
            Scenario::Rollout => "rollout",
            Scenario::Drain => "drain",
        }
    }

    /// A scenario by name; `cnpg-primary-kill` is the Kubernetes name of
    /// `db-primary-kill` (the database there is CloudNativePG).
    pub fn parse(name: &str) -> Option<Scenario> {
        match name.trim() {
            "cnpg-primary-kill" => Some(Scenario::DbPrimaryKill),
            n => Scenario::ALL.into_iter().find(|k| k.name() == n),
        }
    }

    /// Default length of the scenario's window. Kubernetes is slower to heal (a
    /// CloudNativePG instance is re-created, a rollout schedules pods), so its
    /// windows are longer.
    fn default_duration(self, target: Target) -> Duration {
        let (local, kind) = match self {
            Scenario::Baseline => (60, 60),
            Scenario::VfpsPodKill => (135, 135),
            Scenario::DbPrimaryKill => (120, 240),
            Scenario::DbNetworkPartition => (120, 180),
            Scenario::Rollout => (90, 180),
            Scenario::Drain => (90, 180),
        };
        Duration::from_secs(match target {
            Target::Local => local,
            Target::Kind => kind,
        })
    }

    /// Per-scenario budget of the longest outage (seconds).
    pub fn default_max_outage(self) -> u64 {
        match self {
            Scenario::DbPrimaryKill => 10,
            Scenario::DbNetworkPartition => 25,
            _ => 0,
        }
    }
}

/// The name a scenario was planned under: names its window in the chaos
/// timeline, its `DURATION_*` / `MAX_OUTAGE_*` variables and its per-scenario
/// verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ScenarioName(String);

impl ScenarioName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ScenarioName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `DURATION_<NAME>` (seconds) for a scenario name, e.g. `DURATION_DB_PRIMARY_KILL`.
pub fn duration_variable(name: &str) -> String {
    format!("DURATION_{}", name.replace('-', "_").to_ascii_uppercase())
}

/// The scenarios a run does when none are named.
pub fn default_scenarios(target: Target) -> &'static str {
    match target {
        Target::Local => {
            "baseline,vfps-pod-kill,db-primary-kill,db-network-partition,rollout,drain"
        }
        Target::Kind => {
            "baseline,vfps-pod-kill,cnpg-primary-kill,db-network-partition,rollout,drain"
        }
    }
}

/// One planned scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    #[serde(rename = "kind")]
    pub scenario: Scenario,
    pub name: ScenarioName,
    pub duration_seconds: u64,
    pub max_outage_seconds: u64,
}

/// A plan that cannot be run, naming the variable or scenario at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// The run's plan: scenarios in order and the load window computed from them —
/// in one place, so load and chaos cannot disagree.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioPlan {
    pub scenarios: Vec<Planned>,
    pub margin_seconds: u64,
}

impl ScenarioPlan {
    /// From a comma-separated list and a variable lookup (`DURATION_*`,
    /// `MAX_OUTAGE_*`, `LOAD_MARGIN_SECONDS`), with the target's defaults.
    pub fn from_env(
        list: &str,
        target: Target,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ScenarioPlan, PlanError> {
        let err = |m: String| PlanError(m);
        let mut scenarios = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let scenario = Scenario::parse(name).ok_or_else(|| {
                err(format!(
                    "unknown scenario {name:?} (known: {}, cnpg-primary-kill)",
                    Scenario::ALL.map(Scenario::name).join(", ")
                ))
            })?;
            if scenarios.iter().any(|p: &Planned| p.name.as_str() == name) {
                return Err(err(format!(
                    "scenario {name:?} is listed twice; its window would be ambiguous"
                )));
            }
            let seconds = |key: String, default: u64| -> Result<u64, PlanError> {
                match var(&key) {
                    None => Ok(default),
                    Some(v) => v
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("{key}={v:?} is not a whole number of seconds"))),
                }
            };
            let duration_var = duration_variable(name);
            let duration = seconds(
                duration_var.clone(),
                scenario.default_duration(target).as_secs(),
            )?;
            if duration == 0 {
                return Err(err(format!("{duration_var} must be at least 1")));
            }
            let budget = seconds(
                duration_var.replace("DURATION_", "MAX_OUTAGE_"),
                scenario.default_max_outage(),
            )?;
            scenarios.push(Planned {
                scenario,
                name: ScenarioName::new(name),
                duration_seconds: duration,
                max_outage_seconds: budget,
            });
        }
        if scenarios.is_empty() {
            return Err(err("no scenarios selected".into()));
        }
        let margin = match var("LOAD_MARGIN_SECONDS") {
            None => match target {
                Target::Local => 30,
                Target::Kind => 60,
            },
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| err(format!("LOAD_MARGIN_SECONDS={v:?} is not a whole number")))?,
        };
        Ok(ScenarioPlan {
            scenarios,
            margin_seconds: margin,
        })
    }

    /// Load window = sum of scenario durations + margin.
    pub fn load_seconds(&self) -> u64 {
        self.scenarios
            .iter()
            .map(|s| s.duration_seconds)
            .sum::<u64>()
            + self.margin_seconds
    }

    /// The planned scenario of that name.
    pub fn get(&self, name: &ScenarioName) -> Option<&Planned> {
        self.scenarios.iter().find(|p| p.name == *name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_window_is_the_sum_of_durations_plus_margin() {
        let vars = |k: &str| match k {
            "DURATION_BASELINE" => Some("10".to_owned()),
            "DURATION_DB_PRIMARY_KILL" => Some("40".to_owned()),
            "LOAD_MARGIN_SECONDS" => Some("5".to_owned()),
            _ => None,
        };
        let p = ScenarioPlan::from_env("baseline,db-primary-kill", Target::Local, vars).unwrap();
        assert_eq!(p.load_seconds(), 55);
        assert_eq!(p.scenarios[1].max_outage_seconds, 10);
        assert!(
            ScenarioPlan::from_env("baseline,nope", Target::Local, |_| None)
                .unwrap_err()
                .0
                .contains("nope")
        );
        assert!(
            ScenarioPlan::from_env("baseline", Target::Local, |k| (k == "DURATION_BASELINE")
                .then(|| "x".into()))
            .unwrap_err()
            .0
            .contains("DURATION_BASELINE=\"x\"")
        );
        assert!(
            ScenarioPlan::from_env("baseline,baseline", Target::Local, |_| None)
                .unwrap_err()
                .0
                .contains("twice")
        );
        assert!(ScenarioPlan::from_env(" , ", Target::Local, |_| None).is_err());
    }

    #[test]
    fn kubernetes_names_the_primary_kill_after_cloudnativepg_and_has_longer_windows() {
        let vars = |k: &str| (k == "DURATION_CNPG_PRIMARY_KILL").then(|| "100".to_owned());
        let p =
            ScenarioPlan::from_env(default_scenarios(Target::Kind), Target::Kind, vars).unwrap();
        let kill = &p.scenarios[2];
        assert_eq!(
            (kill.scenario, kill.name.as_str()),
            (Scenario::DbPrimaryKill, "cnpg-primary-kill")
        );
        assert_eq!(kill.duration_seconds, 100);
        assert_eq!(kill.max_outage_seconds, 10);
        assert_eq!(p.load_seconds(), 60 + 135 + 100 + 180 + 180 + 180 + 60);
        let local =
            ScenarioPlan::from_env(default_scenarios(Target::Local), Target::Local, |_| None)
                .unwrap();
        assert_eq!(local.load_seconds(), 60 + 135 + 120 + 120 + 90 + 90 + 30);
    }
}
