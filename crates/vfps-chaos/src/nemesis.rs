//! The faults as nouns, shared by every platform. A scenario proves its fault
//! took effect and proves it healed; database faults wait for a healthy cluster
//! first and never overlap. A [`Platform`] says how each step is done where the
//! topology lives.

use std::{sync::Arc, time::Duration};

use anyhow::{bail, Context};
use tokio::{sync::Mutex, time::Instant};

use crate::scenario::{ChaosEvent, Kind, Plan, Planned};

/// Knobs of the faults (`POD_KILL_INTERVAL_SECONDS`, …).
#[derive(Debug, Clone)]
pub struct Knobs {
    pub pod_kill_interval: Duration,
    pub partition_burst: Duration,
    pub partition_every: Duration,
    pub min_ready: Duration,
    pub drain_hold: Duration,
}

impl Knobs {
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let secs = |k: &str, d: u64| -> Result<Duration, String> {
            match var(k) {
                None => Ok(Duration::from_secs(d)),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Duration::from_secs(n)),
                    _ => Err(format!(
                        "{k}={v:?} is not a positive whole number of seconds"
                    )),
                },
            }
        };
        Ok(Self {
            pod_kill_interval: secs("POD_KILL_INTERVAL_SECONDS", 45)?,
            partition_burst: secs("PARTITION_BURST_SECONDS", 20)?,
            partition_every: secs("PARTITION_EVERY_SECONDS", 60)?,
            min_ready: secs("MIN_READY_SECONDS", 5)?,
            drain_hold: secs("DRAIN_HOLD_SECONDS", 15)?,
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
    pub async fn event(&self, scenario: &str, event: impl Into<String>) {
        let e = ChaosEvent {
            at_seconds: self.start.elapsed().as_secs_f64(),
            scenario: scenario.into(),
            event: event.into(),
        };
        eprintln!(
            "chaos t={:>7.2}s {:<22} {}",
            e.at_seconds, e.scenario, e.event
        );
        self.events.lock().await.push(e);
    }
    pub async fn events(&self) -> Vec<ChaosEvent> {
        self.events.lock().await.clone()
    }
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
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

/// A database instance and its incarnation (a restarted instance keeps its name
/// and changes its incarnation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub name: String,
    pub incarnation: String,
}

/// What a platform provides to the shared scenarios. A method that applies a
/// fault returns once the fault is observed in effect, or fails.
#[allow(async_fn_in_trait)] // used through generics inside this crate only
pub trait Platform: Sync {
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
    /// The next replica kill — done here, or observed when the platform paces
    /// them; `None` when no kill happened before `until`.
    async fn pod_kill_next(&self, round: usize, until: Instant) -> anyhow::Result<Option<Victim>>;
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
    async fn rollout(&self, knobs: &Knobs, rec: &Recorder, scenario: &str) -> anyhow::Result<()>;

    /// A node to drain that does not hold the database primary (a drain must not
    /// also be a failover), refused when the disruption budget is spent.
    async fn drain_target(&self) -> anyhow::Result<String>;
    /// Evicts everything from the node (respecting disruption budgets).
    async fn drain(&self, node: &str) -> anyhow::Result<()>;
    /// Returns the node to service.
    async fn uncordon(&self, node: &str) -> anyhow::Result<()>;
}

/// What the scenarios did, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub failovers: u32,
    pub replica_kills: u32,
    pub partitions: u32,
}

/// Runs every planned scenario in order, each in its own window.
pub async fn run<P: Platform>(
    p: &P,
    plan: &Plan,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    let mut window_end = Duration::ZERO;
    for s in &plan.scenarios {
        window_end += Duration::from_secs(s.duration_seconds);
        let until = rec.start + window_end;
        rec.event(&s.name, "start").await;
        let result = match s.kind {
            Kind::Baseline => Ok(()),
            Kind::VfpsPodKill => pod_kill(p, s, knobs, rec, until)
                .await
                .map(|n| tally.replica_kills += n),
            Kind::DbPrimaryKill => primary_kill(p, s, rec, until)
                .await
                .map(|n| tally.failovers += n),
            Kind::DbNetworkPartition => partition(p, s, knobs, rec, until)
                .await
                .map(|n| tally.partitions += n),
            Kind::Rollout => p.rollout(knobs, rec, &s.name).await,
            Kind::Drain => drain(p, s, knobs, rec).await,
        };
        if let Err(e) = &result {
            rec.event(&s.name, format!("error: {e:#}")).await;
        }
        result.with_context(|| format!("scenario {}", s.name))?;
        // A scenario may end exactly at its window's end; past that is an overrun.
        if Instant::now() > until + Duration::from_millis(500) {
            rec.event(&s.name, "overran its window").await;
        }
        tokio::time::sleep_until(until).await;
        rec.event(&s.name, "end").await;
    }
    Ok(tally)
}

