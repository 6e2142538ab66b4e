//! Where a failover's seconds go: from the fault (a kill, a pause, the kill
//! after an isolation) to the leader key expiring, the promotion starting,
//! the promoted primary accepting connections, a standby streaming to it as
//! its synchronous standby (until then every commit waits), and the first
//! write vfps acknowledged — read from the HA manager's and PostgreSQL's own
//! logs and the ledger's acknowledgement times, all on the wall clock.
//!
//! Log lines are read by pure functions ([`patroni_line`], [`postgres_line`]),
//! by the phrases Patroni 3.0–4.x and PostgreSQL 15 write (Patroni's
//! `ha.py`: "promoted self to leader by acquiring session lock", "Got
//! response from …", "Lock owner: None; …"; PostgreSQL's "received promote
//! request", "selected new timeline ID", "database system is ready to accept
//! connections", "standby … is now a synchronous standby with priority …"
//! or, with quorum commit, "… is now a candidate for quorum synchronous
//! standby"), and the first timestamp on the line (Patroni's
//! `2026-12-05 08:01:26,123`, PostgreSQL's `2026-12-05 08:01:26.123 UTC`, a
//! JSON log's `"ts":"2026-12-05T08:01:26.123Z"`; UTC, which the local
//! platform sets for both).

use serde::{Deserialize, Serialize};

use crate::scenario::ScenarioName;

/// What a log line says about a failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogEvent {
    /// A member found the cluster without a leader key: the old leader's
    /// expired (Patroni runs its leader race: it asks the other members
    /// for their WAL position, or says who owns no lock).
    LeaderKeyGone,
    /// A member saw a leader holding the key (the cluster healthy as it
    /// knows it).
    LeaderHeld,
    /// A member took the leader key and starts its promotion (logged at the
    /// end of the HA cycle that took it).
    LockAcquired,
    /// PostgreSQL was asked to promote.
    PromoteRequested,
    /// PostgreSQL chose a new timeline: the promotion is under way.
    NewTimeline,
    /// PostgreSQL accepts read-write connections.
    Ready,
    /// A standby streams to this primary as a synchronous standby (or a
    /// quorum candidate): commits waiting for one can complete.
    SyncStandbyAttached,
}

/// One event of a member's log, on the wall clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    pub at_unix: f64,
    pub member: String,
    pub event: LogEvent,
}

/// Patroni's phrases, each with its meaning, in the order they are tried.
const PATRONI: [(&str, LogEvent); 12] = [
    (
        "promoted self to leader by acquiring session lock",
        LogEvent::LockAcquired,
    ),
    (
        "promoted self to leader because I had the session lock",
        LogEvent::LockAcquired,
    ),
    ("acquired session lock as a leader", LogEvent::LockAcquired),
    ("Got response from ", LogEvent::LeaderKeyGone),
    ("Request failed to ", LogEvent::LeaderKeyGone),
    ("Lock owner: None;", LogEvent::LeaderKeyGone),
    ("not the healthiest node", LogEvent::LeaderKeyGone),
    (
        "after trying and failing to obtain lock",
        LogEvent::LeaderKeyGone,
    ),
    ("I am not allowed to promote", LogEvent::LeaderKeyGone),
    (
        "not healthy enough for leader race",
        LogEvent::LeaderKeyGone,
    ),
    // After "Lock owner: None;" above: any other owner holds the key.
    ("Lock owner: ", LogEvent::LeaderHeld),
    (
        "a secondary, and following a leader (",
        LogEvent::LeaderHeld,
    ),
];

/// PostgreSQL's phrases. "ready to accept read-only connections" (a standby)
/// does not contain the last one.
const POSTGRES: [(&str, LogEvent); 5] = [
    ("received promote request", LogEvent::PromoteRequested),
    ("selected new timeline ID", LogEvent::NewTimeline),
    (
        "database system is ready to accept connections",
        LogEvent::Ready,
    ),
    (
        "is now a synchronous standby with priority",
        LogEvent::SyncStandbyAttached,
    ),
    (
        "is now a candidate for quorum synchronous standby",
        LogEvent::SyncStandbyAttached,
    ),
];

