//! The faults as nouns, on the local platform. Each scenario proves its fault
//! took effect and proves it healed; database faults wait for a healthy cluster
//! first and never overlap.

use std::{sync::Arc, time::Duration};

use anyhow::{bail, Context};
use tokio::{sync::Mutex, time::Instant};

use crate::{
    platform::local::{Local, ZONES},
    scenario::{ChaosEvent, Kind, Plan},
};

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
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Duration::from_secs)
                    .map_err(|_| format!("{k}={v:?} is not a whole number of seconds")),
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
    pub async fn event(&self, scenario: Kind, event: impl Into<String>) {
        let e = ChaosEvent {
            at_seconds: self.start.elapsed().as_secs_f64(),
            scenario: scenario.name().into(),
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

/// Runs every planned scenario in order, each in its own window.
pub async fn run(local: &Local, plan: &Plan, knobs: &Knobs, rec: &Recorder) -> anyhow::Result<u32> {
    let mut failovers = 0;
    let mut window_end = Duration::ZERO;
    for s in &plan.scenarios {
        window_end += Duration::from_secs(s.duration_seconds);
        let until = rec.start + window_end;
        rec.event(s.kind, "start").await;
        let result = match s.kind {
            Kind::Baseline => Ok(()),
            Kind::VfpsPodKill => pod_kill(local, knobs, rec, until).await,
            Kind::DbPrimaryKill => primary_kill(local, rec, until)
                .await
                .map(|n| failovers += n),
            Kind::DbNetworkPartition => partition(local, knobs, rec, until).await,
            Kind::Rollout => rollout(local, knobs, rec).await,
            Kind::Drain => drain(local, knobs, rec).await,
        };
        if let Err(e) = &result {
            rec.event(s.kind, format!("error: {e:#}")).await;
        }
        result.with_context(|| format!("scenario {}", s.kind.name()))?;
        // A scenario may end exactly at its window's end; past that is an overrun.
        if Instant::now() > until + Duration::from_millis(500) {
            rec.event(s.kind, "overran its window").await;
        }
        tokio::time::sleep_until(until).await;
        rec.event(s.kind, "end").await;
    }
    Ok(failovers)
}

async fn pod_kill(
    local: &Local,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    let mut i = 0;
    while Instant::now() + Duration::from_secs(5) < until {
        let zone = ZONES[i % ZONES.len()];
        i += 1;
        let next = Instant::now() + knobs.pod_kill_interval;
        let starts = local.replica_starts(zone).await;
        let pid = local.kill_replica(zone).await?;
        rec.event(
            Kind::VfpsPodKill,
            format!("killed vfps-app-{zone} (pid {pid})"),
        )
        .await;
        crate::platform::net::wait_for(
            "the replica to be restarted and ready",
            Duration::from_secs(30),
            || async {
                local.replica_starts(zone).await > starts && local.replica_ready(zone).await
            },
        )
        .await?;
        rec.event(
            Kind::VfpsPodKill,
            format!("healed: vfps-app-{zone} restarted and ready"),
        )
        .await;
        tokio::time::sleep_until(next.min(until)).await;
    }
    Ok(())
}

async fn primary_kill(local: &Local, rec: &Recorder, until: Instant) -> anyhow::Result<u32> {
    let mut failovers = 0;
    loop {
        local.wait_db_healthy(Duration::from_secs(60)).await?;
        // Room for a failover and a rejoin; always at least one kill.
        if failovers > 0 && Instant::now() + Duration::from_secs(15) > until {
            return Ok(failovers);
        }
        let leader = local
            .leader()
            .await?
            .context("no pod is the primary: cannot kill it")?;
        let zone = leader.name.trim_start_matches("db-").to_owned();
        local.kill_db(&zone).await?;
        rec.event(
            Kind::DbPrimaryKill,
            format!("killed primary {}", leader.name),
        )
        .await;
        crate::platform::net::wait_for("a promoted standby", Duration::from_secs(30), || async {
            local
                .leader()
                .await
                .ok()
                .flatten()
                .is_some_and(|m| m.name != leader.name)
        })
        .await?;
        let new = local.leader().await?.map(|m| m.name).unwrap_or_default();
        rec.event(Kind::DbPrimaryKill, format!("promoted {new}"))
            .await;
        local.start_db(&zone).await?;
        local.wait_db_healthy(Duration::from_secs(60)).await?;
        rec.event(
            Kind::DbPrimaryKill,
            format!("healed: {} rejoined as a standby", leader.name),
        )
        .await;
        failovers += 1;
    }
}

async fn partition(
    local: &Local,
    knobs: &Knobs,
    rec: &Recorder,
    until: Instant,
) -> anyhow::Result<()> {
    let mut bursts = 0;
    while bursts == 0 || Instant::now() + knobs.partition_burst < until {
        local.wait_db_healthy(Duration::from_secs(60)).await?;
        let next = Instant::now() + knobs.partition_every;
        local.partition().await?;
        rec.event(
            Kind::DbNetworkPartition,
            "applied: vfps pods cannot reach the database pods",
        )
        .await;
        tokio::time::sleep(knobs.partition_burst).await;
        local.heal_partition().await?;
        rec.event(Kind::DbNetworkPartition, "healed: rules removed")
            .await;
        bursts += 1;
        if next >= until {
            break;
        }
        tokio::time::sleep_until(next).await;
    }
    Ok(())
}

async fn rollout(local: &Local, knobs: &Knobs, rec: &Recorder) -> anyhow::Result<()> {
    for zone in ZONES {
        let starts = local.replica_starts(zone).await;
        local.stop_replica(zone, false).await?;
        rec.event(Kind::Rollout, format!("stopped vfps-app-{zone} gracefully"))
            .await;
        crate::platform::net::wait_for(
            "the new replica to be ready",
            Duration::from_secs(30),
            || async {
                local.replica_starts(zone).await > starts && local.replica_ready(zone).await
            },
        )
        .await?;
        tokio::time::sleep(knobs.min_ready).await;
        rec.event(
            Kind::Rollout,
            format!("vfps-app-{zone} ready for {:?}", knobs.min_ready),
        )
        .await;
    }
    Ok(())
}

/// Takes a node down only when the disruption budget allows: every database
/// member healthy (never a second instance down). Drains a node whose database
/// member is not the primary.
pub async fn drain_node(local: &Local) -> anyhow::Result<&'static str> {
    if !local.db_healthy().await {
        bail!(
            "disruption budget exhausted: a database instance is already down; refusing to drain"
        );
    }
    let leader = local.leader().await?.context("no primary")?;
    let zone = ZONES
        .into_iter()
        .find(|z| format!("db-{z}") != leader.name)
        .context("no node without the primary")?;
    local.stop_replica(zone, true).await?;
    local.kill_db(zone).await?;
    Ok(zone)
}

async fn drain(local: &Local, knobs: &Knobs, rec: &Recorder) -> anyhow::Result<()> {
    local.wait_db_healthy(Duration::from_secs(60)).await?;
    let zone = drain_node(local).await?;
    rec.event(
        Kind::Drain,
        format!("node {zone} down (vfps stopped gracefully, database pod removed)"),
    )
    .await;
    tokio::time::sleep(knobs.drain_hold).await;
    local.start_db(zone).await?;
    local.resume_replica(zone).await;
    local.wait_db_healthy(Duration::from_secs(60)).await?;
    local.wait_replicas_ready(Duration::from_secs(30)).await?;
    rec.event(
        Kind::Drain,
        format!("healed: node {zone} back, cluster healthy"),
    )
    .await;
    Ok(())
}
