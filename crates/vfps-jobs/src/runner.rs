//! Runs one claimed job from its last checkpoint to its end.
//!
//! The loop: read a batch of records (the next one is read and prepared while
//! the current one's answers are on their way), answer its cells in one round
//! trip, write its records to the output, and every `checkpoint_rows` rows or
//! `checkpoint_interval` make the output durable and record the checkpoint —
//! conditionally on the runner's epoch, which is also how a runner learns
//! that its job was taken over, cancelled or deleted. A heartbeat renews the
//! lease meanwhile; a runner that cannot renew it in time stops by itself.
//!
//! What a runner leaves when it stops anywhere (killed, paused past its
//! lease, cut off) is a checkpoint that the next runner resumes from, redoing
//! at most the rows since it. Redone rows give the same bytes (Create answers
//! the committed pseudonym), so nothing it wrote can conflict.

mod answers;
mod ending;
mod input;

use answers::{answer_task, namespaces_once, resolve_halt, Task};
use input::{Heartbeat, Input};

use std::{
    collections::VecDeque,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use vfps_store::{
    jobs::{Finish, JobRecord, Progress},
    Store,
};

use crate::{
    checkpoint::{Checkpoint, Takeover},
    csv::{Record, Scanned, Scanner},
    inspect::JobPlan,
    output::{self, Output},
    resolve::{ResolveError, Resolver},
    retry::Persist,
    spec::Spec,
    storage::{input_key, ObjectStore, StorageError, PREFIX},
    transform::{prepare, write_header, Counters, Prepared, RowError, Rules},
};

/// How runners work (`CsvProcessing__*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerSettings {
    /// `CsvProcessing__PseudonymizeBatchSize` (1000): rows per round trip.
    pub batch_rows: usize,
    /// A checkpoint at least every this many rows (5000)…
    pub checkpoint_rows: u64,
    /// …and at least this often (2 s).
    pub checkpoint_interval: Duration,
    /// How long a claim lasts unless renewed (10 s): how soon a dead runner's
    /// job is taken over.
    pub lease: Duration,
    /// `CsvProcessing__StalledJobThreshold` (10 minutes): a job whose rows do
    /// not advance for this long is taken over even under a live lease.
    pub stalled: Duration,
    /// `CsvProcessing__MaxLineLength`: the longest record, in bytes.
    pub max_record_bytes: usize,
    /// Output part size (5 MiB, S3's least but for the last): bounds memory.
    pub part_bytes: usize,
    /// `CsvProcessing__MissingValuePlaceholders`.
    pub placeholders: Vec<String>,
    /// Unsafe, for the harness's self-test only: a resumed job starts again
    /// from its first row.
    pub restart_from_zero: bool,
    /// Batches of one job in flight at once (2): the next is answered while
    /// the last one's rows are written. Within the jobs' database slots.
    pub pipeline_depth: usize,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            batch_rows: 1000,
            checkpoint_rows: 5000,
            checkpoint_interval: Duration::from_secs(2),
            lease: Duration::from_secs(10),
            stalled: Duration::from_secs(600),
            max_record_bytes: 1024 * 1024,
            part_bytes: crate::storage::MIN_PART_BYTES,
            placeholders: vec!["NA".into(), "NULL".into()],
            restart_from_zero: false,
            pipeline_depth: 2,
        }
    }
}

/// What a runner reports, for metrics.
pub trait Observer: Send + Sync + 'static {
    /// Rows written (after each batch).
    fn rows(&self, _rows: u64) {}
    /// A batch's round trip to the database.
    fn batch(&self, _rows: usize, _took: Duration) {}
    /// A checkpoint recorded.
    fn checkpoint(&self, _took: Duration) {}
    /// A job resumed from another runner's checkpoint.
    fn takeover(&self) {}
    /// How a run ended.
    fn ended(&self, _outcome: &Outcome) {}
}

/// Whether interactive callers are using the database now: a job then keeps
/// one small batch in flight instead of a pipeline of full ones, and rests as
/// long as each took, so their latency stays near what it is without a job.
pub trait Pressure: Send + Sync + 'static {
    fn interactive(&self) -> bool;
}

/// No interactive callers to make way for.
pub struct NoPressure;
impl Pressure for NoPressure {
    fn interactive(&self) -> bool {
        false
    }
}

/// Rows per batch while interactive callers are served.
pub const YIELDING_BATCH_ROWS: usize = 25;