fn line_event(line: &str, member: &str, phrases: &[(&str, LogEvent)]) -> Option<LogLine> {
    let (_, event) = phrases.iter().find(|(p, _)| line.contains(p))?;
    Some(LogLine {
        at_unix: unix_seconds(&timestamp(line)?)?,
        member: pod_prefix(line).unwrap_or(member).to_owned(),
        event: *event,
    })
}

/// What one line of a Patroni log says, if anything.
pub fn patroni_line(line: &str, member: &str) -> Option<LogLine> {
    line_event(line, member, &PATRONI)
}

/// What one line of a PostgreSQL log says, if anything; a line that starts
/// `[pod/<name>/…]` (as `kubectl logs --prefix` writes) names its member.
pub fn postgres_line(line: &str, member: &str) -> Option<LogLine> {
    line_event(line, member, &POSTGRES)
}

/// Every event of a whole log.
pub fn events(text: &str, member: &str, read: fn(&str, &str) -> Option<LogLine>) -> Vec<LogLine> {
    text.lines().filter_map(|l| read(l, member)).collect()
}

/// A fault that can make the cluster fail over, on the load's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub at_seconds: f64,
    pub scenario: ScenarioName,
    /// What the chaos timeline says it did.
    pub text: String,
}

/// One failover's seconds, each counted from the load's start (`None`: not
/// in the logs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    pub scenario: ScenarioName,
    /// The fault it followed (the chaos timeline's words).
    pub fault: String,
    pub fault_seconds: f64,
    pub leader_key_expired_seconds: Option<f64>,
    pub promotion_started_seconds: Option<f64>,
    pub promoted_seconds: Option<f64>,
    /// A standby attached to the promoted primary as its synchronous
    /// standby (absent from summaries written before this step existed).
    #[serde(default)]
    pub standby_attached_seconds: Option<f64>,
    pub first_write_seconds: Option<f64>,
    /// The member promoted, when the logs name one.
    pub promoted: Option<String>,
}

/// The steps of a failover, in order, as reports name them.
pub const STEPS: [&str; 5] = [
    "leader key expired",
    "promotion started",
    "promoted",
    "synchronous standby attached",
    "first acknowledged write",
];

