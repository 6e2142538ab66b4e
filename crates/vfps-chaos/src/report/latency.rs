//! Latency per operation — p50, p99 and max of each operation's calls for the
//! whole run and for each scenario's window — from `latency.csv`'s buckets
//! (each figure within 9 % above the true value), for `summary.json` and the
//! page. Apart because the operations wait differently by design: a
//! namespace delete (a churn step) waits out a cache lease of about 1 s, which
//! mixed in would be every other second's p99.

use std::{collections::BTreeMap, path::Path};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::{
    history::latency::{self, Percentiles},
    operation::Operation,
    scenario::{
        events::{self, Window},
        ScenarioName,
    },
};

/// Latency per operation, for `summary.json`; empty when the run kept no
/// per-operation buckets (a load generator elsewhere, an older harness).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyByOperation {
    /// The whole load window; only operations with answered calls.
    pub run: BTreeMap<Operation, Percentiles>,
    /// Each scenario's window, in the chaos timeline's order.
    pub scenarios: Vec<ScenarioLatency>,
}

/// Latency per operation within one scenario's window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioLatency {
    pub scenario: ScenarioName,
    pub operations: BTreeMap<Operation, Percentiles>,
}

impl LatencyByOperation {
    pub fn is_empty(&self) -> bool {
        self.run.is_empty()
    }
}

fn of_window(
    per_second: &[latency::Second],
    start: f64,
    end: f64,
) -> BTreeMap<Operation, Percentiles> {
    // To the microsecond, up: still upper bounds, and readable in JSON.
    let up = |ms: f64| (ms * 1000.0).ceil() / 1000.0;
    Operation::ALL
        .into_iter()
        .filter_map(|op| {
            let p = latency::operation_percentiles(per_second, op, start..end)?;
            Some((
                op,
                Percentiles {
                    calls: p.calls,
                    p50_ms: up(p.p50_ms),
                    p99_ms: up(p.p99_ms),
                    max_ms: up(p.max_ms),
                },
            ))
        })
        .collect()
}

/// Each operation's percentiles over the run and within each window.
pub fn by_operation(per_second: &[latency::Second], windows: &[Window]) -> LatencyByOperation {
    LatencyByOperation {
        run: of_window(per_second, 0.0, f64::INFINITY),
        scenarios: windows
            .iter()
            .map(|w| ScenarioLatency {
                scenario: w.scenario.clone(),
                operations: of_window(per_second, w.start_seconds, w.end_seconds),
            })
            .collect(),
    }
}

/// The latency per operation of a run directory: `latency.csv`, per scenario
/// when `chaos-timeline.csv` names them; `None` without `latency.csv`.
pub fn read(dir: &Path) -> anyhow::Result<Option<LatencyByOperation>> {
    let Some(text) = read_if_present(&dir.join("latency.csv"))? else {
        return Ok(None);
    };
    let per_second = latency::parse(&text).context("latency.csv")?;
    let windows = match read_if_present(&dir.join("chaos-timeline.csv"))? {
        Some(text) => {
            events::windows(&events::parse_chaos_csv(&text).context("chaos-timeline.csv")?)
        }
        None => Vec::new(),
    };
    Ok(Some(by_operation(&per_second, &windows)))
}

