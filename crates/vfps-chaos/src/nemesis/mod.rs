//! The faults as nouns, shared by every platform. A scenario proves its fault
//! took effect and proves it healed; database faults wait for a healthy cluster
//! first and never overlap. A platform implements [`Faults`]: how each step is
//! done where the topology lives.
//!
//! # Layout
//! - this file: [`Faults`], the [`Knobs`], the [`Recorder`] that puts every
//!   event on the load's clock, and [`run`], the scenarios in order.
//! - [`pod_kill`], [`primary_kill`], [`partition`], [`drain`]: one fault family
//!   each (the rollout is the platform's own: a restart means different things).
//! - the gray faults: [`primary_pause`], [`isolation`], [`double_failover`],
//!   [`standby_kill`], [`replica_faults`] (a replica paused, a replica cut off
//!   from the database), [`delay`] (latency to the database).
//! - [`job_runner`]: the replica running a CSV job killed or paused;
//!   [`objects`]: a node of the jobs' object store killed.
//!
//! Every scenario proves by behaviour that its fault applied and healed — a new
//! leader on a higher timeline, WAL that stops arriving, a connection that times
//! out, a replica that stops answering — so a fault that silently did nothing
//! fails its scenario.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tokio::{sync::Mutex, time::Instant};

use crate::scenario::{
    events::{ChaosEvent, EventKind},
    Scenario, ScenarioName, ScenarioPlan,
};

pub mod delay;
pub mod double_failover;
pub mod drain;
pub mod isolation;
pub mod job_runner;
pub mod objects;
pub mod partition;
pub mod pod_kill;
pub mod primary_kill;
pub mod primary_pause;
pub mod replica_faults;
pub mod standby_kill;

/// Knobs of the faults (`POD_KILL_INTERVAL_SECONDS`, …).
#[derive(Debug, Clone)]
pub struct Knobs {
    pub pod_kill_interval: Duration,
    pub partition_burst: Duration,
    pub partition_every: Duration,
    pub min_ready: Duration,
    pub drain_hold: Duration,
    /// How long the primary stays stopped (`PAUSE_SECONDS`): past the leader TTL.
    pub db_pause: Duration,
    /// How long the primary is cut off before it is killed (`ISOLATION_SECONDS`).
    pub isolation: Duration,
    /// How long a vfps replica stays stopped (`VFPS_PAUSE_SECONDS`): past the call deadline.
    pub vfps_pause: Duration,
    /// How long a vfps replica is cut off from the database (`VFPS_PARTITION_SECONDS`):
    /// past its readiness grace (`VFPS_READINESS_DATABASE_GRACE`, 30 s by default).
    pub vfps_partition: Duration,
    /// How long the database is slow (`DELAY_SECONDS`).
    pub delay: Duration,
    /// How long an object store node stays down (`OBJECTS_DOWN_SECONDS`).
    pub objects_down: Duration,
}

/// A knob that is not a positive number of seconds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KnobError(String);

impl Knobs {
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, KnobError> {
        let secs = |k: &str, d: u64| -> Result<Duration, KnobError> {
            match var(k) {
                None => Ok(Duration::from_secs(d)),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Duration::from_secs(n)),
                    _ => Err(KnobError(format!(
                        "{k}={v:?} is not a positive whole number of seconds"
                    ))),
                },
            }
        };
        Ok(Self {
            pod_kill_interval: secs("POD_KILL_INTERVAL_SECONDS", 45)?,
            partition_burst: secs("PARTITION_BURST_SECONDS", 20)?,
            partition_every: secs("PARTITION_EVERY_SECONDS", 60)?,
            min_ready: secs("MIN_READY_SECONDS", 5)?,
            drain_hold: secs("DRAIN_HOLD_SECONDS", 15)?,
            db_pause: secs("PAUSE_SECONDS", 15)?,
            isolation: secs("ISOLATION_SECONDS", 10)?,
            vfps_pause: secs("VFPS_PAUSE_SECONDS", 10)?,
            vfps_partition: secs("VFPS_PARTITION_SECONDS", 40)?,
            delay: secs("DELAY_SECONDS", 40)?,
            objects_down: secs("OBJECTS_DOWN_SECONDS", 15)?,
        })
    }
}

