//! Scenarios: named faults with durations, run in sequence under one load window,
//! and the attribution of every second of load to the scenario it was offered in.

use std::time::Duration;

use serde::Serialize;

use crate::{
    checker::{self, Availability, Validity, Verdict},
    history::Row,
    platform::Target,
};

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Baseline,
    VfpsPodKill,
    DbPrimaryKill,
    DbNetworkPartition,
    Rollout,
    Drain,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Baseline,
        Kind::VfpsPodKill,
        Kind::DbPrimaryKill,
        Kind::DbNetworkPartition,
        Kind::Rollout,
        Kind::Drain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::VfpsPodKill => "vfps-pod-kill",
            Kind::DbPrimaryKill => "db-primary-kill",
            Kind::DbNetworkPartition => "db-network-partition",
            Kind::Rollout => "rollout",
            Kind::Drain => "drain",
        }
    }

    /// A scenario by name; `cnpg-primary-kill` is the Kubernetes name of
    /// `db-primary-kill` (the database there is CloudNativePG).
    pub fn parse(name: &str) -> Option<Kind> {
        match name.trim() {
            "cnpg-primary-kill" => Some(Kind::DbPrimaryKill),
            n => Kind::ALL.into_iter().find(|k| k.name() == n),
        }
    }

    /// Default length of the scenario's window. Kubernetes is slower to heal (a
    /// CloudNativePG instance is re-created, a rollout schedules pods), so its
    /// windows are longer.
    fn default_duration(self, target: Target) -> Duration {
        let (local, kind) = match self {
            Kind::Baseline => (60, 60),
            Kind::VfpsPodKill => (135, 135),
            Kind::DbPrimaryKill => (120, 240),
            Kind::DbNetworkPartition => (120, 180),
            Kind::Rollout => (90, 180),
            Kind::Drain => (90, 180),
        };
        Duration::from_secs(match target {
            Target::Local => local,
            Target::Kind => kind,
        })
    }

    /// Per-scenario budget of the longest outage (seconds).
    pub fn default_max_outage(self) -> u64 {
        match self {
            Kind::DbPrimaryKill => 10,
            Kind::DbNetworkPartition => 25,
            _ => 0,
        }
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
    pub kind: Kind,
    /// The name it was asked for by; names its window in the timeline and its
    /// `DURATION_*` / `MAX_OUTAGE_*` variables.
    pub name: String,
    pub duration_seconds: u64,
    pub max_outage_seconds: u64,
}

/// The run's plan: scenarios in order and the load window computed from them —
/// in one place, so load and chaos cannot disagree.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub scenarios: Vec<Planned>,
    pub margin_seconds: u64,
}