impl Failover {
    /// Seconds from the fault to each step ([`STEPS`]), in order; `None`
    /// where unknown.
    pub fn steps(&self) -> [(&'static str, Option<f64>); 5] {
        let at = [
            self.leader_key_expired_seconds,
            self.promotion_started_seconds,
            self.promoted_seconds,
            self.standby_attached_seconds,
            self.first_write_seconds,
        ];
        std::array::from_fn(|i| (STEPS[i], at[i].map(|t| t - self.fault_seconds)))
    }

    /// One line for people: `db-primary-kill at 196.6 s (killed primary db-a …):
    /// leader key expired +5.1 s, promotion started +5.2 s, …`.
    pub fn line(&self) -> String {
        let steps: Vec<String> = self
            .steps()
            .iter()
            .map(|(what, t)| match t {
                Some(t) => format!("{what} +{t:.1} s"),
                None => format!("{what} not seen"),
            })
            .collect();
        format!(
            "{} at {:.1} s ({}): {}{}",
            self.scenario,
            self.fault_seconds,
            self.fault,
            steps.join(", "),
            self.promoted
                .as_ref()
                .map_or(String::new(), |m| format!("; promoted {m}"))
        )
    }
}

/// The failovers of a run, one per fault: the first promotion after it and
/// before the next fault; a fault no promotion followed is listed too, unless
/// a later fault of its scenario follows it (an isolation, then the kill that
/// ends it). `acks_unix` are the acknowledgement times of the Creates vfps
/// acknowledged, in any order.
pub fn breakdown(
    faults: &[Fault],
    lines: &[LogLine],
    acks_unix: &[f64],
    load_start_unix: f64,
) -> Vec<Failover> {
    let at = |s: f64| load_start_unix + s;
    let mut lines: Vec<&LogLine> = lines.iter().collect();
    lines.sort_by(|a, b| a.at_unix.total_cmp(&b.at_unix));
    let mut acks: Vec<f64> = acks_unix.to_vec();
    acks.sort_by(f64::total_cmp);
    let mut faults: Vec<&Fault> = faults.iter().collect();
    faults.sort_by(|a, b| a.at_seconds.total_cmp(&b.at_seconds));
    let first_after = |t: f64, event: LogEvent, member: Option<&str>| {
        lines
            .iter()
            .find(|l| l.at_unix > t && l.event == event && member.is_none_or(|m| l.member == m))
            .copied()
    };
    // Without the HA manager's log (CloudNativePG on kind) a promotion
    // starts with PostgreSQL's promote request.
    let starts = if lines.iter().any(|l| l.event == LogEvent::LockAcquired) {
        LogEvent::LockAcquired
    } else {
        LogEvent::PromoteRequested
    };
    let mut out: Vec<Failover> = Vec::new();
    for (i, fault) in faults.iter().enumerate() {
        let from = at(fault.at_seconds);
        let until = faults
            .get(i + 1)
            .map_or(f64::INFINITY, |next| at(next.at_seconds));
        let lock = lines
            .iter()
            .find(|l| l.event == starts && l.at_unix > from && l.at_unix < until);
        let Some(lock) = lock else {
            let followed = faults[i + 1..].iter().any(|g| g.scenario == fault.scenario);
            if !followed {
                out.push(Failover {
                    scenario: fault.scenario.clone(),
                    fault: fault.text.clone(),
                    fault_seconds: fault.at_seconds,
                    leader_key_expired_seconds: None,
                    promotion_started_seconds: None,
                    promoted_seconds: None,
                    standby_attached_seconds: None,
                    first_write_seconds: acks
                        .iter()
                        .copied()
                        .find(|t| *t > from)
                        .map(|t| t - load_start_unix),
                    promoted: None,
                });
            }
            continue;
        };
        // A member's leader race ends with its verdict logged, so a race
        // begun before the fault can log right after it: the key is seen
        // gone only by a member that saw it held since the fault.
        let expired = lines
            .iter()
            .find(|l| {
                l.event == LogEvent::LeaderKeyGone
                    && l.at_unix > from
                    && l.at_unix <= lock.at_unix
                    && lines.iter().any(|h| {
                        h.event == LogEvent::LeaderHeld
                            && h.member == l.member
                            && h.at_unix > from
                            && h.at_unix < l.at_unix
                    })
            })
            .map(|l| l.at_unix);
        let requested = first_after(
            lock.at_unix - 1.0,
            LogEvent::PromoteRequested,
            Some(&lock.member),
        );
        let ready = requested
            .and_then(|r| first_after(r.at_unix, LogEvent::Ready, Some(&lock.member)))
            .or_else(|| {
                requested
                    .and_then(|r| first_after(r.at_unix, LogEvent::NewTimeline, Some(&lock.member)))
            });
        // Commits on the new primary wait until a standby streams to it.
        let attached = requested.and_then(|r| {
            first_after(r.at_unix, LogEvent::SyncStandbyAttached, Some(&lock.member))
                .filter(|a| a.at_unix < until)
        });
        // An answer already on its way when the fault struck is no write
        // through the new primary: the first one after it is promoted.
        let floor = ready.map_or(lock.at_unix, |r| r.at_unix).max(from);
        let first_write = acks.iter().copied().find(|t| *t > floor);
        out.push(Failover {
            scenario: fault.scenario.clone(),
            fault: fault.text.clone(),
            fault_seconds: fault.at_seconds,
            leader_key_expired_seconds: expired.map(|t| t - load_start_unix),
            promotion_started_seconds: Some(lock.at_unix - load_start_unix),
            promoted_seconds: ready.map(|r| r.at_unix - load_start_unix),
            standby_attached_seconds: attached.map(|a| a.at_unix - load_start_unix),
            first_write_seconds: first_write.map(|t| t - load_start_unix),
            promoted: Some(lock.member.clone()),
        });
    }
    out
}

/// Median and max of each step over one scenario's failovers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub scenario: ScenarioName,
    pub failovers: usize,
    /// For each step: its name, and median and max seconds after the fault
    /// over the failovers that saw it (`None`: none did).
    pub steps: Vec<(String, Option<(f64, f64)>)>,
}