/// Records chaos events on the load's clock.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<ChaosEvent>>>,
}

impl Recorder {
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    async fn record(&self, scenario: Option<&ScenarioName>, kind: EventKind, text: String) {
        self.record_at(scenario, kind, Instant::now(), text).await;
    }

    /// Records an event that happened at `at` (before now): the timeline stays
    /// in time order.
    async fn record_at(
        &self,
        scenario: Option<&ScenarioName>,
        kind: EventKind,
        at: Instant,
        text: String,
    ) {
        let e = ChaosEvent {
            at_seconds: at.saturating_duration_since(self.start).as_secs_f64(),
            scenario: scenario.cloned(),
            kind,
            text,
        };
        eprintln!(
            "chaos t={:>7.2}s {:<22} {}",
            e.at_seconds,
            e.scenario.as_ref().map_or("harness", ScenarioName::as_str),
            e.text
        );
        let mut events = self.events.lock().await;
        let after = events.partition_point(|x| x.at_seconds <= e.at_seconds);
        events.insert(after, e);
    }

    pub async fn start(&self, scenario: &ScenarioName) {
        self.record(Some(scenario), EventKind::Start, "start".into())
            .await;
    }
    pub async fn end(&self, scenario: &ScenarioName) {
        self.record(Some(scenario), EventKind::End, "end".into())
            .await;
    }
    /// A fault took effect.
    pub async fn fault(&self, scenario: &ScenarioName, text: impl Into<String>) {
        self.record(Some(scenario), EventKind::Fault, text.into())
            .await;
    }
    /// A fault that took effect at `at`, recorded once proven (a pause is
    /// proven by a probe that times out: its time is when the processes
    /// stopped, not when the proof ended).
    pub async fn fault_at(&self, scenario: &ScenarioName, at: Instant, text: impl Into<String>) {
        self.record_at(Some(scenario), EventKind::Fault, at, text.into())
            .await;
    }
    /// A fault healed, as the topology shows.
    pub async fn heal(&self, scenario: &ScenarioName, text: impl Into<String>) {
        self.record(Some(scenario), EventKind::Heal, text.into())
            .await;
    }
    pub async fn note(&self, scenario: &ScenarioName, text: impl Into<String>) {
        self.record(Some(scenario), EventKind::Note, text.into())
            .await;
    }
    /// Something about the run itself rather than a scenario.
    pub async fn harness(&self, text: impl Into<String>) {
        self.record(None, EventKind::Note, text.into()).await;
    }

    pub async fn events(&self) -> Vec<ChaosEvent> {
        self.events.lock().await.clone()
    }
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
    /// The instant `offset` into the load window.
    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }
}

/// A killed vfps replica, to wait for its replacement.
#[derive(Debug, Clone)]
pub struct Victim {
    /// Pod (or local replica) name, for the timeline.
    pub name: String,
    /// Platform-specific identity of the killed incarnation.
    pub incarnation: String,
}

/// A CSV job as the service reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub id: String,
    /// Whether it is running now (not queued, not finished).
    pub running: bool,
    /// The replica holding (or last holding) its lease.
    pub runner: String,
    /// Its fencing epoch: a takeover raises it.
    pub epoch: i64,
    /// Rows of its last checkpoint.
    pub rows: i64,
    /// Input bytes of its last checkpoint, and in all.
    pub bytes_done: i64,
    pub bytes_total: i64,
}

/// A database instance and its incarnation (a restarted instance keeps its name
/// and changes its incarnation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub name: String,
    pub incarnation: String,
}

/// Where an instance's WAL stands (bytes from the start of WAL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalPosition {
    pub name: String,
    /// Written (the primary) or received (a standby).
    pub lsn: u64,
    pub primary: bool,
}

/// One end of a TCP probe: a vfps replica (its gRPC port) or a database
/// instance (PostgreSQL's port).
#[derive(Debug, Clone, Copy)]
pub enum Pod<'a> {
    Replica(&'a str),
    Instance(&'a Instance),
}

/// What a TCP connect saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// The handshake completed.
    Connected,
    /// No answer within the probe's timeout: packets are dropped.
    TimedOut,
    /// Refused (RST, ICMP): the path is open, nothing listens.
    Refused,
}