/// While interactive callers are served, a runner waits this many times as
/// long as its last batch took before sending the next.
const YIELD_FACTOR: u32 = 3;

/// An observer that does nothing.
pub struct Unobserved;
impl Observer for Unobserved {}

/// Everything runners share in a process.
#[derive(Clone)]
pub struct Context {
    pub store: Arc<dyn Store>,
    pub objects: Arc<dyn ObjectStore>,
    pub settings: Arc<RunnerSettings>,
    /// The database slots all jobs of this process share.
    pub slots: Arc<Semaphore>,
    /// This replica, as a job's runner.
    pub runner: String,
    pub observer: Arc<dyn Observer>,
    /// Whether to make way for interactive callers.
    pub pressure: Arc<dyn Pressure>,
    /// The namespaces' keys (`VFPS_KEYS`), for sealed namespaces.
    pub keys: Option<Arc<vfps_keys::Keyring>>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// The job failed, with this reason (recorded).
    Failed(String),
    /// The job was cancelled or deleted; its objects were cleaned up.
    Cancelled,
    /// Another runner holds the job now, or the lease could not be kept.
    Fenced,
    /// The process is shutting down: the job was left at a checkpoint, its
    /// lease given up, for another replica.
    Stopped,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed(_) => "failed",
            Self::Cancelled => "cancelled",
            Self::Fenced => "fenced",
            Self::Stopped => "stopped",
        }
    }
}

/// Why the loop ended before the input did.
enum Halt {
    /// The job cannot go on: record this reason.
    Fail(String),
    /// A write of this runner was refused or its lease lapsed: find out why.
    Lost,
    /// Shutting down.
    Shutdown,
}

impl From<RowError> for Halt {
    fn from(e: RowError) -> Self {
        Halt::Fail(e.to_string())
    }
}

/// Runs `job` (just claimed by this runner) until it ends or must stop.
pub fn run<'a>(
    ctx: &'a Context,
    job: JobRecord,
    shutdown: &'a CancellationToken,
) -> futures::future::BoxFuture<'a, Outcome> {
    Box::pin(run_job(ctx, job, shutdown))
}

async fn run_job(ctx: &Context, job: JobRecord, shutdown: &CancellationToken) -> Outcome {
    let stop = shutdown.child_token();
    let lost = CancellationToken::new();
    // Stopped (and the heartbeat with it) however this future ends.
    let _heartbeat = Heartbeat::spawn(ctx, &job, stop.clone(), lost.clone());
    let mut run = Run::new(ctx, &job, Persist::new(stop.clone()));
    let halt = match run.go().await {
        Ok(()) => return ended(ctx, Outcome::Completed),
        Err(halt) => halt,
    };
    let outcome = match halt {
        Halt::Fail(reason) => run.fail(reason).await,
        Halt::Shutdown if !lost.is_cancelled() => run.hand_over().await,
        Halt::Lost | Halt::Shutdown => run.why_lost().await,
    };
    ended(ctx, outcome)
}

fn ended(ctx: &Context, outcome: Outcome) -> Outcome {
    ctx.observer.ended(&outcome);
    outcome
}

/// One run of one job.
struct Run<'a> {
    ctx: &'a Context,
    job: &'a JobRecord,
    persist: Persist,
    /// What the last recorded checkpoint says (or will, once written).
    checkpoint: Checkpoint,
    output: Option<Output>,
    /// A takeover to note with the first checkpoint.
    takeover: Option<String>,
}

/// A batch read from the input, prepared.
struct Batch {
    prepared: Prepared,
    /// Input offset and line after its last record.
    end_offset: u64,
    end_line: u64,
}

impl<'a> Run<'a> {
    fn new(ctx: &'a Context, job: &'a JobRecord, persist: Persist) -> Self {
        Self {
            ctx,
            job,
            persist,
            checkpoint: Checkpoint::default(),
            output: None,
            takeover: None,
        }
    }

