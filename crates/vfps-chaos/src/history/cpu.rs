//! What the machine's CPU went to during the load window: the harness's own
//! parts (the load generator, the browser probe with its Chromium, the
//! identity provider, the load balancer) beside the system under test's
//! (vfps, PostgreSQL, Patroni, etcd, Garage), as CPU seconds and as a share
//! of the machine (cores × window).
//!
//! Read from `/proc`: each process's utime + stime, plus cutime + cstime (its
//! children that ended and were reaped meanwhile, such as a PostgreSQL
//! backend or a Chromium renderer), sampled at the start and near the end of
//! the window; a process belongs to the part of its nearest ancestor (itself
//! included) that a rule recognises. Approximate by design: a process killed
//! during the window loses its time unless its parent reaps it, and a reaped
//! child brings its whole life. The end sample is taken before the browser
//! probe exits, so that its time is not folded into the generator's as a
//! reaped child's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    fn of(comm: &str, cmdline: &str, pid: u32, harness_pid: u32) -> Option<Part> {
        if pid == harness_pid {
            return Some(Part::LoadGenerator);
        }
        if cmdline.contains("probe.mjs") {
            return Some(Part::BrowserProbe);
        }
        if cmdline.contains("provider.mjs") {
            return Some(Part::IdentityProvider);
        }
        match comm {
            "haproxy" => Some(Part::LoadBalancer),
            "vfps" => Some(Part::Vfps),
            "postgres" | "postmaster" => Some(Part::Postgres),
            "etcd" => Some(Part::Etcd),
            "garage" => Some(Part::Garage),
            _ if cmdline.contains("/patroni") || comm == "patroni" => Some(Part::Patroni),
            _ => None,
        }
    }
}

/// One process as `/proc/<pid>/stat` and `cmdline` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// NUL-separated arguments joined by spaces (empty for a kernel thread).
    pub cmdline: String,
    /// When it started (ticks since boot): a reused pid is another process.
    pub start_ticks: u64,
    /// utime + stime + cutime + cstime, ticks.
    pub cpu_ticks: u64,
}

/// A line of `/proc/<pid>/stat`; `None` when it is not one. The command name
/// may hold spaces and parentheses, so the fields are counted from its last `)`.
pub fn parse_stat(text: &str, cmdline: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_owned();
    // After the name: state (field 3), ppid (4), … utime (14), stime (15),
    // cutime (16), cstime (17), … starttime (22).
    let f: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
    let num = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Proc {
        pid,
        ppid: u32::try_from(num(4)?).ok()?,
        comm,
        cmdline: cmdline.to_owned(),
        start_ticks: num(22)?,
        cpu_ticks: num(14)? + num(15)? + num(16)? + num(17)?,
    })
}

/// Every process at one instant, and the machine's own counters.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub procs: BTreeMap<u32, Proc>,
    /// `/proc/stat`'s busy ticks over all CPUs (everything but idle and iowait).
    pub busy_ticks: u64,
}

/// Busy ticks of the `cpu` line of `/proc/stat`.
pub fn parse_busy(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest is in user).
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

impl Snapshot {
    /// Reads `/proc` now; a process that ends while it is read is skipped.
    pub fn take() -> std::io::Result<Self> {
        let mut procs = BTreeMap::new();
        for entry in std::fs::read_dir("/proc")? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            if let Some(p) = parse_stat(&stat, &cmdline) {
                procs.insert(pid, p);
            }
        }
        let busy_ticks = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse_busy(&s))
            .unwrap_or(0);
        Ok(Self { procs, busy_ticks })
    }

    /// The part of each process that belongs to one: its nearest recognised
    /// ancestor's, itself included.
    pub fn parts(&self, harness_pid: u32) -> BTreeMap<u32, Part> {
        let mut out = BTreeMap::new();
        for &pid in self.procs.keys() {
            let mut at = pid;
            // Bounded: a cycle cannot happen in /proc, but a snapshot is not atomic.
            for _ in 0..64 {
                let Some(p) = self.procs.get(&at) else { break };
                if let Some(part) = Part::of(&p.comm, &p.cmdline, p.pid, harness_pid) {
                    out.insert(pid, part);
                    break;
                }
                if p.ppid == 0 || p.ppid == at {
                    break;
                }
                at = p.ppid;
            }
        }
        out
    }
}

/// What the load window cost, by part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    /// Between the two samples.
    pub window_seconds: f64,
    /// The machine's CPUs.
    pub cores: u32,
    /// CPU seconds of each part that used any.
    pub parts: BTreeMap<Part, f64>,
    /// CPU seconds the whole machine was busy (every process, ours or not).
    pub machine_busy_seconds: f64,
}