/// What a platform provides to the shared scenarios. A method that applies a
/// fault returns once the fault is observed in effect, or fails.
#[allow(async_fn_in_trait)] // used through generics inside this crate only
pub trait Faults: Sync {
    /// Every database instance up and replicating synchronously, one primary.
    async fn wait_db_healthy(&self, timeout: Duration) -> anyhow::Result<()>;
    /// Every vfps replica ready.
    async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()>;
    /// How long healing may take here (a killed replica, a failover, a rejoin).
    fn heal_timeout(&self) -> Duration;

    /// The pod-kill scenario begins (e.g. a Chaos Mesh Schedule is applied).
    async fn pod_kill_begin(&self, interval: Duration) -> anyhow::Result<()>;
    /// Whether the platform paces kills itself (a schedule) rather than the scenario.
    fn paces_pod_kills(&self) -> bool;
    /// The next replica kill — of the `replica`-th replica (sorted by name, as
    /// the seed drew it) here, or observed when the platform paces them;
    /// `None` when no kill happened before `until`.
    async fn pod_kill_next(&self, replica: usize, until: Instant)
        -> anyhow::Result<Option<Victim>>;
    /// SIGKILLs the replica named `replica` (as [`Faults::replicas`] names
    /// it); returns once that incarnation is gone. Its platform starts a new
    /// one, [`Faults::wait_replaced`] waits for it.
    async fn kill_named_replica(&self, replica: &str) -> anyhow::Result<Victim>;
    /// Waits until the killed replica is replaced and every replica is ready.
    async fn wait_replaced(&self, victim: &Victim) -> anyhow::Result<()>;
    /// The pod-kill scenario ends; no further kill may happen after this returns.
    async fn pod_kill_end(&self) -> anyhow::Result<()>;

    /// The database primary now, if one is elected.
    async fn primary(&self) -> anyhow::Result<Option<Instance>>;
    async fn kill_primary(&self, primary: &Instance) -> anyhow::Result<()>;
    /// After the promotion: bring the killed instance back (where nobody else does).
    async fn restore_instance(&self, instance: &Instance) -> anyhow::Result<()>;

    /// Cuts every vfps replica off the database; returns once the cut is in effect.
    async fn partition(&self, burst: Duration) -> anyhow::Result<()>;
    /// Removes the cut; returns once it is gone.
    async fn heal_partition(&self) -> anyhow::Result<()>;

    /// Restarts every replica, one at a time, never below full capacity for long.
    async fn rollout(
        &self,
        knobs: &Knobs,
        rec: &Recorder,
        scenario: &ScenarioName,
    ) -> anyhow::Result<()>;

    /// The timeline the primary writes on (a promotion starts a new one);
    /// `None` while there is no primary.
    async fn timeline(&self) -> anyhow::Result<Option<u64>>;
    /// The synchronous standby now, if there is one.
    async fn sync_standby(&self) -> anyhow::Result<Option<Instance>>;
    /// Kills a standby; the platform restarts it in [`Faults::restore_instance`]
    /// (or by itself).
    async fn kill_standby(&self, standby: &Instance) -> anyhow::Result<()>;
    /// Stops every process of the instance (SIGSTOP); returns once it no
    /// longer answers, with the instant every process was seen stopped (the
    /// fault's time: proving it answers nothing takes a probe's timeout more).
    async fn pause_instance(&self, instance: &Instance) -> anyhow::Result<Instant>;
    /// Resumes a paused instance (SIGCONT); returns once it answers.
    async fn resume_instance(&self, instance: &Instance) -> anyhow::Result<()>;
    /// Cuts the instance off from the other instances only, both ways, for at
    /// most `hold` (a platform that schedules the heal itself needs it).
    async fn isolate_instance(&self, instance: &Instance, hold: Duration) -> anyhow::Result<()>;
    /// Removes the isolation.
    async fn heal_isolation(&self, instance: &Instance) -> anyhow::Result<()>;
    /// Where each reachable instance's WAL stands: written on the primary,
    /// received on a standby.
    async fn wal_positions(&self) -> anyhow::Result<Vec<WalPosition>>;
    /// A TCP connect from one pod to another.
    async fn connect(&self, from: Pod<'_>, to: Pod<'_>) -> anyhow::Result<Connect>;

