//! How a run ends other than by completing: a failure recorded under the
//! epoch, a job handed over at shutdown, a lease lost (and why), and the
//! output left behind cleaned up only by the job's holder.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vfps_store::jobs::{Finish, JobState};

use super::{Outcome, Run};
use crate::{checkpoint::Checkpoint, retry::Persist, storage::job_prefix};

impl Run<'_> {
    /// Records the failure under the epoch; only then drops the output, so a
    /// fenced runner never removes what the job's holder is writing.
    pub(super) async fn fail(&mut self, reason: String) -> Outcome {
        let store = self.ctx.store.clone();
        let (id, epoch) = (self.job.id.clone(), self.job.epoch);
        // Not under the runner's stop token: a failure is recorded even while
        // shutting down, as long as the lease holds.
        let persist = Persist::new(CancellationToken::new());
        let progress = self.progress();
        let deadline = self.ctx.settings.lease;
        let recorded = tokio::time::timeout(
            deadline,
            persist.run("record the job's failure", || {
                store.finish_job(&id, epoch, Finish::Failed(&reason), &progress)
            }),
        )
        .await;
        match recorded {
            Ok(Ok(true)) => {
                tracing::warn!(job = %id, reason = %reason, "CSV job failed");
                self.abort_output().await;
                Outcome::Failed(reason)
            }
            _ => self.why_lost().await,
        }
    }

    /// On shutdown: a last checkpoint, then the lease given up, so another
    /// replica resumes at once and redoes nothing.
    pub(super) async fn hand_over(&mut self) -> Outcome {
        let persist = Persist::new(CancellationToken::new());
        let budget = self.ctx.settings.checkpoint_interval;
        let last = tokio::time::timeout(budget, async {
            if let Some(output) = self.output.as_mut() {
                if !self.checkpoint.done {
                    output.persist(&persist, &mut self.checkpoint).await.ok()?;
                }
            }
            let progress = self.progress();
            let store = &self.ctx.store;
            let kept = store
                .checkpoint_job(&self.job.id, self.job.epoch, &progress, Duration::ZERO)
                .await
                .ok()?;
            Some(kept)
        })
        .await;
        match last {
            Ok(Some(true)) => {
                tracing::info!(job = %self.job.id, rows = self.checkpoint.counters.rows,
                    "shutting down: CSV job left at a checkpoint for another replica");
                Outcome::Stopped
            }
            Ok(Some(false)) => self.why_lost().await,
            _ => Outcome::Stopped,
        }
    }

    /// After a refused write: taken over (nothing to do), or cancelled or
    /// deleted (the job's objects are removed).
    pub(super) async fn why_lost(&mut self) -> Outcome {
        let current = tokio::time::timeout(
            self.ctx.settings.lease,
            self.ctx.store.get_job(&self.job.id),
        )
        .await;
        match current {
            Ok(Ok(Some(j))) if j.state == JobState::Cancelled => {
                self.abort_output().await;
                tracing::info!(job = %self.job.id, "CSV job cancelled");
                Outcome::Cancelled
            }
            Ok(Ok(None)) => {
                let _ = self
                    .ctx
                    .objects
                    .delete_prefix(&job_prefix(&self.job.id))
                    .await;
                Outcome::Cancelled
            }
            Ok(Ok(Some(j))) => {
                // An upload of this runner's own that the job's holder does
                // not use (started from a stale checkpoint) is dropped.
                let holders = j
                    .checkpoint
                    .as_deref()
                    .and_then(|c| Checkpoint::from_json(c).ok())
                    .and_then(|c| c.upload_id);
                if let Some(mine) = &self.checkpoint.upload_id {
                    if holders.as_ref() != Some(mine) && self.job.checkpoint.is_none() {
                        let key = crate::storage::output_key(&self.job.id);
                        let _ = self.ctx.objects.abort_multipart(&key, mine).await;
                    }
                }
                tracing::info!(job = %self.job.id, epoch = self.job.epoch,
                    "CSV job no longer held by this runner; it stops");
                Outcome::Fenced
            }
            _ => {
                tracing::info!(job = %self.job.id, epoch = self.job.epoch,
                    "CSV job no longer held by this runner; it stops");
                Outcome::Fenced
            }
        }
    }

    /// Drops the unfinished output: the upload and the segments.
    pub(super) async fn abort_output(&mut self) {
        if let Some(upload_id) = &self.checkpoint.upload_id {
            let key = crate::storage::output_key(&self.job.id);
            let _ = self.ctx.objects.abort_multipart(&key, upload_id).await;
        }
        if let Some(output) = self.output.take() {
            drop(output);
        }
        self.clean_segments().await;
    }

    pub(super) async fn clean_segments(&self) {
        let prefix = format!("{}segments/", job_prefix(&self.job.id));
        if let Err(e) = self.ctx.objects.delete_prefix(&prefix).await {
            tracing::debug!(job = %self.job.id, error = %e, "could not remove a job's segments");
        }
    }
}
