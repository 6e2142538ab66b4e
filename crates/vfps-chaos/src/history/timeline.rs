//! The per-second timeline: offered, ok, failed, shed and latency, by the second
//! in which calls were offered, in all and per operation; `load-timeline.csv`
//! has every column, the seed's marker format (stdout) the six upstream tooling
//! parses by position.

use std::{sync::Mutex, time::Duration};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::ParseError;
use crate::operation::Operation;

/// Calls of one operation in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    pub offered: u64,
    pub ok: u64,
    pub failed: u64,
}

/// One second of the run, by the second in which calls were offered.
pub struct Second {
    pub offered: u64,
    pub ok: u64,
    pub failed: u64,
    pub shed: u64,
    ops: [OpCounts; 6],
    /// Latency from intended send time, in microseconds.
    latency: Histogram<u64>,
}

impl Second {
    fn new() -> Self {
        Self {
            offered: 0,
            ok: 0,
            failed: 0,
            shed: 0,
            ops: [OpCounts::default(); 6],
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }
}

/// The per-second timeline, as a CSV row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub second: u64,
    pub offered: u64,
    pub ok: u64,
    pub failed: u64,
    pub shed: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Per operation, in [`Operation::ALL`] order.
    pub ops: [OpCounts; 6],
}

const BASE_HEADER: &str = "second,offered,ok,failed,shed,mean_ms,p50_ms,p99_ms,max_ms";

/// The header of `load-timeline.csv`: the totals, then offered/ok/failed per
/// operation.
pub fn csv_header() -> String {
    let mut h = BASE_HEADER.to_owned();
    for op in Operation::ALL {
        let n = op.name();
        h.push_str(&format!(",{n}_offered,{n}_ok,{n}_failed"));
    }
    h
}

/// The columns between the timeline markers on stdout, as the seed's tooling
/// reads them by position.
pub const MARKER_HEADER: &str = "second,ok,failed,shed,mean_ms,max_ms";

impl Row {
    /// A second with no calls.
    pub fn empty(second: u64) -> Self {
        Self {
            second,
            offered: 0,
            ok: 0,
            failed: 0,
            shed: 0,
            mean_ms: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            max_ms: 0.0,
            ops: [OpCounts::default(); 6],
        }
    }

    pub fn to_csv(&self) -> String {
        let mut line = format!(
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
            self.second,
            self.offered,
            self.ok,
            self.failed,
            self.shed,
            self.mean_ms,
            self.p50_ms,
            self.p99_ms,
            self.max_ms
        );
        for c in &self.ops {
            line.push_str(&format!(",{},{},{}", c.offered, c.ok, c.failed));
        }
        line
    }

    /// The seed's marker format: six columns, one decimal.
    pub fn to_marker_csv(&self) -> String {
        format!(
            "{},{},{},{},{:.1},{:.1}",
            self.second, self.ok, self.failed, self.shed, self.mean_ms, self.max_ms
        )
    }

    pub fn from_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 9 {
            return None;
        }
        let mut ops = [OpCounts::default(); 6];
        for (i, op) in ops.iter_mut().enumerate() {
            let at = 9 + 3 * i;
            if f.len() >= at + 3 {
                *op = OpCounts {
                    offered: f[at].parse().ok()?,
                    ok: f[at + 1].parse().ok()?,
                    failed: f[at + 2].parse().ok()?,
                };
            }
        }
        Some(Self {
            second: f[0].parse().ok()?,
            offered: f[1].parse().ok()?,
            ok: f[2].parse().ok()?,
            failed: f[3].parse().ok()?,
            shed: f[4].parse().ok()?,
            mean_ms: f[5].parse().ok()?,
            p50_ms: f[6].parse().ok()?,
            p99_ms: f[7].parse().ok()?,
            max_ms: f[8].parse().ok()?,
            ops,
        })
    }

    /// A row of the marker format; offered is what was answered or shed.
    fn from_marker_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 6 {
            return None;
        }
        let (ok, failed, shed) = (f[1].parse().ok()?, f[2].parse().ok()?, f[3].parse().ok()?);
        Some(Self {
            offered: ok + failed + shed,
            ok,
            failed,
            shed,
            mean_ms: f[4].parse().ok()?,
            max_ms: f[5].parse().ok()?,
            ..Self::empty(f[0].parse().ok()?)
        })
    }
}

/// Parses a timeline CSV: `load-timeline.csv`, or the marker format from a
/// load generator's log. A malformed row is an error.
pub fn parse_timeline(text: &str) -> Result<Vec<Row>, ParseError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let parse: fn(&str) -> Option<Row> = match lines.next() {
        Some(h) if h.starts_with(BASE_HEADER) => Row::from_csv,
        Some(h) if h.trim() == MARKER_HEADER => Row::from_marker_csv,
        other => {
            return Err(ParseError(format!(
                "timeline CSV must start with the header {BASE_HEADER:?} or {MARKER_HEADER:?}, found {other:?}"
            )))
        }
    };
    lines
        .map(|l| parse(l).ok_or_else(|| ParseError(format!("malformed timeline row {l:?}"))))
        .collect()
}

/// Thread-safe per-second accumulation.
pub struct Timeline {
    seconds: Mutex<Vec<Second>>,
}

/// What the generator records for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Offered,
    Shed,
    /// Answered by a serving replica (its answer is judged elsewhere).
    Ok,
    /// Not served: unavailable, past its deadline, cut off.
    Failed,
}

