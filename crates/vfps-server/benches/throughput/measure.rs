//! What the benchmark reads of a process and the machine: CPU seconds, memory,
//! the server's latency histograms, percentiles.

use super::*;

/// User plus system CPU time of process `pid` so far.
pub(super) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
}

/// CPU-seconds spent so far by the benchmark process, the server and the whole
/// machine (every core, every process, the kernel): marks around a phase split
/// its cost between the clients, the server and everything else (PostgreSQL,
/// the kernel's loopback traffic).
#[derive(Clone, Copy)]
pub(super) struct CpuMark {
    pub(super) bench: f64,
    pub(super) server: f64,
    pub(super) machine: f64,
}

impl CpuMark {
    pub(super) fn now(server: u32) -> Self {
        Self {
            bench: cpu_seconds(std::process::id()),
            server: cpu_seconds(server),
            machine: machine_busy_seconds(),
        }
    }

    /// CPU-seconds per 1,000 of `calls` since `self`.
    pub(super) fn per_1000(self, server: u32, calls: u64) -> CpuSplit {
        let now = Self::now(server);
        let k = calls.max(1) as f64 / 1000.0;
        CpuSplit {
            bench: (now.bench - self.bench) / k,
            server: (now.server - self.server) / k,
            machine: (now.machine - self.machine) / k,
        }
    }
}

/// CPU-seconds per 1,000 calls of one phase.
#[derive(Clone, Copy, Default)]
pub(super) struct CpuSplit {
    pub(super) bench: f64,
    pub(super) server: f64,
    pub(super) machine: f64,
}

impl CpuSplit {
    /// Neither the benchmark nor the server: PostgreSQL, loopback networking.
    pub(super) fn rest(&self) -> f64 {
        self.machine - self.bench - self.server
    }
}

/// Busy CPU time of all cores since boot (`/proc/stat`: everything but idle
/// and I/O wait).
pub(super) fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is within user).
    let busy: f64 = ticks.iter().take(8).sum::<f64>() - ticks[3] - ticks[4];
    busy / clock_ticks()
}

/// Sum and count of a histogram on the server's `/metrics`: `name`, with
/// labels, the series whose labels contain `labels` summed.
pub(super) async fn histogram(server: &Server, name: &str) -> (f64, f64) {
    let text = reqwest::get(&server.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (name, labels) = name.split_once('{').unwrap_or((name, ""));
    let labels = labels.trim_end_matches('}');
    let value = |suffix: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("{name}_{suffix}")))
            .filter(|l| l.starts_with(' ') || (l.starts_with('{') && l.contains(labels)))
            .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
            .sum()
    };
    (value("sum"), value("count"))
}

/// Mean of the histogram `name`'s observations between `before` and now.
pub(super) async fn mean_since(server: &Server, name: &str, before: (f64, f64)) -> f64 {
    let (sum, count) = histogram(server, name).await;
    (sum - before.0) / (count - before.1)
}

/// Means of a phase's latency histograms, in ms: the server's time per call
/// (from its request to its response, as the server sees them), and of the
/// coalescer's queue wait and statement round trip (Creates only).
pub(super) struct Latencies {
    pub(super) names: [&'static str; 3],
    pub(super) before: [(f64, f64); 3],
}

impl Latencies {
    pub(super) const CREATE: [&'static str; 3] = [
        "vfps_request_duration_seconds{method=\"PseudonymService/Create\"}",
        "vfps_create_queue_wait_seconds",
        "vfps_create_batch_round_trip_seconds",
    ];

    pub(super) async fn start(server: &Server, names: [&'static str; 3]) -> Self {
        let mut before = [(0.0, 0.0); 3];
        for (b, n) in before.iter_mut().zip(names) {
            *b = histogram(server, n).await;
        }
        Self { names, before }
    }

    /// Means since the start, ms.
    pub(super) async fn means(&self, server: &Server) -> [f64; 3] {
        let mut means = [0.0; 3];
        for ((m, n), b) in means.iter_mut().zip(self.names).zip(self.before) {
            *m = mean_since(server, n, b).await * 1000.0;
        }
        means
    }
}

/// Clock ticks per second of `/proc`'s CPU times, asked once (not a process
/// spawned inside every measurement).
pub(super) fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `/proc/<pid>/status` memory line (`VmRSS`, `VmHWM`) in MiB.
pub(super) fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

pub(super) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
