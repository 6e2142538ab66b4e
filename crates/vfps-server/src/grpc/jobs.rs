//! `vfps.api.v1.CsvJobService`.

use std::time::{Duration, SystemTime};

use tonic::{Request, Response, Status};
use vfps_core::Error;
use vfps_jobs::{
    checkpoint::Takeover,
    runner::counters_of,
    service::Address,
    spec::{Direction, RawSpec, Spec},
};
use vfps_proto::v1::{self as pb, csv_job_service_server::CsvJobService};
use vfps_store::jobs::{JobRecord, JobState};

use super::{authorization, deadline, meta, observed, timestamp};
use crate::state::AppState;

pub struct CsvJobApi {
    pub state: AppState,
}

fn state_to_proto(s: JobState) -> pb::CsvJobState {
    match s {
        JobState::AwaitingUpload => pb::CsvJobState::AwaitingUpload,
        JobState::Queued => pb::CsvJobState::Queued,
        JobState::Running => pb::CsvJobState::Running,
        JobState::Completed => pb::CsvJobState::Completed,
        JobState::Failed => pb::CsvJobState::Failed,
        JobState::Cancelled => pb::CsvJobState::Cancelled,
    }
}

/// A stored job as the API shows it.
pub(crate) fn job_to_proto(j: &JobRecord) -> pb::CsvJob {
    let spec: Option<Spec> = serde_json::from_str(&j.spec).ok();
    let counters = counters_of(j);
    let takeovers: Vec<Takeover> = serde_json::from_str(&j.takeovers).unwrap_or_default();
    let elapsed = j
        .started_at
        .and_then(|start| {
            j.finished_at
                .unwrap_or_else(SystemTime::now)
                .duration_since(start)
                .ok()
        })
        .unwrap_or(Duration::ZERO);
    let rows_per_second = if elapsed.as_secs_f64() > 0.0 {
        j.rows_done as f64 / elapsed.as_secs_f64()
    } else {
        0.0
    };
    pb::CsvJob {
        meta: meta(j.created_at, j.updated_at),
        id: j.id.clone(),
        state: state_to_proto(j.state) as i32,
        direction: match spec.as_ref().map(|s| s.direction) {
            Some(Direction::Depseudonymize) => pb::CsvJobDirection::Depseudonymize,
            _ => pb::CsvJobDirection::Pseudonymize,
        } as i32,
        column_mappings: spec
            .as_ref()
            .map(|s| {
                s.mappings
                    .iter()
                    .map(|m| pb::CsvColumnMapping {
                        source_column: m.source_column.clone(),
                        namespace: m.namespace.as_str().to_owned(),
                        target_column: m.target_column.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        delimiter: spec.as_ref().map(Spec::delimiter_text).unwrap_or_default(),
        encoding: spec
            .as_ref()
            .map(|s| s.encoding.name().to_owned())
            .unwrap_or_default(),
        has_header_row: spec.as_ref().is_some_and(|s| s.has_header),
        original_file_name: spec
            .as_ref()
            .and_then(|s| s.file_name.clone())
            .unwrap_or_default(),
        created_by: j.created_by.clone(),
        total_bytes: j.input_bytes.unwrap_or(0),
        bytes_processed: j.bytes_done,
        rows_processed: j.rows_done,
        missing_value_count: counters.missing as i64,
        malformed_row_count: counters.malformed as i64,
        malformed_row_lines: counters.malformed_lines.iter().map(|&l| l as i64).collect(),
        unknown_pseudonym_count: counters.unknown as i64,
        error_message: j.error.clone().unwrap_or_default(),
        runner: j.runner.clone().unwrap_or_default(),
        epoch: j.epoch,
        takeovers: takeovers
            .iter()
            .map(|t| pb::CsvJobTakeover {
                at: Some(timestamp(vfps_core::from_micros(t.at_micros))),
                epoch: t.epoch,
                runner: t.runner.clone(),
                checkpointed_rows: t.checkpointed_rows as i64,
                resumed_rows: t.resumed_rows as i64,
            })
            .collect(),
        finished_at: j.finished_at.map(timestamp),
        rows_per_second,
    }
}

pub(crate) fn address_to_proto(a: Address) -> pb::CsvJobTransferAddress {
    pb::CsvJobTransferAddress {
        url: a.url,
        method: a.method.to_owned(),
        through_vfps: a.through_vfps,
        expires_at: a.expires_in.map(|d| timestamp(SystemTime::now() + d)),
    }
}

/// A create request as the jobs crate takes it.
pub(crate) fn raw_spec(req: pb::CsvJobServiceCreateRequest) -> Result<RawSpec, Error> {
    let direction = match pb::CsvJobDirection::try_from(req.direction) {
        Ok(pb::CsvJobDirection::Unspecified | pb::CsvJobDirection::Pseudonymize) => {
            Direction::Pseudonymize
        }
        Ok(pb::CsvJobDirection::Depseudonymize) => Direction::Depseudonymize,
        Err(_) => {
            return Err(Error::invalid_argument(format!(
                "unknown direction {}",
                req.direction
            )))
        }
    };
    Ok(RawSpec {
        direction: Some(direction),
        mappings: req
            .column_mappings
            .into_iter()
            .map(|m| (m.source_column, m.namespace, m.target_column))
            .collect(),
        delimiter: req.delimiter,
        encoding: req.encoding,
        has_header: req.has_header_row,
        file_name: req.original_file_name,
    })
}

#[tonic::async_trait]
impl CsvJobService for CsvJobApi {
    async fn create(
        &self,
        request: Request<pb::CsvJobServiceCreateRequest>,
    ) -> Result<Response<pb::CsvJobServiceCreateResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/Create", async {
            let raw = raw_spec(req)?;
            let (job, upload) = self
                .state
                .jobs
                .create(authorization(&metadata), raw, d)
                .await?;
            Ok(pb::CsvJobServiceCreateResponse {
                job: Some(job_to_proto(&job)),
                upload: Some(address_to_proto(upload)),
            })
        })
        .await
    }

    async fn start(
        &self,
        request: Request<pb::CsvJobServiceStartRequest>,
    ) -> Result<Response<pb::CsvJobServiceStartResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/Start", async {
            let job = self
                .state
                .jobs
                .start(authorization(&metadata), &req.id, d)
                .await?;
            Ok(pb::CsvJobServiceStartResponse {
                job: Some(job_to_proto(&job)),
            })
        })
        .await
    }

    async fn get(
        &self,
        request: Request<pb::CsvJobServiceGetRequest>,
    ) -> Result<Response<pb::CsvJobServiceGetResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/Get", async {
            let job = self
                .state
                .jobs
                .get(authorization(&metadata), &req.id, d)
                .await?;
            Ok(pb::CsvJobServiceGetResponse {
                job: Some(job_to_proto(&job)),
            })
        })
        .await
    }

    async fn list(
        &self,
        request: Request<pb::CsvJobServiceListRequest>,
    ) -> Result<Response<pb::CsvJobServiceListResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, _) = request.into_parts();
        observed(&self.state, "CsvJobService/List", async {
            let jobs = self.state.jobs.list(authorization(&metadata), d).await?;
            Ok(pb::CsvJobServiceListResponse {
                jobs: jobs.iter().map(job_to_proto).collect(),
            })
        })
        .await
    }

    async fn cancel(
        &self,
        request: Request<pb::CsvJobServiceCancelRequest>,
    ) -> Result<Response<pb::CsvJobServiceCancelResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/Cancel", async {
            let job = self
                .state
                .jobs
                .cancel(authorization(&metadata), &req.id, d)
                .await?;
            Ok(pb::CsvJobServiceCancelResponse {
                job: Some(job_to_proto(&job)),
            })
        })
        .await
    }

    async fn delete(
        &self,
        request: Request<pb::CsvJobServiceDeleteRequest>,
    ) -> Result<Response<pb::CsvJobServiceDeleteResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/Delete", async {
            self.state
                .jobs
                .delete(authorization(&metadata), &req.id, d)
                .await?;
            Ok(pb::CsvJobServiceDeleteResponse {})
        })
        .await
    }

    async fn clear_finished(
        &self,
        request: Request<pb::CsvJobServiceClearFinishedRequest>,
    ) -> Result<Response<pb::CsvJobServiceClearFinishedResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, _) = request.into_parts();
        observed(&self.state, "CsvJobService/ClearFinished", async {
            let n = self
                .state
                .jobs
                .clear_finished(authorization(&metadata), d)
                .await?;
            Ok(pb::CsvJobServiceClearFinishedResponse {
                deleted: i32::try_from(n).unwrap_or(i32::MAX),
            })
        })
        .await
    }

    async fn get_download_address(
        &self,
        request: Request<pb::CsvJobServiceGetDownloadAddressRequest>,
    ) -> Result<Response<pb::CsvJobServiceGetDownloadAddressResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "CsvJobService/GetDownloadAddress", async {
            let address = self
                .state
                .jobs
                .download_address(authorization(&metadata), &req.id, d)
                .await?;
            Ok(pb::CsvJobServiceGetDownloadAddressResponse {
                download: Some(address_to_proto(address)),
            })
        })
        .await
    }
}
