//! Reading the environment: case-insensitive keys, and values parsed with every
//! problem recorded rather than failing fast.

use std::{collections::BTreeMap, time::Duration};

/// The longest duration any setting takes (100 years): longer ones are
/// refused rather than overflowing a deadline computed from them.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Parses a duration: `500ms`, `5s`, `2m`, `1h`, a bare number of seconds, or a
/// .NET TimeSpan `[d.]hh:mm:ss[.fffffff]` (upstream's own format, e.g.
/// `0.01:00:00` for an hour); at most [`MAX_DURATION`].
pub fn parse_duration(raw: &str) -> Option<Duration> {
    let t = raw.trim();
    let parsed = if t.contains(':') {
        parse_timespan(t)
    } else {
        parse_units(t)
    };
    parsed.filter(|d| *d <= MAX_DURATION)
}

fn parse_units(t: &str) -> Option<Duration> {
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// `[d.]hh:mm:ss[.fffffff]`, as .NET's `TimeSpan.Parse` writes it: hours below
/// 24 when days are given, minutes and seconds below 60.
fn parse_timespan(t: &str) -> Option<Duration> {
    let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = t.split(':').collect();
    let [first, m, s] = parts[..] else {
        return None;
    };
    let (days, h) = match first.split_once('.') {
        Some((d, h)) => (Some(d), h),
        None => (None, first),
    };
    let (whole, fraction) = match s.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (s, None),
    };
    if !(digits(h) && digits(m) && digits(whole)) {
        return None;
    }
    let days: u64 = match days {
        Some(d) if digits(d) => d.parse().ok()?,
        Some(_) => return None,
        None => 0,
    };
    let (h, m, whole): (u64, u64, u64) = (h.parse().ok()?, m.parse().ok()?, whole.parse().ok()?);
    if m >= 60 || whole >= 60 || (days > 0 && h >= 24) {
        return None;
    }
    let nanos = match fraction {
        None => 0,
        Some(f) if digits(f) => {
            let padded = format!("{f:0<9}");
            padded.parse::<u32>().ok()?
        }
        Some(_) => return None,
    };
    let secs = days
        .checked_mul(24)?
        .checked_add(h)?
        .checked_mul(3600)?
        .checked_add(m * 60 + whole)?;
    Some(Duration::new(secs, nanos))
}

pub(super) fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Case-insensitive view of the environment.
pub(super) struct Env(BTreeMap<String, (String, String)>);

impl Env {
    pub(super) fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self(
            vars.into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), (k, v)))
                .collect(),
        )
    }
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(&key.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }
    /// The value trimmed, `None` when unset or blank.
    pub(super) fn text(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
    /// The keys starting with `prefix` (case-insensitively), as they were set.
    pub(super) fn keys_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let p = prefix.to_ascii_lowercase();
        self.0
            .iter()
            .filter(move |(k, _)| k.starts_with(p.as_str()))
            .map(|(_, (original, _))| original.as_str())
    }
    pub(super) fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let p = prefix.to_ascii_lowercase();
        self.0.iter().filter_map(move |(k, (_, v))| {
            k.strip_prefix(p.as_str()).map(|rest| (rest, v.as_str()))
        })
    }
}

/// Parses a setting, recording a problem instead of failing fast.
pub(super) fn setting<T>(
    env: &Env,
    errors: &mut Vec<String>,
    key: &str,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> T {
    match env.get(key) {
        None => default,
        Some(raw) => parse(raw).unwrap_or_else(|| {
            errors.push(format!("{key}={raw:?} is not valid: expected {expected}"));
            default
        }),
    }
}

/// A `VFPS_*` duration, in any form [`parse_duration`] accepts.
pub(super) fn duration(
    env: &Env,
    errors: &mut Vec<String>,
    key: &str,
    default: Duration,
) -> Duration {
    setting(
        env,
        errors,
        key,
        default,
        parse_duration,
        "a duration such as 500ms, 5s or 2m",
    )
}
