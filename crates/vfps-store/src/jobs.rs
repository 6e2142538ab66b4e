//! CSV jobs as database rows: the spec, the state, the lease and the last
//! checkpoint, so any replica can run (and resume) any job.
//!
//! One runner at a time: claiming a job raises its fencing `epoch`, and every
//! write a runner makes afterwards — checkpoint, lease renewal, finish — is
//! conditional on the epoch it claimed and on the job still running. A runner
//! whose lease was taken over (or whose job was cancelled or deleted) learns so
//! from its next write, which changes nothing.
//!
//! Leases are measured on the database's clock (PostgreSQL's `now()`), so the
//! replicas' clocks need not agree.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use vfps_core::Error;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Created; the client is uploading the input.
    AwaitingUpload,
    /// The input is there and checked; waiting for a runner.
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        Self::AwaitingUpload,
        Self::Queued,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The stored name.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwaitingUpload => "awaiting_upload",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == raw)
    }

    /// Whether the job will not change any more.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A job's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// A UUID.
    pub id: String,
    /// Who created it: only they (and admins) see it.
    pub created_by: String,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub state: JobState,
    /// The job's spec, JSON (the jobs crate's `Spec`).
    pub spec: String,
    /// The spec resolved against the uploaded file, JSON; set when queued.
    pub plan: Option<String>,
    /// The uploaded input's size; set when queued.
    pub input_bytes: Option<i64>,
    /// Raised by every claim: the fencing token of the current runner.
    pub epoch: i64,
    /// The replica that claimed it last.
    pub runner: Option<String>,
    pub lease_until: Option<SystemTime>,
    /// When its rows last advanced.
    pub progress_at: Option<SystemTime>,
    /// The last checkpoint, JSON (the jobs crate's `Checkpoint`).
    pub checkpoint: Option<String>,
    pub rows_done: i64,
    pub bytes_done: i64,
    /// Why it failed: a reason and a line, never a value of the file.
    pub error: Option<String>,
    /// Each resumption by a runner: a JSON array (the jobs crate's `Takeover`).
    pub takeovers: String,
    /// When a runner first claimed it.
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
}

impl JobRecord {
    /// A new job, awaiting its upload.
    pub fn new(id: String, created_by: String, spec: String, now: SystemTime) -> Self {
        Self {
            id,
            created_by,
            created_at: now,
            updated_at: now,
            state: JobState::AwaitingUpload,
            spec,
            plan: None,
            input_bytes: None,
            epoch: 0,
            runner: None,
            lease_until: None,
            progress_at: None,
            checkpoint: None,
            rows_done: 0,
            bytes_done: 0,
            error: None,
            takeovers: "[]".into(),
            started_at: None,
            finished_at: None,
        }
    }
}

/// What a runner records at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// JSON.
    pub checkpoint: String,
    pub rows_done: i64,
    pub bytes_done: i64,
    /// A resumption to append to the takeovers (the runner's first
    /// checkpoint after claiming a job someone had run before), JSON.
    pub takeover: Option<String>,
}

/// How a claim chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// Who claims.
    pub runner: &'a str,
    /// How long the lease lasts unless renewed.
    pub lease: Duration,
    /// A running job whose rows have not advanced for this long is taken over
    /// even while its lease is renewed (`CsvProcessing__StalledJobThreshold`).
    pub stalled: Duration,
}

/// How a job ends under its runner's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish<'a> {
    Completed,
    Failed(&'a str),
}

/// What deleting a job did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    NotFound,
    /// It has not finished: cancel it first.
    Unfinished(JobState),
}

/// The jobs table, in both stores.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Stores a new job; `AlreadyExists` if its id is taken.
    async fn insert_job(&self, job: &JobRecord) -> Result<(), Error>;
    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>, Error>;
    /// Newest first; only `created_by`'s when given.
    async fn list_jobs(&self, created_by: Option<&str>) -> Result<Vec<JobRecord>, Error>;
    /// Awaiting its upload → queued, with the input's size and the resolved
    /// plan; `false` if the job is not awaiting its upload.
    async fn queue_job(&self, id: &str, input_bytes: i64, plan: &str) -> Result<bool, Error>;
    /// Claims the oldest job that is queued, or running under an expired lease
    /// or stalled: raises its epoch and gives `claim.runner` the lease.
    async fn claim_job(&self, claim: Claim<'_>) -> Result<Option<JobRecord>, Error>;
    /// Records a checkpoint and renews the lease, if the job still runs under
    /// `epoch`; `false` (nothing changed) otherwise.
    async fn checkpoint_job(
        &self,
        id: &str,
        epoch: i64,
        progress: &Progress,
        lease: Duration,
    ) -> Result<bool, Error>;
    /// Renews the lease alone, under the same condition.
    async fn renew_job_lease(&self, id: &str, epoch: i64, lease: Duration) -> Result<bool, Error>;
    /// Ends a running job with its final progress, under the same condition.
    async fn finish_job(
        &self,
        id: &str,
        epoch: i64,
        finish: Finish<'_>,
        progress: &Progress,
    ) -> Result<bool, Error>;
    /// Cancels a job that has not finished; answers the job as it is then
    /// (`None`: no such job).
    async fn cancel_job(&self, id: &str) -> Result<Option<JobRecord>, Error>;
    async fn delete_job(&self, id: &str) -> Result<Deleted, Error>;
    /// Deletes finished jobs (only `created_by`'s when given); answers their ids.
    async fn delete_finished_jobs(&self, created_by: Option<&str>) -> Result<Vec<String>, Error>;
}

/// Every column of `csv_jobs`, in the order the row mappers read them.
pub(crate) const JOB_COLUMNS: &str = "id, created_by, created_at, updated_at, state, spec, plan, \
     input_bytes, epoch, runner, lease_until, progress_at, checkpoint, rows_done, bytes_done, \
     error, takeovers, started_at, finished_at";

pub(crate) fn decode_state(raw: &str) -> Result<JobState, Error> {
    JobState::parse(raw)
        .ok_or_else(|| Error::internal(format!("a job's state {raw:?} is not valid")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_survive_their_names() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.name()), Some(s));
        }
        assert!(decode_state("paused").is_err());
    }
}
