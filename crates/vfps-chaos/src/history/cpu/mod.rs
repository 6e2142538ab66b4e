//! What the machine's CPU went to during the load window: the harness's own
//! parts (the load generator, the browser probe with its Chromium, the
//! identity provider, the load balancer) beside the system under test's
//! (vfps, PostgreSQL, Patroni, etcd, Garage), as CPU seconds and as a share
//! of the machine (cores × window).
//!
//! Read from `/proc` every second of the window ([`proc`]): each process's
//! utime + stime, counted with the part of its nearest ancestor (itself
//! included) that a rule recognises ([`Part`]); and, through its parent's
//! cutime + cstime, the children that ended too soon to be seen (a
//! `patronictl`, a PostgreSQL backend, a Chromium renderer), with the part of
//! the parent that reaped them ([`tracker`]). A process seen and then killed
//! keeps its own part: a Patroni the harness killed and reaped is Patroni's
//! time, not the harness's; a seen child reaped by a parent that ended before
//! the next sample is taken out of its grandparent's reaped time as well
//! (the parent's final total carried it up). Approximate by design (the last
//! second of a process that died goes to its reaper), and the end sample is
//! taken before the browser probe exits.
//!
//! # Layout
//! - this file: [`Part`], [`CpuCost`], [`over_window`].
//! - [`proc`]: `/proc` read and parsed.
//! - [`tracker`]: every process seen during the window, and what it used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod proc;
pub mod tracker;

pub use proc::{Cmdlines, Snapshot};
pub use tracker::Tracker;

/// A part of what runs on the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// `vfps-chaos` itself: the open-model generator, the verification and
    /// the chaos driver, with the commands it ran.
    LoadGenerator,
    /// `tests/ui/probe.mjs` (node) and every Chromium process it started.
    BrowserProbe,
    /// The identity provider (`tests/ui/provider.mjs`).
    IdentityProvider,
    /// HAProxy.
    LoadBalancer,
    Vfps,
    Postgres,
    Patroni,
    Etcd,
    Garage,
}

impl Part {
    pub const ALL: [Part; 9] = [
        Part::LoadGenerator,
        Part::BrowserProbe,
        Part::IdentityProvider,
        Part::LoadBalancer,
        Part::Vfps,
        Part::Postgres,
        Part::Patroni,
        Part::Etcd,
        Part::Garage,
    ];

    /// Whether it is the harness's (else the system under test's).
    pub fn harness(self) -> bool {
        matches!(
            self,
            Part::LoadGenerator | Part::BrowserProbe | Part::IdentityProvider | Part::LoadBalancer
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::LoadGenerator => "load generator (vfps-chaos)",
            Part::BrowserProbe => "browser probe (node + Chromium)",
            Part::IdentityProvider => "identity provider",
            Part::LoadBalancer => "load balancer (HAProxy)",
            Part::Vfps => "vfps replicas",
            Part::Postgres => "PostgreSQL",
            Part::Patroni => "Patroni",
            Part::Etcd => "etcd",
            Part::Garage => "Garage",
        }
    }

    /// The part a process is by its own name and command line, if any.
    pub(crate) fn of(comm: &str, cmdline: &str, pid: u32, harness_pid: u32) -> Option<Part> {
        if pid == harness_pid {
            return Some(Part::LoadGenerator);
        }
        if cmdline.contains("probe.mjs") {
            return Some(Part::BrowserProbe);
        }
        if cmdline.contains("provider.mjs") {
            return Some(Part::IdentityProvider);
        }
        // A replica's supervisor loop (the local ReplicaSet) reaps the
        // replicas it restarts: theirs is vfps's time.
        if cmdline.contains("netns exec vfps-app-") {
            return Some(Part::Vfps);
        }
        match comm {
            "haproxy" => Some(Part::LoadBalancer),
            "vfps" => Some(Part::Vfps),
            "postgres" | "postmaster" => Some(Part::Postgres),
            "etcd" => Some(Part::Etcd),
            "garage" => Some(Part::Garage),
            // Patroni's own script, or the local platform's launcher of it
            // (run by Python, so named `python3`); not `patronictl` (the
            // harness asking it).
            _ if comm == "patroni"
                || cmdline.contains("bin/patroni ")
                || cmdline.contains(crate::platform::local::patroni::LAUNCHER_FILE) =>
            {
                Some(Part::Patroni)
            }
            _ => None,
        }
    }
}

/// What the load window cost, by part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    /// Between the first and the last sample.
    pub window_seconds: f64,
    /// The machine's CPUs.
    pub cores: u32,
    /// CPU seconds of each part that used any.
    pub parts: BTreeMap<Part, f64>,
    /// CPU seconds the whole machine was busy (every process, ours or not).
    pub machine_busy_seconds: f64,
}

