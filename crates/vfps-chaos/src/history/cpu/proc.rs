//! `/proc` read and parsed: every process's CPU times, parent, name and
//! command line, and the machine's busy time.

use std::collections::BTreeMap;

/// A process's identity: a pid is reused, a pid with its start time is not.
pub type ProcKey = (u32, u64);

/// The command lines already read, by process and the name it had then (an
/// `exec` changes the name, and the command line with it).
pub type Cmdlines = BTreeMap<ProcKey, (String, String)>;

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
    /// utime + stime: its own.
    pub own_ticks: u64,
    /// cutime + cstime: its children's that ended and that it reaped.
    pub child_ticks: u64,
}

impl Proc {
    pub fn key(&self) -> ProcKey {
        (self.pid, self.start_ticks)
    }
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
        own_ticks: num(14)? + num(15)?,
        child_ticks: num(16)? + num(17)?,
    })
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

/// Every process at one instant, and the machine's own counters.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub procs: BTreeMap<u32, Proc>,
    /// `/proc/stat`'s busy ticks over all CPUs (everything but idle and iowait).
    pub busy_ticks: u64,
}

impl Snapshot {
    /// Reads `/proc` now; a process that ends while it is read is skipped. A
    /// command line in `known` (same process, same name) is not read again.
    pub fn take(known: &Cmdlines) -> std::io::Result<Self> {
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
            let Some(mut p) = parse_stat(&stat, "") else {
                continue;
            };
            p.cmdline = match known.get(&p.key()) {
                Some((comm, cmdline)) if *comm == p.comm => cmdline.clone(),
                _ => std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default(),
            };
            procs.insert(pid, p);
        }
        let busy_ticks = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse_busy(&s))
            .unwrap_or(0);
        Ok(Self { procs, busy_ticks })
    }

    /// The part of each process that belongs to one: its nearest recognised
    /// ancestor's, itself included.
    pub fn parts(&self, harness_pid: u32) -> BTreeMap<u32, super::Part> {
        let mut out = BTreeMap::new();
        for &pid in self.procs.keys() {
            let mut at = pid;
            // Bounded: a cycle cannot happen in /proc, but a snapshot is not atomic.
            for _ in 0..64 {
                let Some(p) = self.procs.get(&at) else { break };
                if let Some(part) = super::Part::of(&p.comm, &p.cmdline, p.pid, harness_pid) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_from_the_last_parenthesis_on() {
        // A real line's shape (Chromium's renderer; a name with a space and a parenthesis).
        let line = "4242 (chromium (re) S 4200 4200 4200 0 -1 4194560 9383 0 0 0 1234 567 8 9 20 0 20 0 2057609250 1140592640 30000 18446744073709551615 0 0 0 0 0 0 0 4096 1260 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(line, "/usr/lib/chromium/chromium --type=renderer").unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.comm.as_str()),
            (4242, 4200, "chromium (re")
        );
        assert_eq!((p.own_ticks, p.child_ticks), (1234 + 567, 8 + 9));
        assert_eq!(p.start_ticks, 2_057_609_250);
        assert!(parse_stat("not a stat line", "").is_none());
        assert_eq!(
            parse_busy("cpu  100 20 30 4000 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"),
            Some(100 + 20 + 30 + 6 + 7 + 8)
        );
    }

    #[test]
    fn a_snapshot_of_this_machine_finds_this_process_as_the_harness() {
        let s = Snapshot::take(&Cmdlines::new()).unwrap();
        let me = std::process::id();
        assert_eq!(
            s.parts(me).get(&me),
            Some(&super::super::Part::LoadGenerator)
        );
        assert!(super::super::cores() >= 1);
        assert!(s.busy_ticks > 0);
        assert!(
            s.procs[&me].cmdline.contains("vfps_chaos"),
            "{:?}",
            s.procs[&me]
        );
    }
}
