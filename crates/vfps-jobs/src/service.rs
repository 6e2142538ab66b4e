//! What the API does with jobs, whatever the transport: create one, start it
//! once its input is uploaded, read, cancel, delete — and the runners that
//! claim queued jobs on every replica.
//!
//! Who may do what is the caller's to check (the server's authorization);
//! everything here takes the job's owner as given.

use std::{sync::Arc, time::Duration};

use tokio::{sync::Notify, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use vfps_core::{now_micros, Error, ErrorKind};
use vfps_store::jobs::{Claim, Deleted, JobRecord, JobState};

use crate::{
    inspect::{inspect, InspectError, Limits},
    runner::{self, Context},
    spec::{Direction, RawSpec, Spec},
    storage::{input_key, job_prefix, output_key, ByteStream, StorageError, Transfer},
};

/// Where a client sends or fetches a job's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// A presigned URL, or a path on vfps's HTTP port.
    pub url: String,
    pub method: &'static str,
    /// Whether the URL is vfps's own (send the same credentials as to the API).
    pub through_vfps: bool,
    /// When a presigned URL stops working.
    pub expires_in: Option<Duration>,
}

/// How jobs are served (beyond the runners' settings).
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub limits: Limits,
    /// `S3__PresignedUrlExpiry`.
    pub presigned_url_expiry: Duration,
    /// Jobs one replica runs at once (`CsvProcessing__Workers`).
    pub workers: usize,
    /// How often an idle runner looks for work.
    pub poll_interval: Duration,
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            presigned_url_expiry: Duration::from_secs(15 * 60),
            workers: 2,
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// Jobs, for the API. Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    ctx: Context,
    settings: Arc<ServiceSettings>,
    /// Wakes this replica's idle runners when a job is queued here.
    queued: Arc<Notify>,
}

/// What the caller is told when the object store fails a call: waiting may
/// help (`UNAVAILABLE`), or the store refuses what vfps asks of it (a
/// permission, a key, a TLS setting: `FAILED_PRECONDITION`, with the cause);
/// never `INTERNAL`, which is for vfps's own faults.
fn storage_error(e: StorageError) -> Error {
    match e {
        StorageError::Unavailable(m) => Error::unavailable(m),
        StorageError::NotFound(_) => Error::not_found("the job's file is not there"),
        StorageError::TooLarge { limit } => Error::new(
            ErrorKind::OutOfRange,
            format!("the file is larger than {limit} bytes (CsvProcessing__MaxFileSize)"),
        ),
        other => Error::failed_precondition(other.to_string()),
    }
}

impl Jobs {
    pub fn new(ctx: Context, settings: ServiceSettings) -> Self {
        Self {
            ctx,
            settings: Arc::new(settings),
            queued: Arc::new(Notify::new()),
        }
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Creates a job for `owner`, awaiting its upload; every namespace must
    /// exist (and, to pseudonymize, be single-pseudonym: see
    /// [`single_pseudonym`]). Answers the job and where to upload the input.
    pub async fn create(&self, owner: &str, raw: RawSpec) -> Result<(JobRecord, Address), Error> {
        let spec = Spec::parse(raw)?;
        for name in spec.namespaces() {
            match self.ctx.store.get_namespace(name).await? {
                Some(ns) => single_pseudonym(&spec, &ns)?,
                None => return Err(Error::not_found(format!("namespace {name} not found"))),
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        let spec_json = serde_json::to_string(&spec)
            .map_err(|e| Error::internal(format!("cannot store a job's spec: {e}")))?;
        // Presigned first: a store that cannot sign now (temporary
        // credentials not renewed) leaves no job behind that nobody can upload to.
        let address = self.address(&id, Transfer::Upload, None).await?;
        let job = JobRecord::new(id, owner.to_owned(), spec_json, now_micros());
        self.ctx.store.insert_job(&job).await?;
        tracing::info!(job = %job.id, direction = spec.direction.name(), columns = spec.mappings.len(), "CSV job created");
        Ok((job, address))
    }

    /// Where `transfer` of job `id`'s file goes.
    pub async fn address(
        &self,
        id: &str,
        transfer: Transfer,
        download_name: Option<&str>,
    ) -> Result<Address, Error> {
        let key = match transfer {
            Transfer::Upload => input_key(id),
            Transfer::Download => output_key(id),
        };
        let expiry = self.settings.presigned_url_expiry;
        let method = match transfer {
            Transfer::Upload => "PUT",
            Transfer::Download => "GET",
        };
        let presigned = self
            .ctx
            .objects
            .presign(transfer, &key, expiry, download_name)
            .await
            .map_err(storage_error)?;
        Ok(match presigned {
            Some(url) => Address {
                url,
                method,
                through_vfps: false,
                expires_in: Some(expiry),
            },
            None => Address {
                url: format!(
                    "/v1/csv-jobs/{id}/{}",
                    match transfer {
                        Transfer::Upload => "input",
                        Transfer::Download => "output",
                    }
                ),
                method,
                through_vfps: true,
                expires_in: None,
            },
        })
    }

    /// Whether clients transfer files through vfps (a folder store).
    pub fn through_vfps(&self) -> bool {
        !self.ctx.objects.presigns()
    }

    /// Stores a job's input streamed through vfps; only while it awaits it.
    pub async fn upload(&self, id: &str, body: ByteStream) -> Result<u64, Error> {
        let job = self.get(id).await?;
        if job.state != JobState::AwaitingUpload {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "job {id} is {}: its input can no longer be uploaded",
                    job.state.name()
                ),
            ));
        }
        self.ctx
            .objects
            .put_stream(&input_key(id), body, self.settings.limits.max_file_bytes)
            .await
            .map_err(storage_error)
    }

