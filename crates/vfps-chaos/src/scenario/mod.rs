//! Scenarios: named faults with durations, run in sequence under one load window.
//!
//! # Layout
//! - this file: [`Scenario`] (what a fault is), [`ScenarioName`] (the name a run
//!   planned it under), [`ScenarioPlan`] (the scenarios in order and the load
//!   window computed from them).
//! - [`events`]: the chaos timeline — typed events on the load's clock, and the
//!   scenario windows read from it.
//! - [`drill`]: `db-restore-drill`, which runs after the load window.

use std::time::Duration;

use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::target::Target;

pub mod drill;
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
    /// The primary's every process stopped past the leader TTL, then resumed.
    DbPrimaryPause,
    /// The primary cut off from the other instances (not from vfps or the
    /// control plane), then killed.
    DbPrimaryIsolation,
    /// The promoted primary killed as soon as it is promoted.
    DbDoubleFailover,
    /// The synchronous standby killed under load.
    DbSyncStandbyKill,
    /// One vfps replica stopped (SIGSTOP) past the call deadline, then resumed.
    VfpsPodPause,
    /// One vfps replica cut off from the database only.
    VfpsPartition,
    /// Latency to the database (200 ms ± 50 ms; Kubernetes only: the local
    /// kernel has no netem).
    DbNetworkDelay,
    /// The replica running a CSV job killed (SIGKILL) once it checkpointed.
    JobRunnerKill,
    /// The replica running a CSV job stopped (SIGSTOP) past the job's lease.
    JobRunnerPause,
    /// One node of the jobs' object store killed, then started again.
    ObjectsNodeKill,
}

impl Scenario {
    pub const ALL: [Scenario; 16] = [
        Scenario::Baseline,
        Scenario::VfpsPodKill,
        Scenario::DbPrimaryKill,
        Scenario::DbNetworkPartition,
        Scenario::Rollout,
        Scenario::Drain,
        Scenario::DbPrimaryPause,
        Scenario::DbPrimaryIsolation,
        Scenario::DbDoubleFailover,
        Scenario::DbSyncStandbyKill,
        Scenario::VfpsPodPause,
        Scenario::VfpsPartition,
        Scenario::DbNetworkDelay,
        Scenario::JobRunnerKill,
        Scenario::JobRunnerPause,
        Scenario::ObjectsNodeKill,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::VfpsPodKill => "vfps-pod-kill",
            Scenario::DbPrimaryKill => "db-primary-kill",
            Scenario::DbNetworkPartition => "db-network-partition",
            Scenario::Rollout => "rollout",
            Scenario::Drain => "drain",
            Scenario::DbPrimaryPause => "db-primary-pause",
            Scenario::DbPrimaryIsolation => "db-primary-isolation",
            Scenario::DbDoubleFailover => "db-double-failover",
            Scenario::DbSyncStandbyKill => "db-sync-standby-kill",
            Scenario::VfpsPodPause => "vfps-pod-pause",
            Scenario::VfpsPartition => "vfps-partition",
            Scenario::DbNetworkDelay => "db-network-delay",
            Scenario::JobRunnerKill => "vfps-job-runner-kill",
            Scenario::JobRunnerPause => "vfps-job-runner-pause",
            Scenario::ObjectsNodeKill => "objects-node-kill",
        }
    }

    /// Why the target cannot do the fault (for a scenario it cannot run).
    fn why_not_on(self, target: Target) -> &'static str {
        match (self, target) {
            (_, Target::Kind) => "Chaos Mesh cannot stop a process (SIGSTOP)",
            (_, Target::Local) => "this kernel has no netem for latency",
        }
    }

    /// Whether the target can do the fault: Chaos Mesh cannot stop a process
    /// (SIGSTOP), and the local kernel has no netem for latency.
    pub fn runs_on(self, target: Target) -> bool {
        match self {
            Scenario::DbPrimaryPause | Scenario::VfpsPodPause | Scenario::JobRunnerPause => {
                target == Target::Local
            }
            Scenario::DbNetworkDelay => target == Target::Kind,
            _ => true,
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
            Scenario::DbPrimaryPause => (60, 0),
            Scenario::DbPrimaryIsolation => (60, 240),
            Scenario::DbDoubleFailover => (90, 300),
            Scenario::DbSyncStandbyKill => (45, 180),
            Scenario::VfpsPodPause => (40, 0),
            Scenario::VfpsPartition => (65, 120),
            Scenario::DbNetworkDelay => (0, 90),
            // The killed pod is re-created; the job's lease runs out first.
            Scenario::JobRunnerKill => (45, 120),
            Scenario::JobRunnerPause => (40, 0),
            // The killed Garage pod is re-created, restarts and reconnects.
            Scenario::ObjectsNodeKill => (40, 120),
        };
        Duration::from_secs(match target {
            Target::Local => local,
            Target::Kind => kind,
        })
    }

    /// Per-scenario budget of the longest outage (seconds); the reasons and
    /// the measurements behind them are in docs/chaos.md.
    pub fn default_max_outage(self) -> u64 {
        match self {
            Scenario::DbPrimaryKill => 10,
            Scenario::DbNetworkPartition => 25,
            Scenario::DbPrimaryPause => 15,
            Scenario::DbPrimaryIsolation => 30,
            Scenario::DbDoubleFailover => 40,
            Scenario::DbSyncStandbyKill => 5,
            Scenario::VfpsPodPause | Scenario::VfpsPartition => 0,
            Scenario::DbNetworkDelay => 0,
            Scenario::JobRunnerKill | Scenario::JobRunnerPause | Scenario::ObjectsNodeKill => 0,
            Scenario::Baseline | Scenario::VfpsPodKill | Scenario::Rollout | Scenario::Drain => 0,
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
            "baseline,vfps-pod-kill,db-primary-kill,db-network-partition,rollout,drain,\
             db-primary-pause,db-primary-isolation,db-sync-standby-kill,vfps-pod-pause,\
             vfps-partition,vfps-job-runner-kill,vfps-job-runner-pause,objects-node-kill,\
             db-double-failover,db-restore-drill"
        }
        Target::Kind => {
            "baseline,vfps-pod-kill,cnpg-primary-kill,db-network-partition,rollout,drain,\
             db-primary-isolation,db-sync-standby-kill,vfps-partition,db-network-delay,\
             vfps-job-runner-kill,objects-node-kill,db-double-failover,db-restore-drill"
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
    /// Whether its own outage budget decides the run, or is only reported next
    /// to the run's global budgets (`SCENARIO_GATES`, `MAX_OUTAGE_<NAME>`).
    pub gate: bool,
    /// What the run's seed decided for it.
    pub draw: Draw,
}

/// What the run's seed decided for one scenario: when in its window the first
/// fault comes, and in which order it picks vfps replicas (indexes into the
/// replicas sorted by name). Which database instance a fault hits is its role
/// (the primary, the synchronous standby), not a draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Draw {
    pub first_fault_after_seconds: f64,
    pub replica_order: Vec<usize>,
}

