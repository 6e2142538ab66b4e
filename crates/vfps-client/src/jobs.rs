//! `CsvJobService`: the calls a client of CSV jobs makes, under the same
//! deadline and retry rules as every other call.

use tonic::Status;
use vfps_proto::v1::{
    csv_job_service_client::CsvJobServiceClient, CsvJob, CsvJobServiceCreateRequest,
    CsvJobServiceCreateResponse, CsvJobServiceGetDownloadAddressRequest, CsvJobServiceGetRequest,
    CsvJobServiceListRequest, CsvJobServiceStartRequest, CsvJobTransferAddress,
};

use crate::{Client, Outcome, Until};

fn job_of(job: Option<CsvJob>) -> Result<CsvJob, Status> {
    job.ok_or_else(|| Status::internal("empty response"))
}

impl Client {
    /// `CsvJobService/Create`: the job and where to upload its input.
    pub async fn create_job(
        &self,
        request: CsvJobServiceCreateRequest,
        until: impl Into<Until>,
    ) -> Outcome<CsvJobServiceCreateResponse> {
        self.call(until, |channel, remaining| {
            let mut client = CsvJobServiceClient::new(channel);
            let r = self.request(request.clone(), remaining);
            async move { client.create(r).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// `CsvJobService/Start`, once the input is uploaded.
    pub async fn start_job(&self, id: &str, until: impl Into<Until>) -> Outcome<CsvJob> {
        self.call(until, |channel, remaining| {
            let mut client = CsvJobServiceClient::new(channel);
            let r = self.request(CsvJobServiceStartRequest { id: id.to_owned() }, remaining);
            async move {
                client
                    .start(r)
                    .await
                    .and_then(|r| job_of(r.into_inner().job))
            }
        })
        .await
    }

    /// `CsvJobService/Get`.
    pub async fn get_job(&self, id: &str, until: impl Into<Until>) -> Outcome<CsvJob> {
        self.call(until, |channel, remaining| {
            let mut client = CsvJobServiceClient::new(channel);
            let r = self.request(CsvJobServiceGetRequest { id: id.to_owned() }, remaining);
            async move { client.get(r).await.and_then(|r| job_of(r.into_inner().job)) }
        })
        .await
    }

    /// `CsvJobService/List`: the caller's jobs (every job, for an admin).
    pub async fn list_jobs(&self, until: impl Into<Until>) -> Outcome<Vec<CsvJob>> {
        self.call(until, |channel, remaining| {
            let mut client = CsvJobServiceClient::new(channel);
            let r = self.request(CsvJobServiceListRequest {}, remaining);
            async move { client.list(r).await.map(|r| r.into_inner().jobs) }
        })
        .await
    }

    /// `CsvJobService/GetDownloadAddress` of a completed job.
    pub async fn job_download_address(
        &self,
        id: &str,
        until: impl Into<Until>,
    ) -> Outcome<CsvJobTransferAddress> {
        self.call(until, |channel, remaining| {
            let mut client = CsvJobServiceClient::new(channel);
            let r = self.request(
                CsvJobServiceGetDownloadAddressRequest { id: id.to_owned() },
                remaining,
            );
            async move {
                client.get_download_address(r).await.and_then(|r| {
                    r.into_inner()
                        .download
                        .ok_or_else(|| Status::internal("empty response"))
                })
            }
        })
        .await
    }

    /// The `authorization` header value this client sends, if any (for the
    /// HTTP transfers of a job's files through vfps).
    pub fn bearer_header(&self) -> Option<&str> {
        self.authorization.as_ref().and_then(|a| a.to_str().ok())
    }
}