fn read_if_present(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        history::timeline::{Event, Timeline},
        report::timeline_csv,
        scenario::events::{ChaosEvent, EventKind},
    };
    use std::time::Duration;

    /// Ten seconds at 10 Creates a second, 3–5 ms each, and a churn step a
    /// second; only the namespace deletes (seconds 5 to 9, the second
    /// scenario) wait out their 1 s lease.
    fn only_deletes_slow() -> Timeline {
        let t = Timeline::new(10);
        for second in 0..10 {
            for i in 0..10 {
                let at = Some(Duration::from_micros(3_000 + 200 * i));
                t.record(second, Operation::Create, Event::Offered, None);
                t.record(second, Operation::Create, Event::Ok, at);
            }
            let step = if second >= 5 {
                Duration::from_millis(1_000)
            } else {
                Duration::from_millis(4)
            };
            t.record(second, Operation::Churn, Event::Offered, None);
            t.record(second, Operation::Churn, Event::Ok, Some(step));
        }
        t
    }

    fn window(name: &str, start: f64, end: f64) -> Window {
        Window {
            scenario: ScenarioName::new(name),
            start_seconds: start,
            end_seconds: end,
        }
    }

    #[test]
    fn a_run_where_only_deletes_are_slow_shows_slow_deletes_and_fast_creates() {
        let t = only_deletes_slow();
        let windows = [window("baseline", 0.0, 5.0), window("deletes", 5.0, 10.0)];
        let per_second = latency::parse(&latency::csv(&t.latency_buckets())).unwrap();
        let l = by_operation(&per_second, &windows);

        let create = l.run[&Operation::Create];
        assert_eq!(create.calls, 100);
        assert!(create.p99_ms < 5.0 && create.max_ms < 5.0, "{create:?}");
        let churn = l.run[&Operation::Churn];
        assert_eq!(churn.calls, 10);
        assert!(churn.p99_ms >= 1000.0 && churn.p99_ms < 1091.0, "{churn:?}");
        assert!(!l.run.contains_key(&Operation::Get));

        let [baseline, deletes] = &l.scenarios[..] else {
            panic!("{l:?}")
        };
        assert!(
            baseline.operations[&Operation::Churn].max_ms < 5.0,
            "{baseline:?}"
        );
        assert!(
            deletes.operations[&Operation::Churn].p50_ms >= 1000.0,
            "{deletes:?}"
        );
        assert!(
            deletes.operations[&Operation::Create].p99_ms < 5.0,
            "{deletes:?}"
        );

        // The per-second timeline says the same, second by second.
        let rows = crate::history::parse_timeline(&timeline_csv(&t.rows())).unwrap();
        for r in &rows {
            assert!(r.op_p99_ms[Operation::Create.index()] < 5.0, "{r:?}");
            let churn = r.op_p99_ms[Operation::Churn.index()];
            assert_eq!(churn >= 1000.0, r.second >= 5, "{r:?}");
        }

        // summary.json spells the operations and scenarios by name.
        let json = serde_json::to_value(&l).unwrap();
        assert!(
            json["run"]["churn"]["p99_ms"].as_f64().unwrap() >= 1000.0,
            "{json}"
        );
        assert_eq!(json["scenarios"][1]["scenario"], "deletes");
        assert_eq!(
            serde_json::from_value::<LatencyByOperation>(json).unwrap(),
            l
        );
    }

    #[test]
    fn a_run_directory_is_read_with_its_scenarios_and_without_them() {
        let dir = vfps_testkit::scratch_dir("report-latency");
        assert_eq!(read(&dir).unwrap(), None, "no latency.csv");
        let t = only_deletes_slow();
        std::fs::write(dir.join("latency.csv"), latency::csv(&t.latency_buckets())).unwrap();
        let alone = read(&dir).unwrap().unwrap();
        assert!(alone.scenarios.is_empty());
        assert_eq!(alone.run[&Operation::Create].calls, 100);
        let chaos = [(0.0, EventKind::Start), (5.0, EventKind::End)].map(|(at, kind)| ChaosEvent {
            at_seconds: at,
            scenario: Some(ScenarioName::new("baseline")),
            kind,
            text: String::new(),
        });
        std::fs::write(dir.join("chaos-timeline.csv"), events::chaos_csv(&chaos)).unwrap();
        let with = read(&dir).unwrap().unwrap();
        assert_eq!(with.scenarios.len(), 1);
        assert!(with.scenarios[0].operations[&Operation::Churn].max_ms < 5.0);
        // An old latency.csv: no per-operation figures, not an error.
        std::fs::write(dir.join("latency.csv"), "second,buckets\n0,90:1\n").unwrap();
        assert!(read(&dir).unwrap().unwrap().is_empty());
    }
}