impl Plan {
    /// From a comma-separated list and a variable lookup (`DURATION_*`,
    /// `MAX_OUTAGE_*`, `LOAD_MARGIN_SECONDS`), with the target's defaults.
    pub fn from_env(
        list: &str,
        target: Target,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Plan, String> {
        let mut scenarios = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let kind = Kind::parse(name).ok_or_else(|| {
                format!(
                    "unknown scenario {name:?} (known: {}, cnpg-primary-kill)",
                    Kind::ALL.map(Kind::name).join(", ")
                )
            })?;
            if scenarios.iter().any(|p: &Planned| p.name == name) {
                return Err(format!(
                    "scenario {name:?} is listed twice; its window would be ambiguous"
                ));
            }
            let seconds = |key: String, default: u64| -> Result<u64, String> {
                match var(&key) {
                    None => Ok(default),
                    Some(v) => v
                        .trim()
                        .parse()
                        .map_err(|_| format!("{key}={v:?} is not a whole number of seconds")),
                }
            };
            let duration_var = duration_variable(name);
            let duration = seconds(
                duration_var.clone(),
                kind.default_duration(target).as_secs(),
            )?;
            if duration == 0 {
                return Err(format!("{duration_var} must be at least 1"));
            }
            let budget = seconds(
                duration_var.replace("DURATION_", "MAX_OUTAGE_"),
                kind.default_max_outage(),
            )?;
            scenarios.push(Planned {
                kind,
                name: name.to_owned(),
                duration_seconds: duration,
                max_outage_seconds: budget,
            });
        }
        if scenarios.is_empty() {
            return Err("no scenarios selected".into());
        }
        let margin = match var("LOAD_MARGIN_SECONDS") {
            None => match target {
                Target::Local => 30,
                Target::Kind => 60,
            },
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| format!("LOAD_MARGIN_SECONDS={v:?} is not a whole number"))?,
        };
        Ok(Plan {
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
}

/// One line of `chaos-timeline.csv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChaosEvent {
    /// Seconds since the load window started (the generator's clock).
    pub at_seconds: f64,
    pub scenario: String,
    pub event: String,
}

pub fn chaos_csv(events: &[ChaosEvent]) -> String {
    let mut s = String::from("timestamp,scenario,event\n");
    for e in events {
        s.push_str(&format!("{:.3},{},{}\n", e.at_seconds, e.scenario, e.event));
    }
    s
}

/// Reads `chaos-timeline.csv` back.
pub fn parse_chaos_csv(text: &str) -> Result<Vec<ChaosEvent>, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    if lines.next() != Some("timestamp,scenario,event") {
        return Err("chaos timeline must start with the header timestamp,scenario,event".into());
    }
    lines
        .map(|l| {
            let mut f = l.splitn(3, ',');
            let (Some(t), Some(s), Some(e)) = (f.next(), f.next(), f.next()) else {
                return Err(format!("malformed chaos timeline row {l:?}"));
            };
            Ok(ChaosEvent {
                at_seconds: t
                    .parse()
                    .map_err(|_| format!("malformed timestamp in {l:?}"))?,
                scenario: s.to_owned(),
                event: e.to_owned(),
            })
        })
        .collect()
}

/// A scenario's window in load seconds, from its `start` and `end` events.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub scenario: String,
    pub start_seconds: f64,
    pub end_seconds: f64,
}

pub fn windows(events: &[ChaosEvent]) -> Vec<Window> {
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e.event == "start") {
        let end = events
            .iter()
            .find(|x| x.scenario == e.scenario && x.event == "end" && x.at_seconds >= e.at_seconds)
            .map_or(f64::INFINITY, |x| x.at_seconds);
        out.push(Window {
            scenario: e.scenario.clone(),
            start_seconds: e.at_seconds,
            end_seconds: end,
        });
    }
    out
}

/// P1 per scenario: each second belongs to the scenario during which it began.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub scenario: String,
    pub availability: Availability,
    pub max_outage_seconds: u64,
    pub verdict: Verdict,
}