impl CpuCost {
    /// The CPU seconds between two snapshots, by the parts of the later one.
    pub fn between(
        before: &Snapshot,
        after: &Snapshot,
        harness_pid: u32,
        window_seconds: f64,
        cores: u32,
        ticks_per_second: u64,
    ) -> Self {
        let tps = ticks_per_second.max(1) as f64;
        let mut parts = BTreeMap::new();
        for (pid, part) in after.parts(harness_pid) {
            let now = &after.procs[&pid];
            let earlier = before
                .procs
                .get(&pid)
                .filter(|p| p.start_ticks == now.start_ticks)
                .map_or(0, |p| p.cpu_ticks);
            *parts.entry(part).or_insert(0.0) += now.cpu_ticks.saturating_sub(earlier) as f64 / tps;
        }
        Self {
            window_seconds,
            cores,
            parts,
            machine_busy_seconds: after.busy_ticks.saturating_sub(before.busy_ticks) as f64 / tps,
        }
    }

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

/// Samples `/proc` now and again shortly before `window_end` (the browser
/// probe's `--seconds` are whole seconds, so it may end up to a second
/// early; its time must be read while it runs); what the window cost, or
/// `None` where `/proc` cannot be read (said on stderr).
pub async fn over_window(window_end: tokio::time::Instant) -> Option<CpuCost> {
    let begun = tokio::time::Instant::now();
    let before = match Snapshot::take() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cpu: /proc cannot be read ({e}): the harness's cost is not measured");
            return None;
        }
    };
    let window = window_end.saturating_duration_since(begun);
    let early = (window / 10).min(std::time::Duration::from_secs(2));
    tokio::time::sleep_until(window_end - early).await;
    let after = Snapshot::take().ok()?;
    Some(CpuCost::between(
        &before,
        &after,
        std::process::id(),
        begun.elapsed().as_secs_f64(),
        cores(),
        TICKS_PER_SECOND,
    ))
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
    use super::*;

    fn proc(pid: u32, ppid: u32, comm: &str, cmdline: &str, cpu_ticks: u64) -> Proc {
        Proc {
            pid,
            ppid,
            comm: comm.into(),
            cmdline: cmdline.into(),
            start_ticks: 1,
            cpu_ticks,
        }
    }

    #[test]
    fn a_stat_line_is_read_from_the_last_parenthesis_on() {
        // A real line of Chromium's renderer (its name holds a space and a parenthesis).
        let line = "4242 (chromium (re) S 4200 4200 4200 0 -1 4194560 9383 0 0 0 1234 567 8 9 20 0 20 0 2057609250 1140592640 30000 18446744073709551615 0 0 0 0 0 0 0 4096 1260 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(line, "/usr/lib/chromium/chromium --type=renderer").unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.comm.as_str()),
            (4242, 4200, "chromium (re")
        );
        assert_eq!(p.cpu_ticks, 1234 + 567 + 8 + 9);
        assert_eq!(p.start_ticks, 2_057_609_250);
        assert!(parse_stat("not a stat line", "").is_none());
        assert_eq!(
            parse_busy("cpu  100 20 30 4000 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"),
            Some(100 + 20 + 30 + 6 + 7 + 8)
        );
    }

    #[test]
    fn each_process_counts_for_its_nearest_recognised_ancestor() {
        let before = Snapshot {
            procs: [
                proc(
                    10,
                    1,
                    "vfps-chaos",
                    "target/release/vfps-chaos local all",
                    100,
                ),
                proc(11, 10, "node", "node tests/ui/probe.mjs --base x", 10),
                proc(
                    12,
                    11,
                    "chromium",
                    "/usr/lib/chromium/chromium --headless",
                    200,
                ),
                proc(20, 1, "vfps", "vfps serve", 50),
                proc(
                    30,
                    1,
                    "patroni",
                    "/opt/vfps-chaos/patroni/bin/python /opt/vfps-chaos/patroni/bin/patroni x.yml",
                    40,
                ),
                proc(31, 30, "postgres", "postgres: vfps: checkpointer", 70),
            ]
            .into_iter()
            .map(|p| (p.pid, p))
            .collect(),
            busy_ticks: 1000,
        };
        let mut after = before.clone();
        let mut add = |pid: u32, ticks: u64| after.procs.get_mut(&pid).unwrap().cpu_ticks += ticks;
        add(10, 300);
        add(11, 50);
        add(12, 1500);
        add(20, 400);
        add(30, 100);
        add(31, 900);
        // A renderer born during the window counts from zero; a reused pid
        // is another process.
        after
            .procs
            .insert(13, proc(13, 12, "chromium", "--type=renderer", 250));
        after.procs.insert(
            99,
            Proc {
                start_ticks: 7,
                ..proc(99, 1, "haproxy", "haproxy -db", 60)
            },
        );
        after.busy_ticks = 6000;
        let cost = CpuCost::between(&before, &after, 10, 10.0, 2, 100);
        assert_eq!(cost.seconds_of(Part::LoadGenerator), 3.0);
        assert_eq!(cost.seconds_of(Part::BrowserProbe), 0.5 + 15.0 + 2.5);
        assert_eq!(cost.seconds_of(Part::Vfps), 4.0);
        assert_eq!(cost.seconds_of(Part::Patroni), 1.0);
        assert_eq!(cost.seconds_of(Part::Postgres), 9.0);
        assert_eq!(cost.seconds_of(Part::LoadBalancer), 0.6);
        assert!((cost.harness_seconds() - 21.6).abs() < 1e-9);
        assert!((cost.service_seconds() - 14.0).abs() < 1e-9);
        assert!((cost.share(cost.seconds_of(Part::BrowserProbe)) - 0.9).abs() < 1e-9);
        assert_eq!(cost.machine_busy_seconds, 50.0);
        assert!(cost.lines().iter().any(|l| l.contains("browser probe")));
    }

    #[test]
    fn a_snapshot_of_this_machine_finds_this_process_as_the_harness() {
        let s = Snapshot::take().unwrap();
        let me = std::process::id();
        assert_eq!(s.parts(me).get(&me), Some(&Part::LoadGenerator));
        assert!(cores() >= 1);
        assert!(s.busy_ticks > 0);
    }
}