    /// Checks the uploaded input and queues the job.
    pub async fn start(&self, id: &str) -> Result<JobRecord, Error> {
        let job = self.get(id).await?;
        if job.state != JobState::AwaitingUpload {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!("job {id} is {}, not awaiting its upload", job.state.name()),
            ));
        }
        let spec: Spec = serde_json::from_str(&job.spec)
            .map_err(|e| Error::internal(format!("job {id}'s spec is not valid: {e}")))?;
        let mut uids = Vec::new();
        for name in spec.namespaces() {
            match self.ctx.store.get_namespace(name).await? {
                // Checked again: the namespace may have been made anew since.
                Some(ns) => {
                    single_pseudonym(&spec, &ns)?;
                    uids.push(ns.uid.0);
                }
                None => return Err(Error::not_found(format!("namespace {name} not found"))),
            }
        }
        let (plan, size) = match inspect(
            self.ctx.objects.as_ref(),
            id,
            &spec,
            uids,
            self.settings.limits,
        )
        .await
        {
            Ok(found) => found,
            Err(InspectError::Invalid(m)) => return Err(Error::invalid_argument(m)),
            Err(InspectError::Storage(e)) => return Err(storage_error(e)),
        };
        if !self
            .ctx
            .store
            .queue_job(id, size as i64, &plan.to_json())
            .await?
        {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!("job {id} is no longer awaiting its upload"),
            ));
        }
        self.queued.notify_waiters();
        tracing::info!(job = %id, input_bytes = size, "CSV job queued");
        self.get(id).await
    }

    pub async fn get(&self, id: &str) -> Result<JobRecord, Error> {
        self.ctx
            .store
            .get_job(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("job {id} not found")))
    }

    /// Newest first; only `owner`'s when given.
    pub async fn list(&self, owner: Option<&str>) -> Result<Vec<JobRecord>, Error> {
        self.ctx.store.list_jobs(owner).await
    }

    /// Cancels a job; a finished one is answered as it is. A running job's
    /// runner stops at its next checkpoint and removes the partial output.
    pub async fn cancel(&self, id: &str) -> Result<JobRecord, Error> {
        let job = self
            .ctx
            .store
            .cancel_job(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("job {id} not found")))?;
        tracing::info!(job = %id, state = job.state.name(), "CSV job cancel requested");
        Ok(job)
    }

    /// Deletes a finished job and its files.
    pub async fn delete(&self, id: &str) -> Result<(), Error> {
        match self.ctx.store.delete_job(id).await? {
            Deleted::Deleted => {
                self.remove_files(id).await;
                Ok(())
            }
            Deleted::NotFound => Err(Error::not_found(format!("job {id} not found"))),
            Deleted::Unfinished(state) => Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!("job {id} is {}: cancel it before deleting it", state.name()),
            )),
        }
    }

    /// Deletes every finished job (only `owner`'s when given) and their files.
    pub async fn clear_finished(&self, owner: Option<&str>) -> Result<Vec<String>, Error> {
        let ids = self.ctx.store.delete_finished_jobs(owner).await?;
        for id in &ids {
            self.remove_files(id).await;
        }
        Ok(ids)
    }

    async fn remove_files(&self, id: &str) {
        if let Err(e) = self.ctx.objects.delete_prefix(&job_prefix(id)).await {
            // The bucket's lifecycle rule removes them in time.
            tracing::warn!(job = %id, error = %e, "cannot remove a deleted job's files yet");
        }
    }

    /// A completed job's output, streamed through vfps (a folder store).
    pub async fn download(&self, id: &str) -> Result<(JobRecord, ByteStream), Error> {
        let job = self.get(id).await?;
        if job.state != JobState::Completed {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!("job {id} is {}: it has no output", job.state.name()),
            ));
        }
        let stream = self
            .ctx
            .objects
            .read(&output_key(id), 0)
            .await
            .map_err(storage_error)?;
        Ok((job, stream))
    }

    /// Runs this replica's runners (none with `workers` 0) until `shutdown`;
    /// they finish (at a checkpoint) before the returned task ends.
    pub fn spawn_runners(&self, shutdown: CancellationToken) -> JoinHandle<()> {
        let mut tasks = Vec::new();
        for _ in 0..self.settings.workers {
            let (jobs, shutdown) = (self.clone(), shutdown.clone());
            tasks.push(tokio::spawn(
                async move { jobs.runner_loop(shutdown).await },
            ));
        }
        tokio::spawn(async move {
            for t in tasks {
                let _ = t.await;
            }
        })
    }

    async fn runner_loop(&self, shutdown: CancellationToken) {
        let settings = &self.ctx.settings;
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            let claim = Claim {
                runner: &self.ctx.runner,
                lease: settings.lease,
                stalled: settings.stalled,
            };
            let idle = match self.ctx.store.claim_job(claim).await {
                Ok(Some(job)) => {
                    failures = 0;
                    tracing::info!(job = %job.id, epoch = job.epoch, runner = %self.ctx.runner, "CSV job claimed");
                    runner::run(&self.ctx, job, &shutdown).await;
                    continue;
                }
                Ok(None) => {
                    failures = 0;
                    self.settings.poll_interval
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %e, "cannot look for CSV jobs yet");
                    }
                    self.settings.poll_interval
                }
            };
            // Jittered, so replicas do not poll in step.
            let wait = idle.mul_f64(rand::random_range(0.5..1.0));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.queued.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// A pseudonymization job writes only into single-pseudonym namespaces