/// The distribution per scenario, in the order the scenarios first failed over.
pub fn distributions(failovers: &[Failover]) -> Vec<Distribution> {
    let mut scenarios: Vec<&ScenarioName> = Vec::new();
    for f in failovers {
        if !scenarios.contains(&&f.scenario) {
            scenarios.push(&f.scenario);
        }
    }
    scenarios
        .into_iter()
        .map(|s| {
            let mine: Vec<&Failover> = failovers.iter().filter(|f| f.scenario == *s).collect();
            let steps = STEPS
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut v: Vec<f64> = mine.iter().filter_map(|f| f.steps()[i].1).collect();
                    v.sort_by(f64::total_cmp);
                    let figures = (!v.is_empty()).then(|| (median(&v), v[v.len() - 1]));
                    ((*name).to_owned(), figures)
                })
                .collect();
            Distribution {
                scenario: s.clone(),
                failovers: mine.len(),
                steps,
            }
        })
        .collect()
}

/// The text report: one line per failover, then each scenario's median and max.
pub fn lines(failovers: &[Failover]) -> Vec<String> {
    if failovers.is_empty() {
        return Vec::new();
    }
    let mut out = vec!["failovers (seconds after the fault):".to_owned()];
    out.extend(failovers.iter().map(|f| format!("  {}", f.line())));
    for d in distributions(failovers) {
        let steps: Vec<String> = d
            .steps
            .iter()
            .map(|(name, figures)| match figures {
                Some((median, max)) => format!("{name} {median:.1} / {max:.1}"),
                None => format!("{name} not seen"),
            })
            .collect();
        out.push(format!(
            "  {} over {} failover{} (median / max s): {}",
            d.scenario,
            d.failovers,
            if d.failovers == 1 { "" } else { "s" },
            steps.join(", ")
        ));
    }
    out
}

/// The median of sorted, non-empty values (the mean of the middle two).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn pod_prefix(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("[pod/")?;
    rest.split('/').next()
}

/// The first `YYYY-MM-DD[ T]HH:MM:SS[.,fff]` on the line.
pub(crate) fn timestamp(line: &str) -> Option<String> {
    let bytes = line.as_bytes();
    let digit = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    for start in 0..bytes.len() {
        let shape = [(0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2)];
        let fits = shape
            .iter()
            .all(|(at, len)| (0..*len).all(|k| digit(start + at + k)))
            && bytes.get(start + 4) == Some(&b'-')
            && bytes.get(start + 7) == Some(&b'-')
            && matches!(bytes.get(start + 10), Some(b' ' | b'T'))
            && bytes.get(start + 13) == Some(&b':')
            && bytes.get(start + 16) == Some(&b':');
        if fits {
            let mut stamp = line[start..start + 19].to_owned();
            let mut end = start + 19;
            // Python's logging writes milliseconds after a comma.
            if matches!(bytes.get(end), Some(b'.' | b',')) && digit(end + 1) {
                stamp.push('.');
                end += 1;
                let from = end;
                while digit(end) {
                    end += 1;
                }
                stamp.push_str(&line[from..end]);
            }
            return Some(stamp);
        }
    }
    None
}

/// Unix seconds of a UTC `YYYY-MM-DD HH:MM:SS[.fff]`.
pub(crate) fn unix_seconds(stamp: &str) -> Option<f64> {
    let num = |r: std::ops::Range<usize>| stamp.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm) = (num(11..13)?, num(14..16)?);
    let ss: f64 = stamp.get(17..)?.parse().ok()?;
    // Days from the civil date (proleptic Gregorian), after H. Hinnant.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

#[cfg(test)]
mod tests;