impl CpuCost {
    /// CPU seconds as a share of the machine over the window (0..=1).
    pub fn share(&self, cpu_seconds: f64) -> f64 {
        let capacity = self.window_seconds * f64::from(self.cores.max(1));
        if capacity > 0.0 {
            cpu_seconds / capacity
        } else {
            0.0
        }
    }

    pub fn seconds_of(&self, part: Part) -> f64 {
        self.parts.get(&part).copied().unwrap_or(0.0)
    }

    /// CPU seconds of the harness's parts, or the system under test's.
    pub fn harness_seconds(&self) -> f64 {
        self.parts
            .iter()
            .filter(|(p, _)| p.harness())
            .map(|(_, s)| s)
            .sum()
    }

    pub fn service_seconds(&self) -> f64 {
        self.parts
            .iter()
            .filter(|(p, _)| !p.harness())
            .map(|(_, s)| s)
            .sum()
    }

    /// One line per part, then the totals, for people.
    pub fn lines(&self) -> Vec<String> {
        let line = |what: &str, s: f64| {
            format!(
                "{what:<34} {s:>7.1} CPU s  {:>5.2} cores  {:>5.1} % of the machine",
                s / self.window_seconds.max(f64::MIN_POSITIVE),
                100.0 * self.share(s)
            )
        };
        let mut out = vec![format!(
            "CPU over {:.0} s of the load window on {} cores (utime + stime from /proc):",
            self.window_seconds, self.cores
        )];
        for part in Part::ALL {
            if let Some(s) = self.parts.get(&part) {
                out.push(format!("  {}", line(part.name(), *s)));
            }
        }
        out.push(format!(
            "  {}",
            line("the harness in all", self.harness_seconds())
        ));
        out.push(format!(
            "  {}",
            line("the system under test in all", self.service_seconds())
        ));
        out.push(format!(
            "  {}",
            line("the whole machine (anything)", self.machine_busy_seconds)
        ));
        out
    }
}

/// Samples `/proc` now, every second, and last shortly before `window_end`
/// (the browser probe's `--seconds` are whole seconds, so it may end up to a
/// second early; its time is read while it runs); what the window cost, or
/// `None` where `/proc` cannot be read (said on stderr). Each sample is read
/// on a blocking thread, away from the generator's schedule.
pub async fn over_window(window_end: tokio::time::Instant) -> Option<CpuCost> {
    let begun = tokio::time::Instant::now();
    let mut tracker = match sample(Cmdlines::new()).await {
        Ok(s) => Tracker::new(&s, std::process::id()),
        Err(e) => {
            eprintln!("cpu: /proc cannot be read ({e}): the harness's cost is not measured");
            return None;
        }
    };
    let window = window_end.saturating_duration_since(begun);
    let last = window_end - (window / 10).min(std::time::Duration::from_secs(2));
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = tokio::time::sleep_until(last) => break,
        }
        if let Ok(s) = sample(tracker.cmdlines().clone()).await {
            tracker.observe(&s);
        }
    }
    let s = sample(tracker.cmdlines().clone()).await.ok()?;
    tracker.observe(&s);
    Some(tracker.cost(begun.elapsed().as_secs_f64(), cores(), TICKS_PER_SECOND))
}

async fn sample(known: Cmdlines) -> std::io::Result<Snapshot> {
    tokio::task::spawn_blocking(move || Snapshot::take(&known))
        .await
        .map_err(std::io::Error::other)?
}

/// `USER_HZ`: the unit of `/proc`'s CPU times, 100 on every Linux
/// architecture this runs on.
const TICKS_PER_SECOND: u64 = 100;

/// The machine's CPUs (online ones, as `/proc/stat` lists them).
pub fn cores() -> u32 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .map(|s| {
            s.lines()
                .filter(|l| {
                    l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
                })
                .count() as u32
        })
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::Part;
    use crate::platform::local::patroni::patroni_launcher;

    const PYTHON: &str = "/opt/vfps-chaos/patroni/bin/python3";

    /// The local platform starts each member as its Python running the
    /// launcher: that process is Patroni, though its name is `python3`.
    #[test]
    fn a_member_started_by_the_launcher_counts_as_patroni() {
        let launcher = patroni_launcher(Path::new("/tmp/b"));
        let cmdline = format!("{PYTHON} {} /tmp/b/db-a/patroni.yml", launcher.display());
        assert_eq!(Part::of("python3", &cmdline, 30, 10), Some(Part::Patroni));
        // Patroni's own script, as a site starts it.
        let script =
            format!("{PYTHON} /opt/vfps-chaos/patroni/bin/patroni /tmp/b/db-a/patroni.yml");
        assert_eq!(Part::of("patroni", &script, 30, 10), Some(Part::Patroni));
        // The harness asking Patroni is the harness's, not Patroni's.
        let ctl = format!("{PYTHON} /opt/vfps-chaos/patroni/bin/patronictl -c x list");
        assert_eq!(Part::of("python3", &ctl, 40, 10), None);
    }
}
