//! The chaos timeline: what the nemesis did, on the load's clock, as typed events
//! (`chaos-timeline.csv`), and the scenario windows read from it.

use serde::Serialize;

use super::ScenarioName;

/// What an event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A scenario's window begins.
    Start,
    /// A scenario's window ends.
    End,
    /// A fault took effect (a kill, a partition applied, a node drained).
    Fault,
    /// A fault healed, proven by the topology's state.
    Heal,
    /// Anything else worth reading (a promotion, an error, an overrun).
    Note,
}

impl EventKind {
    fn name(self) -> &'static str {
        match self {
            EventKind::Start => "start",
            EventKind::End => "end",
            EventKind::Fault => "fault",
            EventKind::Heal => "heal",
            EventKind::Note => "note",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        [
            EventKind::Start,
            EventKind::End,
            EventKind::Fault,
            EventKind::Heal,
            EventKind::Note,
        ]
        .into_iter()
        .find(|k| k.name() == raw)
    }
}

/// One line of `chaos-timeline.csv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChaosEvent {
    /// Seconds since the load window started (the generator's clock).
    pub at_seconds: f64,
    /// The scenario it belongs to; `None` for the harness itself (e.g. the load
    /// generator failed).
    pub scenario: Option<ScenarioName>,
    pub kind: EventKind,
    /// For people.
    pub text: String,
}

const HEADER: &str = "timestamp,scenario,kind,event";

/// A chaos timeline that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chaos timeline: {0}")]
pub struct TimelineError(String);

pub fn chaos_csv(events: &[ChaosEvent]) -> String {
    let mut s = format!("{HEADER}\n");
    for e in events {
        s.push_str(&format!(
            "{:.3},{},{},{}\n",
            e.at_seconds,
            e.scenario.as_ref().map_or("", ScenarioName::as_str),
            e.kind.name(),
            e.text.replace('\n', " ")
        ));
    }
    s
}

/// Reads `chaos-timeline.csv` back.
pub fn parse_chaos_csv(text: &str) -> Result<Vec<ChaosEvent>, TimelineError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    if lines.next() != Some(HEADER) {
        return Err(TimelineError(format!(
            "must start with the header {HEADER}"
        )));
    }
    lines
        .map(|l| {
            let bad = || TimelineError(format!("malformed row {l:?}"));
            let mut f = l.splitn(4, ',');
            let (Some(t), Some(s), Some(k), Some(e)) = (f.next(), f.next(), f.next(), f.next())
            else {
                return Err(bad());
            };
            Ok(ChaosEvent {
                at_seconds: t.parse().map_err(|_| bad())?,
                scenario: (!s.is_empty()).then(|| ScenarioName::new(s)),
                kind: EventKind::parse(k).ok_or_else(bad)?,
                text: e.to_owned(),
            })
        })
        .collect()
}

/// A scenario's window in load seconds, from its `Start` and `End` events.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub scenario: ScenarioName,
    pub start_seconds: f64,
    pub end_seconds: f64,
}

/// Every scenario's window; a scenario that started and never ended runs to
/// the end of the load.
pub fn windows(events: &[ChaosEvent]) -> Vec<Window> {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Start)
        .filter_map(|start| {
            let scenario = start.scenario.clone()?;
            let end = events
                .iter()
                .find(|x| {
                    x.kind == EventKind::End
                        && x.scenario.as_ref() == Some(&scenario)
                        && x.at_seconds >= start.at_seconds
                })
                .map_or(f64::INFINITY, |x| x.at_seconds);
            Some(Window {
                scenario,
                start_seconds: start.at_seconds,
                end_seconds: end,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: f64, scenario: Option<&str>, kind: EventKind, text: &str) -> ChaosEvent {
        ChaosEvent {
            at_seconds: at,
            scenario: scenario.map(ScenarioName::new),
            kind,
            text: text.into(),
        }
    }

    #[test]
    fn the_chaos_timeline_round_trips() {
        let events = vec![
            event(1.5, Some("drain"), EventKind::Start, "start"),
            event(
                2.0,
                Some("drain"),
                EventKind::Fault,
                "node a down, then back",
            ),
            event(2.5, None, EventKind::Note, "the load generator Job failed"),
        ];
        assert_eq!(parse_chaos_csv(&chaos_csv(&events)).unwrap(), events);
        assert!(parse_chaos_csv("x\n").is_err());
        assert!(parse_chaos_csv(&format!("{HEADER}\nnope,a,start,b")).is_err());
        assert!(parse_chaos_csv(&format!("{HEADER}\n1.0,a,exploded,b")).is_err());
    }

    #[test]
    fn windows_come_from_start_and_end_events_only() {
        let events = vec![
            event(0.0, Some("baseline"), EventKind::Start, "start"),
            event(1.0, Some("baseline"), EventKind::Note, "end of the world"),
            event(4.0, Some("baseline"), EventKind::End, "end"),
            event(4.0, Some("drain"), EventKind::Start, "start"),
            event(5.0, None, EventKind::Note, "harness"),
        ];
        let w = windows(&events);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].start_seconds, w[0].end_seconds), (0.0, 4.0));
        assert_eq!(w[1].end_seconds, f64::INFINITY, "never ended");
    }
}