    async fn go(&mut self) -> Result<(), Halt> {
        let ctx = self.ctx;
        let settings = &ctx.settings;
        let spec: Spec = serde_json::from_str(&self.job.spec)
            .map_err(|e| Halt::Fail(format!("the job's spec is not valid: {e}")))?;
        let plan =
            JobPlan::from_json(self.job.plan.as_deref().unwrap_or_default()).map_err(Halt::Fail)?;
        let stored = match &self.job.checkpoint {
            Some(raw) => Checkpoint::from_json(raw).map_err(Halt::Fail)?,
            None => Checkpoint::default(),
        };
        self.checkpoint = if settings.restart_from_zero {
            Checkpoint::default()
        } else {
            stored.clone()
        };
        if self.job.epoch > 1 {
            ctx.observer.takeover();
            let note = Takeover {
                at_micros: vfps_core::to_micros(std::time::SystemTime::now()),
                epoch: self.job.epoch,
                runner: ctx.runner.clone(),
                checkpointed_rows: stored.counters.rows,
                resumed_rows: self.checkpoint.counters.rows,
            };
            self.takeover = serde_json::to_string(&note).ok();
            tracing::info!(
                job = %self.job.id,
                epoch = self.job.epoch,
                resumed_rows = note.resumed_rows,
                "resuming a CSV job from its last checkpoint"
            );
        }
        let names: Vec<vfps_core::NamespaceName> = spec.namespaces().into_iter().cloned().collect();
        let namespaces = self
            .persist
            .run("read the job's namespaces", || {
                namespaces_once(ctx.store.clone(), names.clone())
            })
            .await
            .map_err(|_| self.stopped())?
            .map_err(resolve_halt)?;
        for (ns, uid) in namespaces.iter().zip(&plan.namespace_uids) {
            if ns.uid.0 != *uid {
                return Err(Halt::Fail(format!(
                    "namespace {} was deleted while the job ran",
                    ns.name
                )));
            }
        }
        let resolver = Resolver::new(
            ctx.store.clone(),
            namespaces,
            spec.direction,
            ctx.slots.clone(),
            ctx.keys.clone(),
        );
        let rules = Rules {
            direction: spec.direction,
            encoding: plan.encoding,
            delimiter: spec.delimiter,
            placeholders: settings.placeholders.clone(),
        };
        if self.checkpoint.done {
            return (self.complete()).await;
        }
        let output = (Output::resume(
            ctx.objects.clone(),
            &self.persist,
            &self.job.id,
            self.job.epoch,
            &self.checkpoint,
            settings.part_bytes,
        ))
        .await
        .map_err(|e| self.storage_halt(e))?;
        self.output = Some(output);

        let mut input = Input::new(
            ctx.objects.clone(),
            input_key(&self.job.id),
            self.checkpoint.offset,
        );
        let mut scanner = Scanner::new(
            plan.encoding,
            spec.delimiter,
            settings.max_record_bytes,
            self.checkpoint.line.max(1),
        );
        if self.checkpoint.offset == 0 {
            (self.start_output(&mut input, &mut scanner, &plan, &spec, &rules)).await?;
        }
        // Recorded at once: the lease is renewed and a takeover noted.
        (self.record()).await?;
        let mut since = Instant::now();
        let mut rows_since = 0u64;
        let resolver = Arc::new(resolver);
        // Batches whose answers are on their way, in input order: the next
        // ones are read and prepared while the database answers these.
        let mut inflight: VecDeque<(Batch, Task, Instant)> = VecDeque::new();
        let mut input_done = false;
        loop {
            let yielding = ctx.pressure.interactive();
            let depth = if yielding {
                1
            } else {
                settings.pipeline_depth.max(1)
            };
            let rows = if yielding {
                settings.batch_rows.min(YIELDING_BATCH_ROWS)
            } else {
                settings.batch_rows
            };
            while inflight.len() < depth && !input_done {
                match self
                    .read_batch(&mut input, &mut scanner, &plan, &rules, rows)
                    .await?
                {
                    Some(mut batch) => {
                        let requests = std::mem::take(&mut batch.prepared.requests);
                        let task = Task(tokio::spawn(answer_task(
                            resolver.clone(),
                            self.persist.clone(),
                            requests,
                        )));
                        inflight.push_back((batch, task, Instant::now()));
                    }
                    None => input_done = true,
                }
            }
            let Some((batch, mut task, started)) = inflight.pop_front() else {
                break;
            };
            let answers = match (&mut task.0).await {
                Ok(Ok(Ok(answers))) => answers,
                Ok(Ok(Err(ResolveError::Value { index, reason }))) => {
                    return Err(Halt::Fail(format!(
                        "line {}: {reason}",
                        batch.prepared.line_of_request(index)
                    )))
                }
                Ok(Ok(Err(e))) => return Err(resolve_halt(e)),
                Ok(Err(_)) => return Err(self.stopped()),
                Err(e) => return Err(Halt::Fail(format!("a batch's task failed: {e}"))),
            };
            let took = started.elapsed();
            ctx.observer.batch(batch.prepared.len(), took);
            if yielding {
                // Three quarters of the database's time for interactive
                // callers: three times as long as the batch took, before the
                // next is sent.
                tokio::time::sleep((took * YIELD_FACTOR).min(Duration::from_millis(300))).await;
            }
            let output = self.output.as_mut().ok_or(Halt::Lost)?;
            let counters = output.write(|out, row_end| {
                batch
                    .prepared
                    .write(&answers, &plan.plan, &rules, out, row_end)
            })?;
            // A full part leaves memory at once.
            output
                .upload_parts(&self.persist)
                .await
                .map_err(|e| storage_halt(&self.persist, e))?;
            let rows = counters.rows;
            self.checkpoint.counters.add(counters);
            self.checkpoint.offset = batch.end_offset;
            self.checkpoint.line = batch.end_line;
            ctx.observer.rows(rows);
            rows_since += rows;
            if rows_since >= settings.checkpoint_rows
                || since.elapsed() >= settings.checkpoint_interval
            {
                self.record().await?;
                since = Instant::now();
                rows_since = 0;
            }
        }
        let output = self.output.as_mut().ok_or(Halt::Lost)?;
        output
            .seal(&self.persist, &mut self.checkpoint)
            .await
            .map_err(|e| storage_halt(&self.persist, e))?;
        self.checkpoint.done = true;
        self.record().await?;
        self.complete().await
    }