/// (`FAILED_PRECONDITION` naming the namespace otherwise). In a
/// multi-pseudonym namespace a row would need a new pseudonym each time it
/// is processed, and a job re-processes the rows after its last checkpoint
/// when another runner takes it over: its output would then differ from an
/// uninterrupted run's and leave pseudonyms in the namespace that no output
/// names. De-pseudonymizing works on both kinds.
fn single_pseudonym(spec: &Spec, ns: &vfps_core::Namespace) -> Result<(), Error> {
    if spec.direction == Direction::Pseudonymize && ns.settings.multi {
        return Err(Error::failed_precondition(format!(
            "namespace {} is a multi-pseudonym namespace: a CSV pseudonymization job cannot \
             write into it (each row would get a new pseudonym, again when a job resumes); \
             use $pseudonymize-multiple, or a single-pseudonym namespace",
            ns.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal of the store (a permission, a TLS setting) reached the
    /// caller as INTERNAL, which is for vfps's own faults.
    #[test]
    fn a_store_that_refuses_is_a_failed_precondition_naming_why() {
        let e = storage_error(StorageError::Refused("S3 HeadBucket answered 403".into()));
        assert_eq!(e.kind, ErrorKind::FailedPrecondition);
        assert!(e.message.contains("HeadBucket answered 403"), "{e:?}");
        let e = storage_error(StorageError::Unavailable("reset".into()));
        assert_eq!(e.kind, ErrorKind::Unavailable);
    }
}
