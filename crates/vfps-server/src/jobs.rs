//! CSV jobs as the API serves them, whatever the transport: the jobs crate's
//! service behind the same authentication, authorization and audit as every
//! other call.
//!
//! Upstream's rules: creating a job needs write (pseudonymize) or
//! reverse-lookup (de-pseudonymize) in every namespace it maps; a job is its
//! creator's (the same typed subject), and only they or an admin see, cancel
//! or delete it; only its creator uploads its input and starts it. Its output is re-identifying data, so downloading it
//! needs, at download time and whoever asks, the right the job needed in each
//! of its namespaces: an admin sees every job but has no right to an output
//! by being one, and a creator who lost the right loses the output too.
//! Creating, cancelling and every download (of the file through vfps, or the
//! issue of a presigned address for it), allowed or denied, are audit events,
//! one per namespace of the job.

use std::{sync::Arc, time::Instant};

use vfps_core::{Error, ErrorKind};
use vfps_jobs::{
    service::{Address, Jobs},
    spec::{RawSpec, Spec},
    storage::{ByteStream, Transfer},
};
use vfps_store::jobs::JobRecord;

use crate::{
    auth::{audit, Auth, AuthHeader, Operation, Principal},
    metrics::Metrics,
};

/// Jobs for the API, or why there are none.
#[derive(Clone)]
pub struct JobApi {
    jobs: Result<Jobs, Arc<str>>,
    auth: Auth,
    metrics: Metrics,
}

impl JobApi {
    pub fn new(jobs: Result<Jobs, String>, auth: Auth, metrics: Metrics) -> Self {
        Self {
            jobs: jobs.map_err(Arc::from),
            auth,
            metrics,
        }
    }

    pub fn jobs(&self) -> Result<&Jobs, Error> {
        self.jobs
            .as_ref()
            .map_err(|why| Error::new(ErrorKind::FailedPrecondition, why.to_string()))
    }

    /// Whether job files go through vfps (the folder store).
    pub fn through_vfps(&self) -> bool {
        self.jobs.as_ref().is_ok_and(|j| j.through_vfps())
    }

    /// Records one audit event per namespace of `job`'s spec.
    fn audit(
        &self,
        principal: Option<&Principal>,
        operation: Operation,
        namespaces: &[String],
        job: Option<&str>,
        outcome: Result<u64, ErrorKind>,
    ) {
        for namespace in namespaces {
            audit::record(
                &self.metrics,
                &audit::Event {
                    principal,
                    operation,
                    namespace,
                    job,
                    token: None,
                    outcome,
                },
            );
        }
    }