    /// At the start of the input: the byte order mark and the header.
    async fn start_output(
        &mut self,
        input: &mut Input,
        scanner: &mut Scanner,
        plan: &JobPlan,
        spec: &Spec,
        rules: &Rules,
    ) -> Result<(), Halt> {
        let bom = plan.bom_bytes as usize;
        while input.buf.len() < bom && !input.eof {
            self.fill(input).await?;
        }
        let mark = input.buf.split_to(bom.min(input.buf.len()));
        let mut offset = mark.len() as u64;
        let output = self.output.as_mut().ok_or(Halt::Lost)?;
        output.write(|out, _| out.extend_from_slice(&mark));
        if spec.has_header {
            let header = loop {
                match scanner.next(&mut input.buf, input.eof) {
                    Ok(Scanned::Record(r)) => break r,
                    Ok(Scanned::End) => return Err(Halt::Fail("the input holds no header".into())),
                    Ok(Scanned::NeedMore) => self.fill(input).await?,
                    Err(e) => return Err(Halt::Fail(e.to_string())),
                }
            };
            offset += header.bytes.len() as u64;
            let output = self.output.as_mut().ok_or(Halt::Lost)?;
            output.write(|out, row_end| -> Result<(), RowError> {
                write_header(&header, &plan.plan, rules, out)?;
                row_end(out);
                Ok(())
            })?;
        }
        self.checkpoint.offset = offset;
        self.checkpoint.line = scanner.line();
        Ok(())
    }

    /// Reads and prepares the next batch; `None` at the end of the input.
    async fn read_batch(
        &self,
        input: &mut Input,
        scanner: &mut Scanner,
        plan: &JobPlan,
        rules: &Rules,
        rows: usize,
    ) -> Result<Option<Batch>, Halt> {
        let mut records: Vec<Record> = Vec::with_capacity(rows);
        let mut offset = input.offset_of_buffer();
        while records.len() < rows.max(1) {
            match scanner.next(&mut input.buf, input.eof) {
                Ok(Scanned::Record(r)) => {
                    plan.encoding
                        .validate(&r.bytes)
                        .map_err(|e| Halt::Fail(format!("line {}: {e}", r.line)))?;
                    offset += r.bytes.len() as u64;
                    records.push(r);
                }
                Ok(Scanned::End) => break,
                Ok(Scanned::NeedMore) => {
                    let buffered = input.buf.len();
                    self.fill(input).await?;
                    // `fill` only appends: the offset of what was scanned stays.
                    debug_assert!(input.buf.len() >= buffered);
                }
                Err(e) => return Err(Halt::Fail(e.to_string())),
            }
        }
        if records.is_empty() {
            return Ok(None);
        }
        let end_line = scanner.line();
        let prepared = prepare(records, &plan.plan, rules)?;
        Ok(Some(Batch {
            prepared,
            end_offset: offset,
            end_line,
        }))
    }

