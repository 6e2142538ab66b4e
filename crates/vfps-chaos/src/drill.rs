//! The restore drill's client side (P9), shared by the platforms: its Create
//! load in a namespace of its own, the read-back of the ledger under the
//! restore hold, the verdict, and the outcome every platform leaves for the
//! final verdicts (`restore-drill.json`). `vfps-chaos drill-client` runs the
//! client inside a Kubernetes cluster while the kind driver destroys and
//! restores the database (platform/kind/drill.rs); the local platform runs it
//! in the driver (platform/local/drill.rs).
//!
//! The client inside the cluster has no channel from the driver but the
//! service itself, and it needs none: the restore hold answers a fresh
//! original `FAILED_PRECONDITION`, which nothing else does, so a probe that
//! meets it knows the database was restored, held and served again; the first
//! fresh original acknowledged after it knows the restore was confirmed. What
//! it reports goes through its log, so it names no original and no pseudonym:
//! both are redacted ([`crate::redact`], a 48-bit digest prefix), and P9
//! compares the digests (equal values have equal digests).

use std::{collections::HashMap, path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tonic::Code;
use vfps_client::{Client, Outcome, RetryPolicy};

use crate::{
    checker::{
        restore::{check, Drill, Measured, Restored},
        Property, Verdict,
    },
    config::{LoadConfig, Service},
    driver::artifacts::{DrillOutcome, DRILL_OUTCOME_FILE},
    history::{Calls, Entry, Ledger, Status, Timeline},
    mix::Mix,
    redact, report, run,
    scenario::drill::{DrillPlan, DrillTarget},
    workload::{
        generator::{self, Schedule, Totals},
        Mixed,
    },
};

/// Deadline of one read-back (a re-Create under the hold), retries included.
pub const READ_DEADLINE: Duration = Duration::from_secs(30);
/// Read-backs in flight at once.
const READ_CONCURRENCY: usize = 16;
/// Deadline of one probe for the hold or the confirmation.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);
/// Between two probes.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long the client in the cluster waits for the restored, held service
/// after its load window, and then for the confirmation. The drill Job's
/// deadline is its window plus both and a margin (`drill-job.yaml`).
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(1800);
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(900);

/// The drill's load and its reader, in the drill's namespace.
pub struct DrillClient {
    pub namespace: String,
    pub reader: Client,
    pub ledger: Arc<Ledger>,
    pub timeline: Arc<Timeline>,
    pub seed: u64,
    schedule: Schedule,
    workload: Arc<Mixed>,
}

impl DrillClient {
    /// The drill's namespace made, its ledger opened in `own`.
    pub async fn new(plan: &DrillPlan, cfg: &LoadConfig, own: &Path) -> anyhow::Result<Self> {
        // A namespace of its own, new for every drill: the run's ledger
        // knows nothing of it, the drill's originals cannot meet the run's,
        // nor an earlier drill's on the same database (its Creates would be
        // re-Creates, which even a restore that lost them would answer).
        let nonce = run::unix_now() as u64;
        let service = Service {
            address: cfg.service.address.clone(),
            namespace: format!("{}-restore-drill-{nonce:x}", cfg.service.namespace),
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
        Ok(Self {
            namespace: service.namespace,
            reader,
            ledger,
            timeline: Arc::new(Timeline::new(plan.duration_seconds)),
            seed,
            schedule,
            workload,
        })
    }

    /// The drill's load window.
    pub async fn load(&self) -> Totals {
        generator::run(
            &self.schedule,
            self.workload.clone(),
            self.timeline.clone(),
            None,
        )
        .await
    }

    /// Re-Creates of `entries`' originals: under the hold, a read.
    pub async fn read_back(&self, entries: Vec<Entry>) -> HashMap<String, Restored> {
        futures::stream::iter(entries)
            .map(|e| async move {
                let r = match self
                    .reader
                    .create(&self.namespace, &e.original, READ_DEADLINE)
                    .await
                {
                    Outcome::Ok(p) => Restored::Kept(p.pseudonym_value),
                    Outcome::Fail(Code::FailedPrecondition | Code::NotFound) => Restored::Forgotten,
                    other => Restored::Error(format!("{:?}", other.code())),
                };
                (e.original, r)
            })
            .buffer_unordered(READ_CONCURRENCY)
            .collect()
            .await
    }

    /// The first write after the confirmation: a fresh original (not one of
    /// the load's, `rs-` and random), refused until then. Its status code
    /// (`Ok` when acknowledged).
    pub async fn first_write(&self, n: u64, deadline: Duration) -> Code {
        self.reader
            .create(
                &self.namespace,
                &format!("first-after-the-restore-{:x}-{n}", self.seed),
                deadline,
            )
            .await
            .code()
    }

    /// Probes with fresh originals until one is refused by the hold; when.
    async fn wait_for_hold(&self, timeout: Duration) -> anyhow::Result<f64> {
        let until = tokio::time::Instant::now() + timeout;
        for n in 0.. {
            let probe = self
                .reader
                .create(
                    &self.namespace,
                    &format!("hold-probe-{:x}-{n}", self.seed),
                    PROBE_DEADLINE,
                )
                .await;
            if probe.code() == Code::FailedPrecondition {
                return Ok(run::unix_now());
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        anyhow::bail!(
            "the restored service did not refuse a new original within {timeout:?}: no restore hold was seen"
        )
    }

    /// Offers fresh originals until one is acknowledged; when.
    async fn wait_for_write(&self, timeout: Duration) -> anyhow::Result<f64> {
        let until = tokio::time::Instant::now() + timeout;
        for n in 0.. {
            let first = self.first_write(n, PROBE_DEADLINE).await;
            if first == Code::Ok {
                return Ok(run::unix_now());
            }
            if tokio::time::Instant::now() >= until {
                anyhow::bail!(
                    "no new original was acknowledged within {timeout:?} after the read-back (last: {first:?})"
                );
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        unreachable!("the probe loop ends by returning")
    }
}

/// When the client in the cluster saw what, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientTimes {
    /// The drill's load window began.
    pub start_unix: f64,
    /// A fresh original was refused by the restore hold.
    pub held_unix: f64,
    /// Every ledger entry read back.
    pub read_back_unix: f64,
    /// The first fresh original acknowledged after the confirmation.
    pub served_again_unix: f64,
}

/// One ledger entry and what the restored service answered for it, both
/// redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadBack {
    pub entry: Entry,
    pub restored: Restored,
}

impl ReadBack {
    /// The entry and its read with every original and pseudonym redacted.
    pub fn redacted(entry: &Entry, restored: &Restored) -> Self {
        let mut entry = entry.clone();
        entry.original = redact(&entry.original);
        entry.pseudonym = entry.pseudonym.as_deref().map(redact);
        let restored = match restored {
            Restored::Kept(p) => Restored::Kept(redact(p)),
            other => other.clone(),
        };
        Self { entry, restored }
    }
}

pub const REPORT_BEGIN: &str = "----BEGIN DRILL REPORT----";
pub const REPORT_END: &str = "----END DRILL REPORT----";
/// Printed once every entry was read back: the driver confirms the restore then.
pub const READ_BACK_DONE: &str = "----DRILL READ BACK DONE----";

/// The report between the markers: the times, then one [`ReadBack`] per line.
pub fn render_report(times: &ClientTimes, reads: &[ReadBack]) -> anyhow::Result<String> {
    let mut s = format!("{REPORT_BEGIN}\n{}\n", serde_json::to_string(times)?);
    for r in reads {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    s.push_str(REPORT_END);
    s.push('\n');
    Ok(s)
}

/// The report from a log that printed it; `None` when it is not (yet) there.
pub fn parse_report(log: &str) -> Option<anyhow::Result<(ClientTimes, Vec<ReadBack>)>> {
    let start = log.find(REPORT_BEGIN)? + REPORT_BEGIN.len();
    let stop = log[start..].find(REPORT_END)? + start;
    let mut lines = log[start..stop].lines().filter(|l| !l.trim().is_empty());
    Some((|| {
        let times = serde_json::from_str(lines.next().context("the drill report has no times")?)
            .context("the drill report's times")?;
        let reads = lines
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .with_context(|| format!("line {} of the drill report", i + 2))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok((times, reads))
    })())
}

/// `vfps-chaos drill-client`: the drill's load, then — once the restored
/// service refuses a new original — every ledger entry read back, then fresh
/// originals offered until the confirmation lets one through. Prints the
/// load's start, the timeline and the redacted report for the driver.
pub async fn in_cluster(plan: &DrillPlan, cfg: &LoadConfig) -> anyhow::Result<()> {
    let own = cfg.dir().join(plan.name.as_str());
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let client = DrillClient::new(plan, cfg, &own).await?;
    let start_unix = run::unix_now();
    report::markers::emit_load_start(start_unix);
    let (_totals, held) = tokio::join!(client.load(), client.wait_for_hold(HOLD_TIMEOUT));
    client.ledger.flush();
    eprintln!(
        "drill load done: {} acknowledged",
        client
            .ledger
            .entries()
            .iter()
            .filter(|e| e.status == Status::Ok)
            .count()
    );
    let held_unix = held?;
    eprintln!(
        "restore hold seen {:.1} s after the load began",
        held_unix - start_unix
    );
    let entries = client.ledger.entries();
    let reads = client.read_back(entries.clone()).await;
    let read_back_unix = run::unix_now();
    println!("{READ_BACK_DONE}");
    let served_again_unix = client.wait_for_write(CONFIRM_TIMEOUT).await?;
    report::markers::emit_timeline(&client.timeline.rows())?;
    let reads: Vec<ReadBack> = entries
        .iter()
        .map(|e| {
            let r = reads
                .get(&e.original)
                .cloned()
                .unwrap_or_else(|| Restored::Error("not read back".into()));
            ReadBack::redacted(e, &r)
        })
        .collect();
    print!(
        "{}",
        render_report(
            &ClientTimes {
                start_unix,
                held_unix,
                read_back_unix,
                served_again_unix,
            },
            &reads,
        )?
    );
    Ok(())
}

/// What the platform's steps measured, on the drill's clock (seconds since
/// its load window began).
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// The operator's mistakes the drill made before its restore, each of
    /// which must have been refused with the cluster still serving.
    pub mistakes: Vec<Mistake>,
    pub backup_seconds: f64,
    pub restore_seconds: f64,
    pub destroyed_at: f64,
    /// The restored database's newest write before the destruction.
    pub restore_point: f64,
    pub served_again_at: f64,
    /// The drill clock's second 0 in Unix seconds.
    pub origin_unix: f64,
}

/// A restore an operator may ask for by mistake, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mistake {
    /// The target, as `--to` took it, and why it is a mistake.
    pub what: String,
    /// Refused before anything was destroyed (a named refusal), and what it
    /// said; `None` when it was not refused.
    pub refusal: Option<String>,
    /// A new original was acknowledged right after it: the cluster still
    /// served.
    pub serving_after: bool,
}

/// P9's part for the mistakes: each refused, the cluster serving after it.
pub fn mistakes_held(mistakes: &[Mistake]) -> Vec<String> {
    mistakes
        .iter()
        .flat_map(|m| {
            let mut e = Vec::new();
            if m.refusal.is_none() {
                e.push(format!(
                    "mistake: the restore to {} was not refused",
                    m.what
                ));
            }
            if !m.serving_after {
                e.push(format!(
                    "mistake: after the restore to {} the cluster did not serve a new original",
                    m.what
                ));
            }
            e
        })
        .collect()
}

/// The restored database's newest write before `destroyed_unix`, in Unix
/// seconds (0 when it holds none): the drill's restore point.
pub fn restore_point_sql(destroyed_unix: f64) -> String {
    format!(
        "SELECT coalesce(extract(epoch FROM max(created_at)), 0) FROM pseudonyms \
         WHERE created_at < to_timestamp({destroyed_unix})"
    )
}

/// What `psql -At` printed for [`restore_point_sql`].
pub fn parse_restore_point(out: &str) -> anyhow::Result<f64> {
    out.trim()
        .parse()
        .with_context(|| format!("the restored database's newest write {:?}", out.trim()))
}

/// P9 over the drill's ledger and reads, its summary naming the restore.
pub fn judge(
    plan: &DrillPlan,
    entries: &[Entry],
    restored: &[Restored],
    timing: &Timing,
) -> (Verdict, Measured) {
    let drill = Drill {
        restore_point: timing.restore_point,
        destroyed_at: timing.destroyed_at,
        origin_unix: timing.origin_unix,
        served_again_at: Some(timing.served_again_at),
        budgets: plan.budgets,
    };
    let (mut verdict, measured) = check(entries, restored, &drill);
    let mistaken = mistakes_held(&timing.mistakes);
    if !mistaken.is_empty() {
        verdict.validity = crate::checker::Validity::Invalid;
        verdict.evidence.extend(mistaken);
    }
    let refused = timing
        .mistakes
        .iter()
        .filter(|m| m.refusal.is_some() && m.serving_after)
        .count();
    verdict.summary = format!(
        "{}; {refused} of {} mistaken restores refused with the cluster serving",
        verdict.summary,
        timing.mistakes.len()
    );
    verdict.summary = format!(
        "{} ({}, restore {:.1} s, base backup {:.1} s; {} writes acknowledged)",
        verdict.summary,
        match plan.to {
            DrillTarget::Latest => "to the latest archived WAL",
            DrillTarget::BackupOnly => "UNSAFE: to the base backup alone, the archived WAL skipped",
        },
        timing.restore_seconds,
        timing.backup_seconds,
        entries.iter().filter(|e| e.status == Status::Ok).count()
    );
    (verdict, measured)
}

/// Leaves the drill's outcome in `dir` for the final verdicts. A drill that
/// could not run to its end is P9 invalid, naming the step: a restore that
/// does not come back is the finding, not a harness failure.
pub fn finish(
    dir: &Path,
    plan: &DrillPlan,
    result: anyhow::Result<(Verdict, Measured)>,
    steps: Vec<(String, f64)>,
) -> anyhow::Result<DrillOutcome> {
    let outcome = match result {
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

/// Records a step of the drill on its clock, and says it.
pub struct Steps {
    name: String,
    pub done: Vec<(String, f64)>,
}

impl Steps {
    pub fn new(plan: &DrillPlan) -> Self {
        Self {
            name: plan.name.as_str().to_owned(),
            done: Vec::new(),
        }
    }

    pub fn step(&mut self, at: f64, what: &str) {
        eprintln!("{}: t={at:.1}s {what}", self.name);
        self.done.push((what.to_owned(), at));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(original: &str, pseudonym: Option<&str>) -> Entry {
        Entry {
            slot: 0,
            second: 3,
            status: if pseudonym.is_some() {
                Status::Ok
            } else {
                Status::Indeterminate
            },
            original: original.into(),
            pseudonym: pseudonym.map(Into::into),
            code: None,
            acked_unix_ms: Some(1_000),
        }
    }

    /// P9 fails unless each mistaken restore was refused with the cluster
    /// serving after it.
    #[test]
    fn a_mistake_not_refused_or_leaving_the_cluster_down_fails_p9() {
        let ok = Mistake {
            what: "an hour from now".into(),
            refusal: Some("refused: the target is in the future".into()),
            serving_after: true,
        };
        assert!(mistakes_held(std::slice::from_ref(&ok)).is_empty());
        let destroyed = Mistake {
            refusal: None,
            ..ok.clone()
        };
        let down = Mistake {
            serving_after: false,
            ..ok.clone()
        };
        let found = mistakes_held(&[ok, destroyed, down]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("was not refused"), "{found:?}");
        assert!(found[1].contains("did not serve"), "{found:?}");
    }

    #[test]
    fn the_report_names_no_original_and_no_pseudonym_and_reads_back_as_printed() {
        let reads = vec![
            ReadBack::redacted(
                &entry("rs-original-1", Some("pseudonym-1")),
                &Restored::Kept("pseudonym-1".into()),
            ),
            ReadBack::redacted(&entry("rs-original-2", None), &Restored::Forgotten),
        ];
        let times = ClientTimes {
            start_unix: 10.0,
            held_unix: 60.5,
            read_back_unix: 70.0,
            served_again_unix: 71.25,
        };
        let text = render_report(&times, &reads).unwrap();
        for secret in ["rs-original-1", "pseudonym-1", "rs-original-2"] {
            assert!(!text.contains(secret), "{secret} in the report:\n{text}");
        }
        let log = format!("drill load done\n{text}other lines\n");
        let (t, r) = parse_report(&log).unwrap().unwrap();
        assert_eq!(t, times);
        assert_eq!(r, reads);
        // Equal values stay equal: P9 compares the digests.
        assert_eq!(
            Some(match &r[0].restored {
                Restored::Kept(p) => p.clone(),
                other => panic!("{other:?}"),
            }),
            r[0].entry.pseudonym
        );
        assert!(parse_report("no report yet").is_none());
        let torn = format!("{REPORT_BEGIN}\n{{\"start_unix\": 1}}\n{REPORT_END}\n");
        assert!(
            parse_report(&torn).unwrap().is_err(),
            "a torn report is an error"
        );
    }
}
