//! Reading the environment: case-insensitive keys, and values parsed with every
//! problem recorded rather than failing fast.

use std::{collections::BTreeMap, time::Duration};

/// Parses a duration: `500ms`, `5s`, `2m`, `1h`, a bare number of seconds, or a
/// .NET TimeSpan `hh:mm:ss`.
pub fn parse_duration(raw: &str) -> Option<Duration> {
    let t = raw.trim();
    if t.contains(':') {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() != 3 {
            return None;
        }
        let h: u64 = parts[0].parse().ok()?;
        let m: u64 = parts[1].parse().ok()?;
        let s: f64 = parts[2].parse().ok()?;
        if m >= 60 || !(0.0..60.0).contains(&s) {
            return None;
        }
        return Some(Duration::from_secs(h * 3600 + m * 60) + Duration::from_secs_f64(s));
    }
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
    Some(Duration::from_secs_f64(secs))
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
