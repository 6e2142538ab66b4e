//! Latency by the second in compact log buckets (`latency.csv`), in all and
//! per operation, so that percentiles can be computed after the run over any
//! window of seconds (a scenario) and for any operation: eighth-octave
//! buckets, so a percentile read from one is within 9 % of the true value
//! (reported as the bucket's upper bound).

use std::{collections::BTreeMap, ops::Range};

use serde::{Deserialize, Serialize};

use super::ParseError;
use crate::operation::Operation;

/// The header of runs saved before latency was kept per operation.
const HEADER_ALL_ONLY: &str = "second,buckets";

/// `second,buckets,create_buckets,recreate_buckets,…`: every call, then each
/// operation in [`Operation::ALL`] order.
pub fn header() -> String {
    header_of(Operation::COUNT)
}

/// The header with the first `ops` operations (runs saved before the MII
/// interface's operations have six).
fn header_of(ops: usize) -> String {
    let mut h = HEADER_ALL_ONLY.to_owned();
    for op in &Operation::ALL[..ops] {
        h.push_str(&format!(",{}_buckets", op.name()));
    }
    h
}

/// Calls per bucket in one second: (bucket, count), buckets ascending.
pub type Buckets = Vec<(u16, u64)>;

/// One second's latencies: every call, and each operation's calls apart (so a
/// namespace delete's designed wait does not read as a stall of Creates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Second {
    pub all: Buckets,
    /// In [`Operation::ALL`] order; empty in runs saved before they were kept.
    pub ops: [Buckets; Operation::COUNT],
}

/// The bucket of a latency in microseconds.
pub fn bucket(micros: u64) -> u16 {
    (8.0 * (micros.max(1) as f64).log2()).floor() as u16
}

/// The upper bound of a bucket, in milliseconds.
pub fn upper_ms(b: u16) -> f64 {
    2f64.powf((f64::from(b) + 1.0) / 8.0) / 1000.0
}

/// Latencies in microseconds as buckets.
pub fn buckets_of(micros: impl IntoIterator<Item = u64>) -> Buckets {
    let mut merged = BTreeMap::<u16, u64>::new();
    for m in micros {
        *merged.entry(bucket(m)).or_default() += 1;
    }
    merged.into_iter().collect()
}