impl Draw {
    /// Replicas in index order, the fault at once: a plan not yet drawn.
    pub fn undrawn() -> Self {
        Draw {
            first_fault_after_seconds: 0.0,
            replica_order: (0..REPLICAS).collect(),
        }
    }

    /// The first fault is at most a tenth of the window late, and never more
    /// than 3 s; the replica order is a permutation.
    fn from(rng: &mut StdRng, duration_seconds: u64) -> Self {
        let latest_tenths = (duration_seconds.min(30) as u32).max(1);
        let tenths = rng.random_range(0..=latest_tenths);
        let mut order: Vec<usize> = (0..REPLICAS).collect();
        order.shuffle(rng);
        Draw {
            first_fault_after_seconds: f64::from(tenths) / 10.0,
            replica_order: order,
        }
    }

    /// The replica the `round`-th fault of the scenario hits, among `n`.
    pub fn replica(&self, round: usize, n: usize) -> usize {
        let order = &self.replica_order;
        if order.is_empty() || n == 0 {
            return 0;
        }
        order[round % order.len()] % n
    }

    pub fn first_fault_after(&self) -> Duration {
        Duration::from_secs_f64(self.first_fault_after_seconds)
    }
}

/// vfps replicas in the topology (three zones).
const REPLICAS: usize = 3;

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
    /// The seed the fault schedule was drawn from (the workload's seed too).
    pub seed: Option<u64>,
    /// The restore drill, when listed: after the load window, not in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drill: Option<drill::DrillPlan>,
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
        // Per-scenario budgets gate the local run (its gray faults' budgets are
        // the point of it); on Kubernetes the run's global budgets decide, as
        // the upstream design has it, and per-scenario figures are reported.
        let gates_by_default = match var("SCENARIO_GATES").as_deref().map(str::trim) {
            None | Some("") => target == Target::Local,
            Some("on" | "true") => true,
            Some("off" | "false") => false,
            Some(other) => return Err(err(format!("SCENARIO_GATES={other:?} is not on or off"))),
        };
        let mut scenarios = Vec::new();
        let mut restore_drill = None;
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        for (i, name) in names.iter().copied().enumerate() {
            if name == drill::NAME {
                // It destroys the database: nothing may run after it.
                if i + 1 != names.len() {
                    return Err(err(format!(
                        "scenario {name:?} must be the last one listed: it destroys every database instance"
                    )));
                }
                restore_drill = Some(drill::DrillPlan::from_env(&var)?);
                continue;
            }
            let scenario = Scenario::parse(name).ok_or_else(|| {
                err(format!(
                    "unknown scenario {name:?} (known: {}, cnpg-primary-kill, {})",
                    Scenario::ALL.map(Scenario::name).join(", "),
                    drill::NAME
                ))
            })?;
            if !scenario.runs_on(target) {
                return Err(err(format!(
                    "scenario {name:?} cannot run on {}: {}",
                    target.name(),
                    scenario.why_not_on(target)
                )));
            }
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
            let budget_var = duration_var.replace("DURATION_", "MAX_OUTAGE_");
            // A budget set explicitly is meant: it gates.
            let gate = gates_by_default || var(&budget_var).is_some();
            let budget = seconds(budget_var, scenario.default_max_outage())?;
            scenarios.push(Planned {
                scenario,
                name: ScenarioName::new(name),
                duration_seconds: duration,
                max_outage_seconds: budget,
                gate,
                draw: Draw::undrawn(),
            });
        }
        if scenarios.is_empty() {
            // The drill judges nothing without a run's load before it.
            return Err(err(
                "no scenarios selected (besides the restore drill)".into()
            ));
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
            seed: None,
            drill: restore_drill,
        })
    }

    /// Draws the fault schedule from `seed`: the same seed, the same schedule.
    pub fn drawn(mut self, seed: u64) -> Self {
        for (i, s) in self.scenarios.iter_mut().enumerate() {
            let mut rng =
                StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            s.draw = Draw::from(&mut rng, s.duration_seconds);
        }
        self.seed = Some(seed);
        self
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
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let list = "baseline,vfps-pod-kill,vfps-partition,db-primary-kill";
        let plan = || ScenarioPlan::from_env(list, Target::Local, |_| None).unwrap();
        let a = plan().drawn(42);
        let b = plan().drawn(42);
        let draws = |p: &ScenarioPlan| {
            p.scenarios
                .iter()
                .map(|s| s.draw.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(&a), draws(&b));
        assert_eq!(a.seed, Some(42));
        let differs = (0..20u64).any(|s| draws(&plan().drawn(s)) != draws(&a));
        assert!(differs, "every seed drew the same schedule");
        for s in &a.scenarios {
            let mut order = s.draw.replica_order.clone();
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2], "a permutation of the replicas");
            assert!(s.draw.first_fault_after_seconds <= 3.0);
            assert!(s.draw.first_fault_after_seconds * 10.0 <= s.duration_seconds as f64);
        }
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["seed"], 42);
        assert!(json["scenarios"][1]["draw"]["replica_order"].is_array());
    }

    #[test]
    fn the_restore_drill_is_planned_after_the_load_window_and_only_last() {
        let p = ScenarioPlan::from_env("baseline,db-restore-drill", Target::Local, |k| {
            (k == "DURATION_BASELINE").then(|| "10".into())
        })
        .unwrap();
        assert_eq!(p.scenarios.len(), 1, "not a window of the load");
        assert_eq!(p.load_seconds(), 10 + 30);
        assert_eq!(p.drill.as_ref().unwrap().name.as_str(), drill::NAME);
        let e = ScenarioPlan::from_env("db-restore-drill,baseline", Target::Local, |_| None)
            .unwrap_err();
        assert!(e.0.contains("must be the last"), "{e}");
        let k =
            ScenarioPlan::from_env("baseline,db-restore-drill", Target::Kind, |_| None).unwrap();
        assert!(k.drill.is_some(), "kind runs the drill too");
        let e = ScenarioPlan::from_env("db-restore-drill", Target::Local, |_| None).unwrap_err();
        assert!(e.0.contains("besides the restore drill"), "{e}");
        let e = ScenarioPlan::from_env("baseline,db-restore-drill", Target::Local, |k| {
            (k == "RESTORE_DRILL_TO").then(|| "never".into())
        })
        .unwrap_err();
        assert!(e.0.contains("RESTORE_DRILL_TO=\"never\""), "{e}");
    }

    #[test]
    fn a_scenario_the_target_cannot_do_is_refused_naming_why() {
        let e = ScenarioPlan::from_env("baseline,db-primary-pause", Target::Kind, |_| None)
            .unwrap_err();
        assert!(
            e.0.contains("db-primary-pause") && e.0.contains("SIGSTOP"),
            "{e}"
        );
        let e = ScenarioPlan::from_env("db-network-delay", Target::Local, |_| None).unwrap_err();
        assert!(e.0.contains("netem"), "{e}");
        assert!(ScenarioPlan::from_env("db-network-delay", Target::Kind, |_| None).is_ok());
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
        assert_eq!(
            p.load_seconds(),
            60 + 135 + 100 + 180 + 180 + 180 + 240 + 180 + 120 + 90 + 120 + 120 + 300 + 60
        );
        let local =
            ScenarioPlan::from_env(default_scenarios(Target::Local), Target::Local, |_| None)
                .unwrap();
        assert_eq!(
            local.load_seconds(),
            60 + 135 + 120 + 120 + 90 + 90 + 60 + 60 + 45 + 40 + 65 + 45 + 40 + 40 + 90 + 30
        );
    }
}