    /// Reads one more chunk of the input (reopening it after a failure).
    async fn fill(&self, input: &mut Input) -> Result<(), Halt> {
        let mut failures = 0u32;
        loop {
            let stop = self.persist.stop_token();
            let attempt = tokio::select! {
                r = input.fill() => r,
                _ = stop.cancelled() => return Err(Halt::Shutdown),
            };
            match attempt {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(20) {
                        tracing::warn!(job = %self.job.id, failures, error = %e,
                            "a CSV job cannot read its input yet; retrying");
                    }
                    let backoff = Duration::from_millis(50 << failures.min(5));
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.cancelled() => return Err(Halt::Shutdown),
                    }
                }
                Err(e) => return Err(self.storage_halt(e)),
            }
        }
    }

    /// Makes the output durable and records the checkpoint under the epoch.
    async fn record(&mut self) -> Result<(), Halt> {
        let started = Instant::now();
        if let Some(output) = self.output.as_mut() {
            if !self.checkpoint.done {
                output
                    .persist(&self.persist, &mut self.checkpoint)
                    .await
                    .map_err(|e| storage_halt(&self.persist, e))?;
            }
        }
        let progress = Progress {
            checkpoint: self.checkpoint.to_json(),
            rows_done: self.checkpoint.counters.rows as i64,
            bytes_done: self.checkpoint.offset as i64,
            takeover: self.takeover.clone(),
        };
        let lease = self.ctx.settings.lease;
        let (store, id, epoch) = (&self.ctx.store, &self.job.id, self.job.epoch);
        let held = self
            .persist
            .run("record a checkpoint", || {
                store.checkpoint_job(id, epoch, &progress, lease)
            })
            .await
            .map_err(|e| match e.is_transient() {
                true => self.stopped(),
                false => Halt::Fail(e.message),
            })?;
        if !held {
            return Err(Halt::Lost);
        }
        self.takeover = None;
        self.ctx.observer.checkpoint(started.elapsed());
        Ok(())
    }

    /// Completes the sealed output and the job.
    async fn complete(&mut self) -> Result<(), Halt> {
        output::complete(
            self.ctx.objects.as_ref(),
            &self.persist,
            &self.job.id,
            &self.checkpoint,
        )
        .await
        .map_err(|e| storage_halt(&self.persist, e))?;
        let progress = self.progress();
        let (store, id, epoch) = (&self.ctx.store, &self.job.id, self.job.epoch);
        let finished = self
            .persist
            .run("record the job's completion", || {
                store.finish_job(id, epoch, Finish::Completed, &progress)
            })
            .await
            .map_err(|e| match e.is_transient() {
                true => self.stopped(),
                false => Halt::Fail(e.message),
            })?;
        if !finished {
            return Err(Halt::Lost);
        }
        self.clean_segments().await;
        tracing::info!(
            job = %self.job.id,
            rows = self.checkpoint.counters.rows,
            malformed = self.checkpoint.counters.malformed,
            missing = self.checkpoint.counters.missing,
            "CSV job completed"
        );
        Ok(())
    }

    fn progress(&self) -> Progress {
        Progress {
            checkpoint: self.checkpoint.to_json(),
            rows_done: self.checkpoint.counters.rows as i64,
            bytes_done: self.checkpoint.offset as i64,
            takeover: self.takeover.clone(),
        }
    }

    fn stopped(&self) -> Halt {
        if self.persist.stop_token().is_cancelled() {
            Halt::Shutdown
        } else {
            Halt::Lost
        }
    }

    fn storage_halt(&self, e: StorageError) -> Halt {
        storage_halt(&self.persist, e)
    }
}

fn storage_halt(persist: &Persist, e: StorageError) -> Halt {
    if persist.stop_token().is_cancelled() {
        Halt::Shutdown
    } else {
        Halt::Fail(format!("{e}"))
    }
}

/// Where a finished job's counters are.
pub fn counters_of(job: &JobRecord) -> Counters {
    job.checkpoint
        .as_deref()
        .and_then(|c| Checkpoint::from_json(c).ok())
        .map(|c| c.counters)
        .unwrap_or_default()
}

/// Objects of jobs live under this prefix (the lifecycle rule's).
pub const OBJECT_PREFIX: &str = PREFIX;
