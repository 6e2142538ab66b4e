//! `db-restore-drill` on the local platform (scenario/drill.rs says why it
//! runs after the load window): under a Create load of its own, in a
//! namespace of its own, a base backup, writes after it, every database
//! instance and its storage destroyed, the cluster restored from the bucket
//! alone with its replicas cloned back (`Local::restore`, the hold written,
//! vfps restarted), every acknowledged write read back under the hold (a
//! re-Create under the hold answers a known original's pseudonym and refuses
//! a forgotten one instead of minting another), the restore confirmed, and a
//! first write acknowledged again. P9 judges it; its verdict, RPO and RTO go
//! to `restore-drill.json` (driver/artifacts.rs) for the run's final verdicts, its load's timeline
//! and ledger to `db-restore-drill/`.

use std::{collections::HashMap, path::Path, time::Duration};

use anyhow::Context;
use tokio::time::Instant;

use super::{connection_string, zone_of, Local};
use crate::{
    checker::{
        restore::{Measured, Restored},
        Verdict,
    },
    config::LoadConfig,
    drill::{judge, DrillClient, Steps, Timing},
    driver::artifacts::DrillOutcome,
    report, run,
    scenario::drill::DrillPlan,
};

/// Runs the drill and leaves its outcome in `dir` (`crate::drill::finish`).
pub async fn run(
    local: &Local,
    plan: &DrillPlan,
    cfg: &LoadConfig,
    dir: &Path,
) -> anyhow::Result<DrillOutcome> {
    let own = dir.join(plan.name.as_str());
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let mut steps = Steps::new(plan);
    let result = drill(local, plan, cfg, &own, &mut steps).await;
    crate::drill::finish(dir, plan, result, steps.done)
}

async fn drill(
    local: &Local,
    plan: &DrillPlan,
    cfg: &LoadConfig,
    own: &Path,
    steps: &mut Steps,
) -> anyhow::Result<(Verdict, Measured)> {
    let client = DrillClient::new(plan, cfg, own).await?;
    let start = Instant::now();
    let start_unix = run::unix_now();
    let (_totals, sequence) = tokio::join!(
        client.load(),
        steps_of(local, plan, &client, (start, start_unix), steps)
    );
    client.ledger.flush();
    report::write_timeline(own, &client.timeline.rows())?;
    let (timing, reads) = sequence?;
    let entries = client.ledger.entries();
    let restored: Vec<Restored> = entries
        .iter()
        .map(|e| {
            reads.get(&e.original).cloned().unwrap_or_else(|| {
                // Offered after the reads: judged by the uniqueness rule alone.
                Restored::Error("written after the read-back".into())
            })
        })
        .collect();
    Ok(judge(plan, &entries, &restored, &timing))
}

/// The drill's steps beside its load, on the clock that began at `start`
/// (`start_unix` in Unix seconds); the read-back by original (a reservoir
/// ledger reuses its slots).
async fn steps_of(
    local: &Local,
    plan: &DrillPlan,
    client: &DrillClient,
    (start, start_unix): (Instant, f64),
    steps: &mut Steps,
) -> anyhow::Result<(Timing, HashMap<String, Restored>)> {
    let at = || start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(plan.warmup_seconds)).await;
    let backup_started = Instant::now();
    let id = local.base_backup().await.context("the base backup")?;
    let backup_seconds = backup_started.elapsed().as_secs_f64();
    steps.step(at(), &format!("base backup {id}"));
    tokio::time::sleep(Duration::from_secs(plan.writes_after_backup_seconds)).await;
    let mistakes = mistakes(local, client, steps, &at).await;
    steps.step(at(), "destroying every database instance and its storage");
    let restored = local
        .restore(plan.to.restore_to())
        .await
        .context("the restore")?;
    let destroyed_at = restored
        .destroyed
        .duration_since(start.into_std())
        .as_secs_f64();
    steps.step(
        destroyed_at,
        "every database instance and its storage destroyed",
    );
    steps.step(
        at(),
        &format!(
            "restored from {} of {} ({}), replicas back, held; archiving as {}",
            restored.backup_id,
            restored.from_cluster,
            restored
                .recovered_to
                .as_deref()
                .map_or("nothing replayed".to_owned(), |t| format!(
                    "recovered to {t}"
                )),
            restored.new_cluster
        ),
    );
    let destroyed_unix = run::unix_now() - (at() - destroyed_at);
    let leader = local
        .leader()
        .await?
        .context("no leader after the restore")?;
    let newest = local
        .query_database(
            zone_of(&leader.name)?,
            "vfps",
            &crate::drill::restore_point_sql(destroyed_unix),
        )
        .await?;
    let restore_point_unix = crate::drill::parse_restore_point(&newest)?;
    // Every entry offered before the destruction, read back under the hold.
    let entries: Vec<_> = client
        .ledger
        .entries()
        .into_iter()
        .filter(|e| (e.second as f64) < destroyed_at)
        .collect();
    let reads = client.read_back(entries).await;
    steps.step(at(), &format!("{} ledger entries read back", reads.len()));
    crate::backup::cli::confirm(&local.opts.vfps_bin, &connection_string()).await?;
    steps.step(at(), "restore confirmed");
    let first = client.first_write(0, crate::drill::READ_DEADLINE).await;
    if first != tonic::Code::Ok {
        anyhow::bail!("the first write after the confirmation failed: {first:?}");
    }
    let served_again_at = at();
    steps.step(served_again_at, "a new original acknowledged");
    Ok((
        Timing {
            mistakes,
            backup_seconds,
            restore_seconds: restored.took.as_secs_f64(),
            destroyed_at,
            // The last instant the restored database holds.
            restore_point: restore_point_unix - start_unix,
            served_again_at,
            origin_unix: start_unix,
        },
        reads,
    ))
}

/// The mistakes an operator makes with `local restore`, each asked for
/// before the real restore: a target in the future (after the last archived
/// commit, by far) and one before the first base backup. Each must be
/// refused before anything is destroyed, and the cluster serve a new
/// original right after (P9 fails otherwise).
async fn mistakes(
    local: &Local,
    client: &DrillClient,
    steps: &mut Steps,
    at: &impl Fn() -> f64,
) -> Vec<crate::drill::Mistake> {
    let now = run::unix_now() as i64;
    let targets = [
        (
            now + 3600,
            "an hour from now (after the last archived commit)",
        ),
        (
            now - 30 * 24 * 3600,
            "thirty days ago (before the first base backup)",
        ),
    ];
    let mut out = Vec::new();
    for (n, (t, why)) in targets.into_iter().enumerate() {
        let to = crate::backup::RestoreTo::Time(t);
        let what = format!("{to}, {why}");
        let refusal = match local.restore(to).await {
            Err(e) if e.downcast_ref::<crate::backup::Refusal>().is_some() => {
                Some(format!("{e:#}"))
            }
            Err(e) => {
                steps.step(at(), &format!("mistake {what}: failed, not refused: {e:#}"));
                None
            }
            Ok(_) => None,
        };
        let serving_after = client
            .first_write(1000 + n as u64, crate::drill::READ_DEADLINE)
            .await
            == tonic::Code::Ok;
        steps.step(
            at(),
            &format!(
                "mistake {what}: {}; the cluster {} a new original after it",
                refusal
                    .as_deref()
                    .map_or("NOT refused".to_owned(), |r| format!("refused ({r})")),
                if serving_after {
                    "acknowledged"
                } else {
                    "did NOT acknowledge"
                }
            ),
        );
        out.push(crate::drill::Mistake {
            what,
            refusal,
            serving_after,
        });
    }
    out
}
