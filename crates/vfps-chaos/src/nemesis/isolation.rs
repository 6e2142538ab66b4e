//! The isolated primary: the primary cut off from the other database instances
//! only — replication stops, while vfps and the control plane still reach it —
//! for `ISOLATION_SECONDS`, then killed. With synchronous replication no commit
//! can be acknowledged while no standby receives WAL; with asynchronous
//! replication every commit acknowledged in that time is lost at the failover
//! (the harness's self-test: `--database-profile unsafe-async`).
//!
//! Proof: a TCP connect from the primary to each standby times out while the
//! cut holds, and the standbys' received WAL position stops moving; after the
//! kill a standby is promoted on a higher timeline, and after the heal the
//! connects are answered again.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::{Connect, Faults, Instance, Knobs, Pod, Recorder, WalPosition};
use crate::scenario::ScenarioName;

pub async fn run<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    knobs: &Knobs,
    rec: &Recorder,
) -> anyhow::Result<()> {
    f.wait_db_healthy(f.heal_timeout()).await?;
    let primary = f
        .primary()
        .await?
        .context("no database primary to isolate")?;
    let before = f
        .timeline()
        .await?
        .context("the primary reports no timeline")?;
    let standbys = standbys(f, &primary).await?;
    let cut = isolate(f, scenario, rec, &primary, &standbys, knobs.isolation).await;
    // Killed while still cut off: nothing it wrote alone may reach a standby.
    let killed = match &cut {
        Ok(()) => f.kill_primary(&primary).await,
        Err(_) => Ok(()),
    };
    // On the timeline when it happened: the failover it starts is measured
    // from it (it was recorded after the promotion and the heal, so the
    // promotion seemed to come before the kill).
    if cut.is_ok() && killed.is_ok() {
        rec.fault(
            scenario,
            format!("killed the isolated primary {}", primary.name),
        )
        .await;
    }
    // Healed only once a standby is promoted: the killed primary's kernel
    // still holds the WAL its walsenders had queued, and delivers it the
    // moment the cut is gone (a standby then replays what the primary wrote
    // alone, and nothing is lost: the self-test saw this).
    let promoted = match (&cut, &killed) {
        (Ok(()), Ok(())) => Some(super::primary_kill::wait_promoted(f, &primary, before).await),
        _ => None,
    };
    let healed = f.heal_isolation(&primary).await;
    cut?;
    killed?;
    healed?;
    let (new, timeline) = promoted.context("no promotion was waited for")??;
    rec.note(
        scenario,
        format!("promoted {} on timeline {timeline}", new.name),
    )
    .await;
    f.restore_instance(&primary).await?;
    f.wait_db_healthy(f.heal_timeout()).await?;
    super::wait_standby(f, &primary).await?;
    for s in &standbys {
        prove_answered(f, &primary, s).await?;
    }
    rec.heal(
        scenario,
        format!(
            "healed: {} back as a standby, cluster healthy",
            primary.name
        ),
    )
    .await;
    Ok(())
}

/// Every instance but the primary, by name (from the standbys' WAL positions).
async fn standbys<F: Faults>(f: &F, primary: &Instance) -> anyhow::Result<Vec<Instance>> {
    let names: Vec<String> = f
        .wal_positions()
        .await?
        .into_iter()
        .filter(|w| !w.primary && w.name != primary.name)
        .map(|w| w.name)
        .collect();
    if names.is_empty() {
        bail!("no standby reports received WAL: nothing to isolate the primary from");
    }
    Ok(names
        .into_iter()
        .map(|name| Instance {
            incarnation: name.clone(),
            name,
        })
        .collect())
}