    /// The vfps replicas now, sorted by name (the seeded schedule indexes them).
    async fn replicas(&self) -> anyhow::Result<Vec<String>>;
    /// Whether a replica answers its readiness probe with "ready".
    async fn replica_ready(&self, replica: &str) -> bool;
    /// Whether a replica answers HTTP at all (ready or not).
    async fn replica_answers(&self, replica: &str) -> bool;
    /// Stops a replica's process (SIGSTOP) and returns once every thread of
    /// it has stopped; nothing restarts it.
    async fn pause_replica(&self, replica: &str) -> anyhow::Result<()>;
    /// Resumes a paused replica (SIGCONT).
    async fn resume_replica(&self, replica: &str) -> anyhow::Result<()>;
    /// Cuts one replica off from every database instance, for at most `hold`.
    async fn cut_replica(&self, replica: &str, hold: Duration) -> anyhow::Result<()>;
    /// Removes the replica's cut.
    async fn heal_replica_cut(&self, replica: &str) -> anyhow::Result<()>;
    /// Makes every replica's database traffic slow (`delay` ± `jitter`) for at
    /// most `hold`; returns once the platform reports it injected.
    async fn delay_database(
        &self,
        delay: Duration,
        jitter: Duration,
        hold: Duration,
    ) -> anyhow::Result<()>;
    /// Removes the delay.
    async fn heal_delay(&self) -> anyhow::Result<()>;

    /// A node to drain that does not hold the database primary (a drain must not
    /// also be a failover), refused when the disruption budget is spent.
    async fn drain_target(&self) -> anyhow::Result<String>;
    /// Evicts everything from the node (respecting disruption budgets).
    async fn drain(&self, node: &str) -> anyhow::Result<()>;
    /// Returns the node to service.
    async fn uncordon(&self, node: &str) -> anyhow::Result<()>;

    /// The run's CSV jobs as the service reports them (none where the
    /// platform does not look).
    async fn jobs_now(&self) -> anyhow::Result<Vec<RunningJob>> {
        Ok(Vec::new())
    }

    /// The nodes of the jobs' object store, by name (none where the
    /// platform does not run it).
    async fn objects_nodes(&self) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// SIGKILLs an object store node; returns once it is gone.
    async fn kill_objects_node(&self, node: &str) -> anyhow::Result<()> {
        anyhow::bail!("no object store node {node} on this platform")
    }
    /// Starts a killed node; returns once it serves and the store sees every node.
    async fn restore_objects_node(&self, node: &str) -> anyhow::Result<()> {
        anyhow::bail!("no object store node {node} on this platform")
    }
    /// Whether a node's S3 API answers at all.
    async fn objects_node_answers(&self, _node: &str) -> bool {
        false
    }
    /// Whether a killed node comes back by itself within seconds (a
    /// StatefulSet re-creates its pod), so it cannot be held down: its kill is
    /// proven by its incarnation gone instead of by silence.
    fn objects_node_returns_by_itself(&self) -> bool {
        false
    }
}