async fn pod_kill<P: Platform>(
    p: &P,
    s: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    p.pod_kill_begin(knobs.pod_kill_interval).await?;
    let kills = async {
        let mut round = 0;
        while Instant::now() + Duration::from_secs(5) < until {
            let next = Instant::now() + knobs.pod_kill_interval;
            let Some(victim) = p.pod_kill_next(round, until).await? else {
                break;
            };
            round += 1;
            rec.event(&s.name, format!("killed {}", victim.name)).await;
            p.wait_replaced(&victim).await?;
            rec.event(
                &s.name,
                format!("healed: {} replaced, every replica ready", victim.name),
            )
            .await;
            if !p.paces_pod_kills() {
                tokio::time::sleep_until(next.min(until)).await;
            }
        }
        if round == 0 {
            bail!("no vfps replica was killed in the window: the fault never took effect");
        }
        Ok(round as u32)
    }
    .await;
    let ended = p.pod_kill_end().await;
    let n = kills?;
    ended?;
    Ok(n)
}

async fn primary_kill<P: Platform>(
    p: &P,
    s: &Planned,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let mut failovers = 0;
    loop {
        p.wait_db_healthy(p.heal_timeout()).await?;
        // Room for a failover and a rejoin; always at least one kill.
        if failovers > 0 && Instant::now() + Duration::from_secs(15) > until {
            return Ok(failovers);
        }
        let old = p
            .primary()
            .await?
            .context("no pod is labelled as the database primary: cannot kill it")?;
        p.kill_primary(&old).await?;
        rec.event(&s.name, format!("killed primary {}", old.name))
            .await;
        let deadline = Instant::now() + p.heal_timeout();
        let new = loop {
            if let Some(n) = p.primary().await.ok().flatten().filter(|n| *n != old) {
                break n;
            }
            if Instant::now() >= deadline {
                bail!(
                    "no new primary within {:?} after killing {}",
                    p.heal_timeout(),
                    old.name
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let how = if new.name == old.name {
            format!("{} restarted and primary again", new.name)
        } else {
            format!("promoted {}", new.name)
        };
        rec.event(&s.name, how).await;
        p.restore_instance(&old).await?;
        p.wait_db_healthy(p.heal_timeout()).await?;
        rec.event(
            &s.name,
            format!("healed: {} back, cluster healthy", old.name),
        )
        .await;
        failovers += 1;
    }
}

async fn partition<P: Platform>(
    p: &P,
    s: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<u32> {
    let mut bursts = 0;
    while bursts == 0 || Instant::now() + knobs.partition_burst < until {
        p.wait_db_healthy(p.heal_timeout()).await?;
        let next = Instant::now() + knobs.partition_every;
        let applied = p.partition(knobs.partition_burst).await;
        if applied.is_ok() {
            rec.event(&s.name, "applied: vfps pods cannot reach the database pods")
                .await;
            tokio::time::sleep(knobs.partition_burst).await;
        }
        // A partition must never outlive its burst, even one that failed to apply.
        let healed = p.heal_partition().await;
        applied?;
        healed?;
        rec.event(&s.name, "healed: partition removed").await;
        bursts += 1;
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next).await;
    }
    Ok(bursts)
}

async fn drain<P: Platform>(
    p: &P,
    s: &Planned,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    p.wait_db_healthy(p.heal_timeout()).await?;
    let node = p.drain_target().await?;
    let drained = p.drain(&node).await;
    if drained.is_ok() {
        rec.event(&s.name, format!("drained node {node}")).await;
        tokio::time::sleep(knobs.drain_hold).await;
    }
    // Always back in service, whatever the drain did.
    let back = p.uncordon(&node).await;
    drained.with_context(|| format!("drain of node {node}"))?;
    back?;
    p.wait_db_healthy(p.heal_timeout()).await?;
    p.wait_replicas_ready(p.heal_timeout()).await?;
    rec.event(
        &s.name,
        format!("healed: node {node} uncordoned, cluster healthy"),
    )
    .await;
    Ok(())
}