fn cells(buckets: &Buckets) -> String {
    buckets
        .iter()
        .map(|(b, c)| format!("{b}:{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `latency.csv`: `second,bucket:count bucket:count …,…` — every call, then
/// one column per operation — one row per second.
pub fn csv(per_second: &[Second]) -> String {
    let mut out = header();
    out.push('\n');
    for (second, s) in per_second.iter().enumerate() {
        out.push_str(&format!("{second},{}", cells(&s.all)));
        for op in &s.ops {
            out.push(',');
            out.push_str(&cells(op));
        }
        out.push('\n');
    }
    out
}

/// Reads `latency.csv`, with per-operation columns or without (a run saved
/// before they were kept: every operation's buckets are then empty).
pub fn parse(text: &str) -> Result<Vec<Second>, ParseError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = header();
    let columns = match lines.next().map(str::trim) {
        Some(h) if h == header => 2 + Operation::ALL.len(),
        Some(h) if h == header_of(Operation::BEFORE_MII) => 2 + Operation::BEFORE_MII,
        Some(HEADER_ALL_ONLY) => 2,
        _ => {
            return Err(ParseError(format!(
                "latency CSV must start with {header:?} or {HEADER_ALL_ONLY:?}"
            )))
        }
    };
    let mut out = Vec::new();
    for l in lines {
        let bad = || ParseError(format!("malformed latency row {l:?}"));
        let f: Vec<&str> = l.split(',').collect();
        if f.len() != columns {
            return Err(bad());
        }
        let second: usize = f[0].trim().parse().map_err(|_| bad())?;
        let read = |cells: &str| -> Result<Buckets, ParseError> {
            cells
                .split_whitespace()
                .map(|cell| {
                    let (b, c) = cell.split_once(':').ok_or_else(bad)?;
                    Ok((b.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?))
                })
                .collect()
        };
        let mut row = Second {
            all: read(f[1])?,
            ..Second::default()
        };
        for (op, cells) in row.ops.iter_mut().zip(&f[2..]) {
            *op = read(cells)?;
        }
        if out.len() <= second {
            out.resize(second + 1, Second::default());
        }
        out[second] = row;
    }
    Ok(out)
}

/// Latency percentiles of a window of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub calls: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The percentiles of every call offered in the seconds `window` covers (a
/// second belongs to a window when it starts inside it); `None` without calls.
pub fn percentiles(per_second: &[Second], window: Range<f64>) -> Option<Percentiles> {
    of_window(per_second, window, |s| &s.all)
}

/// [`percentiles`] of one operation's calls.
pub fn operation_percentiles(
    per_second: &[Second],
    op: Operation,
    window: Range<f64>,
) -> Option<Percentiles> {
    of_window(per_second, window, |s| &s.ops[op.index()])
}

fn of_window(
    per_second: &[Second],
    window: Range<f64>,
    pick: impl Fn(&Second) -> &Buckets,
) -> Option<Percentiles> {
    let mut merged: BTreeMap<u16, u64> = BTreeMap::new();
    for (second, s) in per_second.iter().enumerate() {
        let at = second as f64;
        if at >= window.start.floor() && at < window.end {
            for (b, c) in pick(s) {
                *merged.entry(*b).or_default() += c;
            }
        }
    }
    let calls: u64 = merged.values().sum();
    if calls == 0 {
        return None;
    }
    let at = |q: f64| {
        let rank = ((q * calls as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in &merged {
            seen += c;
            if seen >= rank {
                return upper_ms(*b);
            }
        }
        0.0
    };
    Some(Percentiles {
        calls,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: merged.keys().next_back().map_or(0.0, |b| upper_ms(*b)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values_within_nine_percent() {
        for micros in [1u64, 7, 950, 1_000, 12_345, 5_000_000] {
            let up = upper_ms(bucket(micros)) * 1000.0;
            assert!(
                up >= micros as f64 && up <= micros as f64 * 1.091,
                "{micros}: {up}"
            );
        }
    }

    fn second(all: Buckets) -> Second {
        Second {
            all,
            ..Second::default()
        }
    }

    #[test]
    fn percentiles_cover_the_window_and_the_csv_round_trips() {
        // Second 0: 99 calls at 1 ms and 1 at 1 s; second 1: 100 calls at 10 ms.
        let per_second = vec![
            second(vec![(bucket(1_000), 99), (bucket(1_000_000), 1)]),
            second(vec![(bucket(10_000), 100)]),
        ];
        let back = parse(&csv(&per_second)).unwrap();
        assert_eq!(back, per_second);
        let first = percentiles(&back, 0.0..1.0).unwrap();
        assert_eq!(first.calls, 100);
        assert!((1.0..1.1).contains(&first.p50_ms), "{first:?}");
        assert!((1.0..1.1).contains(&first.p99_ms), "{first:?}");
        assert!((1000.0..1091.0).contains(&first.max_ms), "{first:?}");
        let both = percentiles(&back, 0.0..2.0).unwrap();
        assert!((10.0..10.9).contains(&both.p99_ms), "{both:?}");
        assert!(percentiles(&back, 5.0..9.0).is_none());
        assert!(parse(&format!("{}\n0,x:1,,,,,,\n", header())).is_err());
        assert!(
            parse(&format!("{}\n0,1:1\n", header())).is_err(),
            "a column short"
        );
        assert!(parse("nope\n").is_err());
    }

    /// Create: 100 calls, 1..=100 ms; churn: 10 calls at 1 s (a namespace
    /// delete waiting out its lease). Each operation's figures are its own.
    #[test]
    fn each_operation_has_its_own_percentiles_from_known_latencies() {
        let mut s = Second::default();
        s.ops[Operation::Create.index()] = buckets_of((1..=100).map(|ms| ms * 1_000));
        s.ops[Operation::Churn.index()] = buckets_of([1_000_000; 10]);
        s.all = buckets_of((1..=100).map(|ms| ms * 1_000).chain([1_000_000; 10]));
        let per_second = parse(&csv(&[s])).unwrap();
        let within = |v: f64, truth: f64| v >= truth && v <= truth * 1.091;
        let create = operation_percentiles(&per_second, Operation::Create, 0.0..1.0).unwrap();
        assert_eq!(create.calls, 100);
        assert!(within(create.p50_ms, 50.0), "{create:?}");
        assert!(within(create.p99_ms, 99.0), "{create:?}");
        assert!(within(create.max_ms, 100.0), "{create:?}");
        let churn = operation_percentiles(&per_second, Operation::Churn, 0.0..1.0).unwrap();
        assert_eq!(churn.calls, 10);
        assert!(within(churn.p50_ms, 1000.0), "{churn:?}");
        assert!(operation_percentiles(&per_second, Operation::Get, 0.0..1.0).is_none());
        // Mixed, the deletes are the p99: what per-operation figures undo.
        let all = percentiles(&per_second, 0.0..1.0).unwrap();
        assert!(within(all.p99_ms, 1000.0), "{all:?}");
    }

    #[test]
    fn a_latency_csv_saved_before_per_operation_columns_still_reads() {
        let old = format!("second,buckets\n0,{}:3\n1,\n", bucket(2_000));
        let back = parse(&old).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(percentiles(&back, 0.0..2.0).unwrap().calls, 3);
        assert!(operation_percentiles(&back, Operation::Create, 0.0..2.0).is_none());
    }
}
