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

use std::{collections::HashMap, path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use futures::StreamExt;
use tokio::time::Instant;
use tonic::Code;
use vfps_client::{Client, Outcome, RetryPolicy};

use super::{connection_string, faults::zone_of, Local};
use crate::{
    checker::{
        restore::{check, Drill, Measured, Restored},
        Property, Verdict,
    },
    config::{LoadConfig, Service},
    driver::artifacts::{DrillOutcome, DRILL_OUTCOME_FILE},
    history::{Calls, Ledger, Status, Timeline},
    report, run,
    scenario::drill::DrillPlan,
    workload::{
        generator::{self, Schedule},
        mix::Mix,
        Mixed,
    },
};

/// Deadline of one read-back (a re-Create under the hold), retries included.
const READ_DEADLINE: Duration = Duration::from_secs(30);
/// Read-backs in flight at once.
const READ_CONCURRENCY: usize = 16;

/// Runs the drill and leaves its outcome in `dir`. A drill that could not
/// run to its end is P9 invalid, naming the step: a restore that does not
/// come back is the finding, not a harness failure.
pub async fn run(
    local: &Local,
    plan: &DrillPlan,
    cfg: &LoadConfig,
    dir: &Path,
) -> anyhow::Result<DrillOutcome> {
    let own = dir.join(plan.name.as_str());
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let mut steps = Vec::new();
    let outcome = match drill(local, plan, cfg, &own, &mut steps).await {
        Ok((verdict, measured)) => DrillOutcome {
            verdict,
            measured: Some(measured),
            steps,
        },
        Err(e) => DrillOutcome {
            verdict: Verdict::holds(
                Property::RestoreDrill,
                false,
                format!("{}: the drill did not finish: {e:#}", plan.name),
            ),
            measured: None,
            steps,
        },
    };
    report::write_file(
        dir,
        DRILL_OUTCOME_FILE,
        serde_json::to_string_pretty(&outcome)?,
    )?;
    eprintln!("{}", outcome.verdict.summary);
    Ok(outcome)
}

async fn drill(
    local: &Local,
    plan: &DrillPlan,
    cfg: &LoadConfig,
    own: &Path,
    steps: &mut Vec<(String, f64)>,
) -> anyhow::Result<(Verdict, Measured)> {
    // A namespace of its own: the run's ledger knows nothing of it, and the
    // drill's originals cannot meet the run's.
    let service = Service {
        address: cfg.service.address.clone(),
        namespace: format!("{}-restore-drill", cfg.service.namespace),
    };
    let (endpoints, client) = run::reach(
        &service,
        &cfg.credentials,
        RetryPolicy::default(),
        cfg.workload.call_deadline(),
    )
    .await
    .context("the drill's namespace")?;
    let bearer = cfg.credentials.bearer()?;
    let reader = Client::new(endpoints, RetryPolicy::verification())
        .with_bearer(bearer.as_deref())
        .context("RESILIENCE_BEARER_TOKEN")?;
    let ledger = Arc::new(
        Ledger::create(&own.join("ledger.jsonl"), cfg.output.ledger_capacity)
            .context("cannot write the drill's ledger")?,
    );
    let timeline = Arc::new(Timeline::new(plan.duration_seconds));
    let seed = cfg.workload.seed.unwrap_or_default() ^ 0x5EED_D811;
    // Fresh originals only: a re-Create of an original the restore forgot
    // would be the operator's mistake the hold exists for, not the load's.
    let schedule = Schedule {
        rate_per_second: cfg.workload.rate_per_second,
        seconds: plan.duration_seconds,
        deadline: cfg.workload.call_deadline(),
        max_in_flight: cfg.workload.max_in_flight as usize,
        mix: Mix::parse("create=100")?,
    };
    let workload = Mixed::new(
        client,
        service.namespace.clone(),
        seed,
        ledger.clone(),
        Arc::new(Calls::default()),
        cfg.credentials.refused()?,
    );
    let start = Instant::now();
    let start_unix = run::unix_now();
    let load = generator::run(&schedule, workload, timeline.clone(), None);
    let sequence = steps_of(
        local,
        plan,
        &reader,
        &service.namespace,
        &ledger,
        start,
        seed,
    );
    let (_totals, sequence) = tokio::join!(load, sequence);
    ledger.flush();
    report::write_timeline(own, &timeline.rows())?;
    let (done, reads) = sequence?;
    steps.extend(done.steps.iter().cloned());
    let entries = ledger.entries();
    let restored: Vec<Restored> = entries
        .iter()
        .map(|e| {
            reads.get(&e.original).cloned().unwrap_or_else(|| {
                // Offered after the reads: judged by the uniqueness rule alone.
                Restored::Error("written after the read-back".into())
            })
        })
        .collect();
    // The last instant the restored database holds, on the drill's clock.
    let restore_point = done.restore_point_unix - start_unix;
    let drill = Drill {
        restore_point,
        destroyed_at: done.destroyed_at,
        served_again_at: Some(done.served_again_at),
        budgets: plan.budgets,
    };
    let (mut verdict, measured) = check(&entries, &restored, &drill);
    verdict.summary = format!(
        "{} ({}, restore {:.1} s, base backup {:.1} s; {} writes acknowledged)",
        verdict.summary,
        match plan.to {
            crate::scenario::drill::DrillTarget::Latest => "to the latest archived WAL",
            crate::scenario::drill::DrillTarget::BackupOnly =>
                "UNSAFE: to the base backup alone, the archived WAL skipped",
        },
        done.restore_seconds,
        done.backup_seconds,
        entries.iter().filter(|e| e.status == Status::Ok).count()
    );
    Ok((verdict, measured))
}

/// What the drill's steps measured.
struct Done {
    steps: Vec<(String, f64)>,
    backup_seconds: f64,
    restore_seconds: f64,
    destroyed_at: f64,
    restore_point_unix: f64,
    served_again_at: f64,
}

/// The drill's steps beside its load; the read-back by original (a
/// reservoir ledger reuses its slots).
async fn steps_of(
    local: &Local,
    plan: &DrillPlan,
    reader: &Client,
    namespace: &str,
    ledger: &Ledger,
    start: Instant,
    seed: u64,
) -> anyhow::Result<(Done, HashMap<String, Restored>)> {
    let mut steps = Vec::new();
    let at = |start: Instant| start.elapsed().as_secs_f64();
    let step = |name: &str, steps: &mut Vec<(String, f64)>| {
        let t = at(start);
        eprintln!("{}: t={t:.1}s {name}", plan.name);
        steps.push((name.to_owned(), t));
    };
    tokio::time::sleep(Duration::from_secs(plan.warmup_seconds)).await;
    let backup_started = Instant::now();
    let id = local.base_backup().await.context("the base backup")?;
    let backup_seconds = backup_started.elapsed().as_secs_f64();
    step(&format!("base backup {id}"), &mut steps);
    tokio::time::sleep(Duration::from_secs(plan.writes_after_backup_seconds)).await;
    step(
        "every database instance and its storage destroyed",
        &mut steps,
    );
    let restored = local
        .restore(plan.to.restore_to())
        .await
        .context("the restore")?;
    let destroyed_at = restored
        .destroyed
        .duration_since(start.into_std())
        .as_secs_f64();
    step(
        &format!(
            "restored from {} (WAL up to {}), replicas back, held; archiving as {}",
            restored.backup_id, restored.last_wal, restored.new_cluster
        ),
        &mut steps,
    );
    let destroyed_unix = run::unix_now() - (at(start) - destroyed_at);
    let leader = local
        .leader()
        .await?
        .context("no leader after the restore")?;
    let newest = local
        .query_database(
            zone_of(&leader.name)?,
            "vfps",
            &format!(
                "SELECT coalesce(extract(epoch FROM max(created_at)), 0) FROM pseudonyms \
                 WHERE created_at < to_timestamp({destroyed_unix})"
            ),
        )
        .await?;
    let restore_point_unix: f64 = newest
        .trim()
        .parse()
        .with_context(|| format!("the restored database's newest write {newest:?}"))?;
    // Every entry offered before the destruction, read back under the hold.
    let entries: Vec<_> = ledger
        .entries()
        .into_iter()
        .filter(|e| (e.second as f64) < destroyed_at)
        .collect();
    let reads: HashMap<String, Restored> = futures::stream::iter(entries)
        .map(|e| async move {
            let r = match reader.create(namespace, &e.original, READ_DEADLINE).await {
                Outcome::Ok(p) => Restored::Kept(p.pseudonym_value),
                Outcome::Fail(Code::FailedPrecondition | Code::NotFound) => Restored::Forgotten,
                other => Restored::Error(format!("{:?}", other.code())),
            };
            (e.original, r)
        })
        .buffer_unordered(READ_CONCURRENCY)
        .collect()
        .await;
    step(
        &format!("{} ledger entries read back", reads.len()),
        &mut steps,
    );
    crate::backup::cli::confirm(&local.opts.vfps_bin, &connection_string()).await?;
    step("restore confirmed", &mut steps);
    let first = reader
        .create(
            namespace,
            // Not one of the load's originals (`rs-` and random): a
            // fresh one, refused until the confirmation.
            &format!("first-after-the-restore-{seed:x}"),
            READ_DEADLINE,
        )
        .await;
    if !first.is_ok() {
        anyhow::bail!(
            "the first write after the confirmation failed: {:?}",
            first.code()
        );
    }
    let served_again_at = at(start);
    step("a new original acknowledged", &mut steps);
    Ok((
        Done {
            steps,
            backup_seconds,
            restore_seconds: restored.took.as_secs_f64(),
            destroyed_at,
            restore_point_unix,
            served_again_at,
        },
        reads,
    ))
}