    /// Creates a job; answers it and where to upload its input.
    pub async fn create(
        &self,
        header: AuthHeader<'_>,
        raw: RawSpec,
        deadline: Instant,
    ) -> Result<(JobRecord, Address), Error> {
        let principal = self.auth.authenticate(header, deadline).await?;
        let jobs = self.jobs()?;
        let operation = match raw.direction {
            Some(vfps_jobs::spec::Direction::Depseudonymize) => Operation::DepseudonymizeFile,
            _ => Operation::PseudonymizeFile,
        };
        let mut namespaces: Vec<String> = raw.mappings.iter().map(|m| m.1.clone()).collect();
        namespaces.dedup();
        let allowed = namespaces
            .iter()
            .try_for_each(|ns| self.auth.authorize(&principal, operation, Some(ns)));
        let result = match allowed {
            Ok(()) => {
                tokio::time::timeout_at(deadline.into(), jobs.create(&principal.subject, raw))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::unavailable(
                            "the job could not be created within the call's deadline",
                        ))
                    })
            }
            Err(e) => Err(e),
        };
        self.audit(
            Some(&principal),
            operation,
            &namespaces,
            result.as_ref().ok().map(|(j, _)| j.id.as_str()),
            result.as_ref().map(|_| 1).map_err(|e| e.kind),
        );
        result
    }

    /// The job, if `principal` may see it (its creator, or an admin); one
    /// that is not theirs is `NOT_FOUND`, as if absent.
    async fn owned(&self, principal: &Principal, id: &str) -> Result<JobRecord, Error> {
        let job = self.jobs()?.get(id).await?;
        if job.created_by != principal.subject && !self.auth.is_admin(principal) {
            return Err(Error::not_found(format!("job {id} not found")));
        }
        Ok(job)
    }

    /// The job, if it is `principal`'s own: what goes into a job and when
    /// it runs are its creator's alone. An admin sees, cancels and deletes
    /// any job, but uploading another's input or starting another's job
    /// would run it with its creator's rights on data the creator never
    /// gave: `PERMISSION_DENIED` (a job the caller may not see at all stays
    /// `NOT_FOUND`).
    async fn own(&self, principal: &Principal, id: &str) -> Result<JobRecord, Error> {
        let job = self.owned(principal, id).await?;
        if job.created_by != principal.subject {
            return Err(Error::permission_denied(format!(
                "job {id} is another user's: only its creator uploads its input and starts it"
            )));
        }
        Ok(job)
    }

    /// `PERMISSION_DENIED` unless `principal` holds, now, the right `job`
    /// needed in each of its namespaces (its output holds what that right
    /// reveals); the refusal is an audit event.
    fn may_download(&self, principal: &Principal, job: &JobRecord) -> Result<(), Error> {
        let namespaces = namespaces_of(job);
        let needed = creation_operation(job);
        let allowed = if namespaces.is_empty() {
            // Nothing to judge by is no right.
            Err(Error::permission_denied(
                "the job's namespaces cannot be read",
            ))
        } else {
            namespaces
                .iter()
                .try_for_each(|ns| self.auth.authorize(principal, needed, Some(ns)))
        }
        .map_err(|e| {
            Error::permission_denied(format!(
                "the output of job {} needs what creating it needed: {}",
                job.id, e.message
            ))
        });
        if let Err(e) = &allowed {
            self.audit(
                Some(principal),
                Operation::DownloadJob,
                &namespaces,
                Some(&job.id),
                Err(e.kind),
            );
        }
        allowed
    }

    async fn principal(
        &self,
        header: AuthHeader<'_>,
        deadline: Instant,
    ) -> Result<Arc<Principal>, Error> {
        let principal = self.auth.authenticate(header, deadline).await?;
        self.auth
            .authorize(&principal, Operation::ManageJobs, None)?;
        Ok(principal)
    }

    pub async fn get(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<JobRecord, Error> {
        let p = self.principal(header, deadline).await?;
        self.owned(&p, id).await
    }

    pub async fn start(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<JobRecord, Error> {
        let p = self.principal(header, deadline).await?;
        self.own(&p, id).await?;
        self.jobs()?.start(id).await
    }

    pub async fn list(
        &self,
        header: AuthHeader<'_>,
        deadline: Instant,
    ) -> Result<Vec<JobRecord>, Error> {
        let p = self.principal(header, deadline).await?;
        let owner = (!self.auth.is_admin(&p)).then_some(p.subject.as_str());
        self.jobs()?.list(owner).await
    }

    pub async fn cancel(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<JobRecord, Error> {
        let p = self.principal(header, deadline).await?;
        let job = self.owned(&p, id).await?;
        let result = self.jobs()?.cancel(id).await;
        self.audit(
            Some(&p),
            Operation::CancelJob,
            &namespaces_of(&job),
            Some(id),
            result.as_ref().map(|_| 1).map_err(|e| e.kind),
        );
        result
    }

    pub async fn delete(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<(), Error> {
        let p = self.principal(header, deadline).await?;
        self.owned(&p, id).await?;
        self.jobs()?.delete(id).await
    }

    pub async fn clear_finished(
        &self,
        header: AuthHeader<'_>,
        deadline: Instant,
    ) -> Result<usize, Error> {
        let p = self.principal(header, deadline).await?;
        let owner = (!self.auth.is_admin(&p)).then_some(p.subject.as_str());
        Ok(self.jobs()?.clear_finished(owner).await?.len())
    }

    /// Where to download a completed job's output; an audit event.
    pub async fn download_address(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<Address, Error> {
        let p = self.principal(header, deadline).await?;
        let job = self.owned(&p, id).await?;
        self.may_download(&p, &job)?;
        let result = if job.state == vfps_store::jobs::JobState::Completed {
            self.jobs()?
                .address(id, Transfer::Download, Some(&download_name(&job)))
                .await
        } else {
            Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!("job {id} is {}: it has no output", job.state.name()),
            ))
        };
        // A path through vfps is audited when the file is fetched from it.
        if !self.through_vfps() {
            self.audit(
                Some(&p),
                Operation::DownloadJob,
                &namespaces_of(&job),
                Some(id),
                result.as_ref().map(|_| 1).map_err(|e| e.kind),
            );
        }
        result
    }

    /// Stores a job's input streamed through vfps.
    pub async fn upload(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        body: ByteStream,
        deadline: Instant,
    ) -> Result<u64, Error> {
        let p = self.principal(header, deadline).await?;
        self.own(&p, id).await?;
        self.jobs()?.upload(id, body).await
    }

    /// A completed job's output streamed through vfps, with the name to
    /// save it under; an audit event.
    pub async fn download(
        &self,
        header: AuthHeader<'_>,
        id: &str,
        deadline: Instant,
    ) -> Result<(String, ByteStream), Error> {
        let p = self.principal(header, deadline).await?;
        let job = self.owned(&p, id).await?;
        self.may_download(&p, &job)?;
        let result = self.jobs()?.download(id).await;
        self.audit(
            Some(&p),
            Operation::DownloadJob,
            &namespaces_of(&job),
            Some(id),
            result.as_ref().map(|_| 1).map_err(|e| e.kind),
        );
        result.map(|(job, stream)| (download_name(&job), stream))
    }
}

/// What creating `job` needed (and so what its output needs).
fn creation_operation(job: &JobRecord) -> Operation {
    match serde_json::from_str::<Spec>(&job.spec).map(|s| s.direction) {
        Ok(vfps_jobs::spec::Direction::Pseudonymize) => Operation::PseudonymizeFile,
        // A spec this version cannot read is judged as the stricter kind.
        _ => Operation::DepseudonymizeFile,
    }
}

/// The namespaces of a stored job's spec.
pub fn namespaces_of(job: &JobRecord) -> Vec<String> {
    serde_json::from_str::<Spec>(&job.spec)
        .map(|s| {
            s.namespaces()
                .into_iter()
                .map(|n| n.as_str().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Upstream's name of a job's output: `<input name>-pseudonymized.csv`.
pub fn download_name(job: &JobRecord) -> String {
    let spec = serde_json::from_str::<Spec>(&job.spec).ok();
    let base = spec
        .as_ref()
        .and_then(|s| s.file_name.as_deref())
        .map(|n| n.rsplit_once('.').map_or(n, |(stem, _)| stem).to_owned())
        .unwrap_or_else(|| job.id.clone());
    let suffix = match spec.map(|s| s.direction) {
        Some(vfps_jobs::spec::Direction::Depseudonymize) => "de-pseudonymized",
        _ => "pseudonymized",
    };
    // The name as given (umlauts and all: `Content-Disposition` carries it
    // exactly in `filename*`), without what no file name may hold: control
    // characters and path separators.
    let base: String = base
        .chars()
        .map(|c| {
            if c.is_control() || c == '/' || c == '\\' {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{base}-{suffix}.csv")
}
