//! The per-second timeline: offered, ok, failed, shed and latency, by the second
//! in which calls were offered, in all and per operation; `load-timeline.csv`
//! has every column, the seed's marker format (stdout) the six upstream tooling
//! parses by position.
//!
//! Latency is kept per operation too: a namespace delete waits out a cache
//! lease (about 1 s) by design, and mixed into one p99 it would read as a
//! stall in every second with a delete and hide a real one.

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
    ops: [OpCounts; Operation::COUNT],
    /// Latency from intended send time, in microseconds.
    latency: Histogram<u64>,
    /// Each operation's latencies (µs), in [`Operation::ALL`] order: kept
    /// whole (a few calls per second each, 4 bytes a call) rather than as six
    /// more histograms of 190 kB a second.
    op_micros: [Vec<u32>; Operation::COUNT],
}

impl Second {
    fn new() -> Self {
        Self {
            offered: 0,
            ok: 0,
            failed: 0,
            shed: 0,
            ops: [OpCounts::default(); Operation::COUNT],
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            op_micros: Default::default(),
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
    pub ops: [OpCounts; Operation::COUNT],
    /// Each operation's p99 latency in this second, in [`Operation::ALL`]
    /// order; 0 without calls (and in timelines saved before it was kept).
    #[serde(default)]
    pub op_p99_ms: [f64; Operation::COUNT],
}

const BASE_HEADER: &str = "second,offered,ok,failed,shed,mean_ms,p50_ms,p99_ms,max_ms";

/// The header of `load-timeline.csv`: the totals, then offered/ok/failed per
/// operation, then p99 per operation (last, so that readers of the earlier
/// columns by position keep working).
pub fn csv_header() -> String {
    let mut h = BASE_HEADER.to_owned();
    for op in Operation::ALL {
        let n = op.name();
        h.push_str(&format!(",{n}_offered,{n}_ok,{n}_failed"));
    }
    for op in Operation::ALL {
        h.push_str(&format!(",{}_p99_ms", op.name()));
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
            ops: [OpCounts::default(); Operation::COUNT],
            op_p99_ms: [0.0; Operation::COUNT],
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
        for p99 in &self.op_p99_ms {
            line.push_str(&format!(",{p99:.3}"));
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

    /// A row of `load-timeline.csv`, as written now or before the
    /// per-operation columns (counts, then p99s) were added.
    pub fn from_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 9 {
            return None;
        }
        // How many operations the row has: every operation now, the six of a
        // run saved before the MII interface's, each with or without p99s.
        let n = [Operation::COUNT, Operation::BEFORE_MII]
            .into_iter()
            .find(|n| f.len() >= 9 + 3 * n)
            .unwrap_or(Operation::BEFORE_MII);
        let count_columns = 9 + 3 * n;
        let mut ops = [OpCounts::default(); Operation::COUNT];
        for (i, op) in ops.iter_mut().enumerate().take(n) {
            let at = 9 + 3 * i;
            if f.len() >= at + 3 {
                *op = OpCounts {
                    offered: f[at].parse().ok()?,
                    ok: f[at + 1].parse().ok()?,
                    failed: f[at + 2].parse().ok()?,
                };
            }
        }
        let mut op_p99_ms = [0.0; Operation::COUNT];
        // Columns added after these (by a newer harness) are not read here.
        if f.len() > count_columns {
            if f.len() < count_columns + n {
                return None;
            }
            for (p99, cell) in op_p99_ms
                .iter_mut()
                .zip(&f[count_columns..count_columns + n])
            {
                *p99 = cell.parse().ok()?;
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
            op_p99_ms,
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

/// The p99 of latencies in µs, in ms (the nearest rank: the smallest value
/// at least 99 % of the calls did not exceed); 0 without calls.
fn p99_ms(micros: &[u32]) -> f64 {
    if micros.is_empty() {
        return 0.0;
    }
    let mut sorted = micros.to_vec();
    sorted.sort_unstable();
    let rank = (99 * sorted.len()).div_ceil(100);
    f64::from(sorted[rank.max(1) - 1]) / 1000.0
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
            let micros = u64::try_from(l.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(1, 3_600_000_000);
            let _ = sec.latency.record(micros);
            sec.op_micros[op.index()].push(u32::try_from(micros).unwrap_or(u32::MAX));
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
            max_ms: all.max() as f64 / 1000.0,
        })
    }

    /// Every second's latencies in log buckets, in all and per operation
    /// (`latency.csv`).
    pub fn latency_buckets(&self) -> Vec<super::latency::Second> {
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
                super::latency::Second {
                    all: merged.into_iter().collect(),
                    ops: std::array::from_fn(|i| {
                        super::latency::buckets_of(sec.op_micros[i].iter().map(|&m| u64::from(m)))
                    }),
                }
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
                    op_p99_ms: std::array::from_fn(|i| p99_ms(&sec.op_micros[i])),
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

    /// Second 0: 100 Creates answered in 1..=100 ms and 10 churn steps (a
    /// namespace delete waiting out its lease) in 1 s.
    fn slow_deletes() -> Timeline {
        let t = Timeline::new(1);
        for ms in 1..=100 {
            t.record(
                0,
                Operation::Create,
                Event::Ok,
                Some(Duration::from_millis(ms)),
            );
        }
        for _ in 0..10 {
            t.record(0, Operation::Churn, Event::Ok, Some(Duration::from_secs(1)));
        }
        t
    }

    #[test]
    fn each_operation_has_its_own_p99_per_second() {
        let row = &slow_deletes().rows()[0];
        assert_eq!(row.op_p99_ms[Operation::Create.index()], 99.0);
        assert_eq!(row.op_p99_ms[Operation::Churn.index()], 1000.0);
        assert_eq!(row.op_p99_ms[Operation::Get.index()], 0.0, "no Gets");
        assert!(
            row.p99_ms > 990.0,
            "mixed, the deletes are the p99: {row:?}"
        );
        assert_eq!(p99_ms(&[7_000]), 7.0);
        assert_eq!(p99_ms(&(1..=1000).collect::<Vec<_>>()), 0.99);
    }

    /// Columns before the per-operation p99s: the totals and the counts.
    const COUNT_COLUMNS: usize = 9 + 3 * Operation::COUNT;

    #[test]
    fn the_per_operation_p99s_come_after_every_earlier_column_and_round_trip() {
        let rows = slow_deletes().rows();
        let header = csv_header();
        let columns: Vec<&str> = header.split(',').collect();
        assert_eq!(columns.len(), COUNT_COLUMNS + Operation::COUNT);
        assert_eq!(&columns[..9], BASE_HEADER.split(',').collect::<Vec<_>>());
        assert_eq!(columns[9], "create_offered");
        assert_eq!(columns[COUNT_COLUMNS], "create_p99_ms");
        assert_eq!(columns[COUNT_COLUMNS + 4], "churn_p99_ms");
        let line = rows[0].to_csv();
        assert_eq!(line.split(',').count(), columns.len());
        let back = parse_timeline(&format!("{header}\n{line}")).unwrap();
        assert_eq!(back[0].op_p99_ms, rows[0].op_p99_ms);
        assert_eq!(back[0].ops, rows[0].ops);
        // A row with a p99 column missing is refused, not misread.
        let short = line.rsplit_once(',').unwrap().0;
        assert!(parse_timeline(&format!("{header}\n{short}")).is_err());
    }

    /// `check` re-reads run directories saved before the per-operation p99s.
    #[test]
    fn a_timeline_saved_before_the_per_operation_p99s_still_reads() {
        let old_header = csv_header()
            .split(',')
            .take(9 + 3 * Operation::BEFORE_MII)
            .collect::<Vec<_>>()
            .join(",");
        let old_row = "4,10,9,1,0,2.000,1.500,5.000,6.000,6,6,0,2,1,1,2,2,0,0,0,0,0,0,0,0,0,0";
        let back = parse_timeline(&format!("{old_header}\n{old_row}\n")).unwrap();
        assert_eq!((back[0].second, back[0].ok, back[0].p99_ms), (4, 9, 5.0));
        assert_eq!(back[0].ops[Operation::Recreate.index()].failed, 1);
        assert_eq!(back[0].op_p99_ms, [0.0; Operation::COUNT]);
        // Six operations with their p99s (before the MII interface's).
        let six = format!("{old_row},1.000,2.000,3.000,4.000,5.000,6.000");
        let back = parse_timeline(&format!("{old_header}\n{six}\n")).unwrap();
        assert_eq!(back[0].op_p99_ms[Operation::Bad.index()], 6.0);
        assert_eq!(back[0].op_p99_ms[Operation::Mii.index()], 0.0);
        // And the oldest: the totals alone.
        let back = parse_timeline(&format!("{BASE_HEADER}\n4,10,9,1,0,2,1.5,5,6")).unwrap();
        assert_eq!(back[0].ops, [OpCounts::default(); Operation::COUNT]);
    }

    #[test]
    fn the_latency_buckets_keep_each_operation_apart() {
        let per_second = slow_deletes().latency_buckets();
        let s = &per_second[0];
        let calls = |b: &super::super::latency::Buckets| b.iter().map(|(_, c)| c).sum::<u64>();
        assert_eq!(calls(&s.all), 110);
        assert_eq!(calls(&s.ops[Operation::Create.index()]), 100);
        assert_eq!(calls(&s.ops[Operation::Churn.index()]), 10);
        assert!(s.ops[Operation::Get.index()].is_empty());
    }
}