/// Applies the cut and holds it for `hold`, proving it: connects time out, and
/// the standbys' received WAL stops moving while the primary goes on.
async fn isolate<F: Faults>(
    f: &F,
    scenario: &ScenarioName,
    rec: &Recorder,
    primary: &Instance,
    standbys: &[Instance],
    hold: Duration,
) -> anyhow::Result<()> {
    f.isolate_instance(primary, hold).await?;
    let until = Instant::now() + hold;
    rec.fault(
        scenario,
        format!(
            "isolated {} from the other instances for {hold:?}",
            primary.name
        ),
    )
    .await;
    let probes = standbys.iter().map(|s| async move {
        let c = f.connect(Pod::Instance(primary), Pod::Instance(s)).await?;
        if c != Connect::TimedOut {
            bail!(
                "the isolation did not hold: a connect from {} to {} was {c:?}",
                primary.name,
                s.name
            );
        }
        anyhow::Ok(())
    });
    for r in futures::future::join_all(probes).await {
        r?;
    }
    // In-flight WAL may still land in the first moment after the cut.
    tokio::time::sleep(Duration::from_secs(1).min(hold / 4)).await;
    let first = f.wal_positions().await?;
    tokio::time::sleep_until(until).await;
    let last = f.wal_positions().await?;
    let proof = replication_stopped(&primary.name, &first, &last)?;
    rec.note(scenario, proof).await;
    Ok(())
}

/// Replication stopped: every standby's received WAL stood still between two
/// samples while the primary wrote past it. What was seen, or why not.
pub fn replication_stopped(
    primary: &str,
    first: &[WalPosition],
    last: &[WalPosition],
) -> anyhow::Result<String> {
    let written = last
        .iter()
        .find(|w| w.primary && w.name == primary)
        .map(|w| w.lsn)
        .with_context(|| format!("{primary} reports no written WAL"))?;
    let standbys: Vec<&WalPosition> = last.iter().filter(|w| !w.primary).collect();
    if standbys.is_empty() {
        bail!("no standby reports received WAL");
    }
    let mut behind = 0;
    for s in standbys {
        let before = first
            .iter()
            .find(|w| w.name == s.name && !w.primary)
            .with_context(|| format!("{} was not sampled at the start", s.name))?;
        if before.lsn != s.lsn {
            bail!(
                "the isolation did not hold: {} kept receiving WAL from {primary} ({} → {} bytes)",
                s.name,
                before.lsn,
                s.lsn
            );
        }
        behind = behind.max(written.saturating_sub(s.lsn));
    }
    if behind == 0 {
        bail!(
            "the primary wrote nothing the standbys lack while it was isolated:              nothing shows replication stopped"
        );
    }
    Ok(format!(
        "standbys' received WAL stood still; the primary wrote {behind} bytes past them"
    ))
}

/// After the heal, a connect from the old primary to a standby is answered.
async fn prove_answered<F: Faults>(
    f: &F,
    primary: &Instance,
    standby: &Instance,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match f
            .connect(Pod::Instance(primary), Pod::Instance(standby))
            .await?
        {
            Connect::Connected | Connect::Refused => return Ok(()),
            Connect::TimedOut if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Connect::TimedOut => bail!(
                "the isolation outlived its heal: {} still cannot reach {}",
                primary.name,
                standby.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(name: &str, lsn: u64, primary: bool) -> WalPosition {
        WalPosition {
            name: name.into(),
            lsn,
            primary,
        }
    }

    #[test]
    fn replication_stopped_only_when_standbys_stand_still_behind_the_primary() {
        let first = [
            w("db-a", 100, true),
            w("db-b", 90, false),
            w("db-c", 90, false),
        ];
        let stopped = [
            w("db-a", 500, true),
            w("db-b", 90, false),
            w("db-c", 90, false),
        ];
        assert!(replication_stopped("db-a", &first, &stopped)
            .unwrap()
            .contains("410 bytes"));
        // A standby that kept receiving: the cut did not hold.
        let flowing = [
            w("db-a", 500, true),
            w("db-b", 500, false),
            w("db-c", 90, false),
        ];
        let e = replication_stopped("db-a", &first, &flowing).unwrap_err();
        assert!(e.to_string().contains("db-b kept receiving"), "{e}");
        // Nothing written: standing still proves nothing.
        let idle = [
            w("db-a", 90, true),
            w("db-b", 90, false),
            w("db-c", 90, false),
        ];
        assert!(replication_stopped("db-a", &first, &idle).is_err());
        // No standby sampled at all.
        assert!(replication_stopped("db-a", &first, &[w("db-a", 500, true)]).is_err());
    }
}