pub fn attribute(rows: &[Row], windows: &[Window], plan: &Plan, rate: u32) -> Vec<ScenarioResult> {
    windows
        .iter()
        .map(|w| {
            let inside: Vec<Row> = rows
                .iter()
                .filter(|r| {
                    (r.second as f64) >= w.start_seconds.floor()
                        && (r.second as f64) < w.end_seconds
                })
                .cloned()
                .collect();
            let a = checker::availability(&inside, rate);
            let budget = plan
                .scenarios
                .iter()
                .find(|p| p.name == w.scenario)
                .map_or(0, |p| p.max_outage_seconds);
            let ok = a.longest_outage_seconds <= budget;
            ScenarioResult {
                scenario: w.scenario.clone(),
                availability: a,
                max_outage_seconds: budget,
                verdict: Verdict {
                    property: "P1-scenario-outage".into(),
                    validity: if ok {
                        Validity::Valid
                    } else {
                        Validity::Invalid
                    },
                    summary: format!(
                        "{}: longest outage {} s (budget {} s), unavailable {:.2} s",
                        w.scenario, a.longest_outage_seconds, budget, a.unavailable_seconds
                    ),
                    evidence: Vec::new(),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(second: u64, ok: u64) -> Row {
        Row {
            second,
            offered: 10,
            ok,
            failed: 10 - ok,
            shed: 0,
            mean_ms: 1.0,
            p50_ms: 1.0,
            p99_ms: 1.0,
            max_ms: 1.0,
        }
    }

    #[test]
    fn the_load_window_is_the_sum_of_durations_plus_margin() {
        let vars = |k: &str| match k {
            "DURATION_BASELINE" => Some("10".to_owned()),
            "DURATION_DB_PRIMARY_KILL" => Some("40".to_owned()),
            "LOAD_MARGIN_SECONDS" => Some("5".to_owned()),
            _ => None,
        };
        let p = Plan::from_env("baseline,db-primary-kill", Target::Local, vars).unwrap();
        assert_eq!(p.load_seconds(), 55);
        assert_eq!(p.scenarios[1].max_outage_seconds, 10);
        assert!(Plan::from_env("baseline,nope", Target::Local, |_| None)
            .unwrap_err()
            .contains("nope"));
        assert!(
            Plan::from_env("baseline", Target::Local, |k| (k == "DURATION_BASELINE")
                .then(|| "x".into()))
            .unwrap_err()
            .contains("DURATION_BASELINE=\"x\"")
        );
        assert!(Plan::from_env("baseline,baseline", Target::Local, |_| None)
            .unwrap_err()
            .contains("twice"));
        assert!(Plan::from_env(" , ", Target::Local, |_| None).is_err());
    }

    #[test]
    fn kubernetes_names_the_primary_kill_after_cloudnativepg_and_has_longer_windows() {
        let vars = |k: &str| (k == "DURATION_CNPG_PRIMARY_KILL").then(|| "100".to_owned());
        let p = Plan::from_env(default_scenarios(Target::Kind), Target::Kind, vars).unwrap();
        let kill = &p.scenarios[2];
        assert_eq!(
            (kill.kind, kill.name.as_str()),
            (Kind::DbPrimaryKill, "cnpg-primary-kill")
        );
        assert_eq!(kill.duration_seconds, 100);
        assert_eq!(kill.max_outage_seconds, 10);
        assert_eq!(p.load_seconds(), 60 + 135 + 100 + 180 + 180 + 180 + 60);
        let local =
            Plan::from_env(default_scenarios(Target::Local), Target::Local, |_| None).unwrap();
        assert_eq!(local.load_seconds(), 60 + 135 + 120 + 120 + 90 + 90 + 30);
    }

    #[test]
    fn the_chaos_timeline_round_trips() {
        let events = vec![
            ChaosEvent {
                at_seconds: 1.5,
                scenario: "drain".into(),
                event: "start".into(),
            },
            ChaosEvent {
                at_seconds: 2.0,
                scenario: "drain".into(),
                event: "node a down, then back".into(),
            },
        ];
        assert_eq!(parse_chaos_csv(&chaos_csv(&events)).unwrap(), events);
        assert!(parse_chaos_csv("x\n").is_err());
        assert!(parse_chaos_csv("timestamp,scenario,event\nnope,a,b").is_err());
    }

    #[test]
    fn failures_are_attributed_to_the_scenario_they_were_offered_in() {
        let rows: Vec<Row> = (0..10)
            .map(|s| row(s, if (5..8).contains(&s) { 0 } else { 10 }))
            .collect();
        let events = vec![
            ChaosEvent {
                at_seconds: 0.2,
                scenario: "baseline".into(),
                event: "start".into(),
            },
            ChaosEvent {
                at_seconds: 4.0,
                scenario: "baseline".into(),
                event: "end".into(),
            },
            ChaosEvent {
                at_seconds: 4.0,
                scenario: "db-primary-kill".into(),
                event: "start".into(),
            },
            ChaosEvent {
                at_seconds: 9.5,
                scenario: "db-primary-kill".into(),
                event: "end".into(),
            },
        ];
        let plan = Plan::from_env("baseline,db-primary-kill", Target::Local, |k| {
            (k == "MAX_OUTAGE_DB_PRIMARY_KILL").then(|| "2".into())
        })
        .unwrap();
        let r = attribute(&rows, &windows(&events), &plan, 10);
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
}