impl Timeline {
    pub fn new(seconds: u64) -> Self {
        Self {
            seconds: Mutex::new((0..seconds).map(|_| Second::new()).collect()),
        }
    }

    pub fn record(&self, second: u64, op: Operation, event: Event, latency: Option<Duration>) {
        let Ok(mut s) = self.seconds.lock() else {
            return;
        };
        let i = second as usize;
        while s.len() <= i {
            s.push(Second::new());
        }
        let sec = &mut s[i];
        let per_op = &mut sec.ops[op.index()];
        match event {
            Event::Offered => {
                sec.offered += 1;
                per_op.offered += 1;
            }
            Event::Shed => sec.shed += 1,
            Event::Ok => {
                sec.ok += 1;
                per_op.ok += 1;
            }
            Event::Failed => {
                sec.failed += 1;
                per_op.failed += 1;
            }
        }
        if let Some(l) = latency {
            let micros = u64::try_from(l.as_micros()).unwrap_or(u64::MAX).max(1);
            let _ = sec.latency.record(micros.min(3_600_000_000));
        }
    }

    /// Counts of one second so far: (offered, ok, failed, shed, p99 ms).
    pub fn snapshot(&self, second: u64) -> Option<(u64, u64, u64, u64, f64)> {
        let s = self.seconds.lock().ok()?;
        let sec = s.get(second as usize)?;
        Some((
            sec.offered,
            sec.ok,
            sec.failed,
            sec.shed,
            sec.latency.value_at_quantile(0.99) as f64 / 1000.0,
        ))
    }

    /// Latency percentiles over every second, to the histograms' three
    /// significant digits (not the log buckets' 9 %); `None` without calls.
    pub fn percentiles(&self) -> Option<super::latency::Percentiles> {
        let s = self.seconds.lock().ok()?;
        let mut all = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).ok()?;
        for sec in s.iter() {
            all.add(&sec.latency).ok()?;
        }
        if all.is_empty() {
            return None;
        }
        let ms = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
        Some(super::latency::Percentiles {
            calls: all.len(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
        })
    }

    /// Every second's latencies in log buckets (`latency.csv`).
    pub fn latency_buckets(&self) -> Vec<super::latency::Buckets> {
        let Ok(s) = self.seconds.lock() else {
            return Vec::new();
        };
        s.iter()
            .map(|sec| {
                let mut merged = std::collections::BTreeMap::<u16, u64>::new();
                for v in sec.latency.iter_recorded() {
                    *merged
                        .entry(super::latency::bucket(v.value_iterated_to()))
                        .or_default() += v.count_at_value();
                }
                merged.into_iter().collect()
            })
            .collect()
    }

    pub fn rows(&self) -> Vec<Row> {
        let Ok(s) = self.seconds.lock() else {
            return Vec::new();
        };
        s.iter()
            .enumerate()
            .map(|(i, sec)| {
                let h = &sec.latency;
                let ms = |v: u64| v as f64 / 1000.0;
                let empty = h.is_empty();
                Row {
                    second: i as u64,
                    offered: sec.offered,
                    ok: sec.ok,
                    failed: sec.failed,
                    shed: sec.shed,
                    mean_ms: if empty { 0.0 } else { h.mean() / 1000.0 },
                    p50_ms: if empty {
                        0.0
                    } else {
                        ms(h.value_at_quantile(0.5))
                    },
                    p99_ms: if empty {
                        0.0
                    } else {
                        ms(h.value_at_quantile(0.99))
                    },
                    max_ms: if empty { 0.0 } else { ms(h.max()) },
                    ops: sec.ops,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_csv_round_trips_with_per_operation_columns_and_rejects_garbage() {
        let t = Timeline::new(2);
        t.record(0, Operation::Create, Event::Offered, None);
        t.record(
            0,
            Operation::Create,
            Event::Ok,
            Some(Duration::from_millis(3)),
        );
        t.record(1, Operation::Get, Event::Offered, None);
        t.record(1, Operation::Get, Event::Shed, None);
        let csv: String = std::iter::once(csv_header())
            .chain(t.rows().iter().map(Row::to_csv))
            .collect::<Vec<_>>()
            .join("\n");
        let back = parse_timeline(&csv).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[0].ok, back[1].shed), (1, 1));
        assert_eq!(back[0].ops[Operation::Create.index()].ok, 1);
        assert_eq!(back[1].ops[Operation::Get.index()].offered, 1);
        assert!((back[0].p50_ms - 3.0).abs() < 0.1);
        let all = t.percentiles().unwrap();
        assert_eq!(all.calls, 1);
        assert!((all.p99_ms - 3.0).abs() < 0.01, "{all:?}");
        assert!(Timeline::new(3).percentiles().is_none());
        assert!(parse_timeline("nonsense\n1,2").is_err());
        assert!(parse_timeline(&format!("{BASE_HEADER}\n1,2,3")).is_err());
    }

    #[test]
    fn the_marker_format_is_the_seeds_six_columns() {
        let mut row = Row::empty(7);
        (
            row.offered,
            row.ok,
            row.failed,
            row.shed,
            row.mean_ms,
            row.max_ms,
        ) = (10, 8, 1, 1, 2.345, 9.87);
        assert_eq!(row.to_marker_csv(), "7,8,1,1,2.3,9.9");
        let back = parse_timeline(&format!("{MARKER_HEADER}\n{}", row.to_marker_csv())).unwrap();
        assert_eq!((back[0].offered, back[0].ok, back[0].shed), (10, 8, 1));
        assert!(parse_timeline(&format!("{MARKER_HEADER}\n7,8,1")).is_err());
    }
}
