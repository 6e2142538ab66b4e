//! Latency by the second in compact log buckets (`latency.csv`), so that
//! percentiles can be computed after the run over any window of seconds (a
//! scenario): eighth-octave buckets, so a percentile read from one is within
//! 9 % of the true value (reported as the bucket's upper bound).

use std::{collections::BTreeMap, ops::Range};

use super::ParseError;

pub const HEADER: &str = "second,buckets";

/// Calls per bucket in one second: (bucket, count), buckets ascending.
pub type Buckets = Vec<(u16, u64)>;

/// The bucket of a latency in microseconds.
pub fn bucket(micros: u64) -> u16 {
    (8.0 * (micros.max(1) as f64).log2()).floor() as u16
}

/// The upper bound of a bucket, in milliseconds.
pub fn upper_ms(b: u16) -> f64 {
    2f64.powf((f64::from(b) + 1.0) / 8.0) / 1000.0
}

/// `latency.csv`: `second,bucket:count bucket:count …`, one row per second.
pub fn csv(per_second: &[Buckets]) -> String {
    let mut out = format!("{HEADER}\n");
    for (second, buckets) in per_second.iter().enumerate() {
        let cells: Vec<String> = buckets.iter().map(|(b, c)| format!("{b}:{c}")).collect();
        out.push_str(&format!("{second},{}\n", cells.join(" ")));
    }
    out
}

pub fn parse(text: &str) -> Result<Vec<Buckets>, ParseError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    if lines.next().map(str::trim) != Some(HEADER) {
        return Err(ParseError(format!(
            "latency CSV must start with {HEADER:?}"
        )));
    }
    let mut out = Vec::new();
    for l in lines {
        let bad = || ParseError(format!("malformed latency row {l:?}"));
        let (second, cells) = l.split_once(',').ok_or_else(bad)?;
        let second: usize = second.trim().parse().map_err(|_| bad())?;
        let mut buckets = Buckets::new();
        for cell in cells.split_whitespace() {
            let (b, c) = cell.split_once(':').ok_or_else(bad)?;
            buckets.push((b.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?));
        }
        if out.len() <= second {
            out.resize(second + 1, Buckets::new());
        }
        out[second] = buckets;
    }
    Ok(out)
}

/// Latency percentiles of a window of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub calls: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The percentiles of every call offered in the seconds `window` covers (a
/// second belongs to a window when it starts inside it); `None` without calls.
pub fn percentiles(per_second: &[Buckets], window: Range<f64>) -> Option<Percentiles> {
    let mut merged: BTreeMap<u16, u64> = BTreeMap::new();
    for (second, buckets) in per_second.iter().enumerate() {
        let s = second as f64;
        if s >= window.start.floor() && s < window.end {
            for (b, c) in buckets {
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

    #[test]
    fn percentiles_cover_the_window_and_the_csv_round_trips() {
        // Second 0: 99 calls at 1 ms and 1 at 1 s; second 1: 100 calls at 10 ms.
        let per_second = vec![
            vec![(bucket(1_000), 99), (bucket(1_000_000), 1)],
            vec![(bucket(10_000), 100)],
        ];
        let back = parse(&csv(&per_second)).unwrap();
        assert_eq!(back, per_second);
        let first = percentiles(&back, 0.0..1.0).unwrap();
        assert_eq!(first.calls, 100);
        assert!((1.0..1.1).contains(&first.p50_ms), "{first:?}");
        assert!((1.0..1.1).contains(&first.p99_ms), "{first:?}");
        let both = percentiles(&back, 0.0..2.0).unwrap();
        assert!((10.0..10.9).contains(&both.p99_ms), "{both:?}");
        assert!(percentiles(&back, 5.0..9.0).is_none());
        assert!(parse("second,buckets\n0,x:1\n").is_err());
        assert!(parse("nope\n").is_err());
    }
}