/// Waits until `instance` is a standby by its own account — in recovery,
/// receiving WAL — not merely listed as one by the HA manager.
pub async fn wait_standby<F: Faults>(f: &F, instance: &Instance) -> anyhow::Result<()> {
    let deadline = Instant::now() + f.heal_timeout();
    loop {
        let positions = f.wal_positions().await.unwrap_or_default();
        if positions
            .iter()
            .any(|w| w.name == instance.name && !w.primary)
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{} is not a standby {:?} after it came back: {positions:?}",
                instance.name,
                f.heal_timeout()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// What the scenarios did, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub failovers: u32,
    pub replica_kills: u32,
    pub partitions: u32,
    /// Pauses and isolations of an instance or a replica, delays.
    pub gray_faults: u32,
}

/// Runs every planned scenario in order, each in its own window.
pub async fn run<F: Faults>(
    f: &F,
    plan: &ScenarioPlan,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    let mut window_end = Duration::ZERO;
    for s in &plan.scenarios {
        window_end += Duration::from_secs(s.duration_seconds);
        let until = rec.at(window_end);
        rec.start(&s.name).await;
        if s.scenario != Scenario::Baseline {
            tokio::time::sleep(s.draw.first_fault_after()).await;
        }
        let name = &s.name;
        let result = match s.scenario {
            Scenario::Baseline => Ok(()),
            Scenario::VfpsPodKill => pod_kill::run(f, s, knobs, rec, until)
                .await
                .map(|n| tally.replica_kills += n),
            Scenario::DbPrimaryKill => primary_kill::run(f, &s.name, rec, until)
                .await
                .map(|n| tally.failovers += n),
            Scenario::DbNetworkPartition => partition::run(f, &s.name, knobs, rec, until)
                .await
                .map(|n| tally.partitions += n),
            Scenario::Rollout => f.rollout(knobs, rec, &s.name).await,
            Scenario::Drain => drain::run(f, &s.name, knobs, rec).await,
            Scenario::DbPrimaryPause => {
                primary_pause::run(f, name, knobs, rec, until)
                    .await
                    .map(|n| {
                        tally.failovers += n;
                        tally.gray_faults += n;
                    })
            }
            Scenario::DbPrimaryIsolation => isolation::run(f, name, knobs, rec).await.map(|()| {
                tally.failovers += 1;
                tally.gray_faults += 1;
            }),
            Scenario::DbDoubleFailover => double_failover::run(f, name, rec)
                .await
                .map(|n| tally.failovers += n),
            Scenario::DbSyncStandbyKill => standby_kill::run(f, name, rec).await,
            Scenario::VfpsPodPause => replica_faults::pause(f, s, knobs, rec)
                .await
                .map(|()| tally.gray_faults += 1),
            Scenario::VfpsPartition => replica_faults::cut(f, s, knobs, rec)
                .await
                .map(|()| tally.partitions += 1),
            Scenario::DbNetworkDelay => delay::run(f, name, knobs, rec)
                .await
                .map(|()| tally.gray_faults += 1),
            Scenario::JobRunnerKill => job_runner::kill(f, s, rec, until)
                .await
                .map(|()| tally.replica_kills += 1),
            Scenario::JobRunnerPause => job_runner::pause(f, s, knobs, rec, until)
                .await
                .map(|()| tally.gray_faults += 1),
            Scenario::ObjectsNodeKill => objects::node_kill(f, s, knobs, rec).await,
        };
        if let Err(e) = &result {
            rec.note(&s.name, format!("error: {e:#}")).await;
        }
        result.with_context(|| format!("scenario {}", s.name))?;
        // A scenario may end exactly at its window's end; past that is an overrun.
        if Instant::now() > until + Duration::from_millis(500) {
            rec.note(&s.name, "overran its window").await;
        }
        tokio::time::sleep_until(until).await;
        rec.end(&s.name).await;
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault proven after later events were recorded takes its place by
    /// its own time, and its time is when it took effect.
    #[tokio::test]
    async fn a_fault_recorded_late_is_placed_at_its_time() {
        let start = Instant::now();
        let rec = Recorder::new(start);
        let s = ScenarioName::new("db-primary-pause");
        rec.start(&s).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stopped = Instant::now();
        // The proof: a probe that times out.
        tokio::time::sleep(Duration::from_millis(100)).await;
        rec.note(&s, "proof under way").await;
        rec.fault_at(&s, stopped, "paused db-a").await;
        let events = rec.events().await;
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Start, EventKind::Fault, EventKind::Note],
            "{events:?}"
        );
        let expected = (stopped - start).as_secs_f64();
        assert!((events[1].at_seconds - expected).abs() < 1e-9, "{events:?}");
        assert!(events[2].at_seconds >= expected + 0.1, "{events:?}");
    }
}
