//! `vfps.api.v1.CsvJobService` over REST, with Google's custom-method paths:
//!
//! | call | route |
//! |---|---|
//! | Create | `POST /v1/csv-jobs` |
//! | List | `GET /v1/csv-jobs` |
//! | Get, Delete | `GET`, `DELETE /v1/csv-jobs/{id}` |
//! | Start, Cancel | `POST /v1/csv-jobs/{id}:start`, `…:cancel` |
//! | GetDownloadAddress | `GET /v1/csv-jobs/{id}:downloadAddress` |
//! | ClearFinished | `POST /v1/csv-jobs:clearFinished` |
//!
//! and, when job files live in vfps's folder, the transfers themselves,
//! streamed (never held whole in memory): `PUT /v1/csv-jobs/{id}/input` and
//! `GET /v1/csv-jobs/{id}/output`. Answers are JSON as the rest of the REST
//! API writes them (64-bit integers as numbers).

use axum::{
    body::{Body, Bytes},
    extract::{Path, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use vfps_core::Error;
use vfps_jobs::storage::{ByteStream, StorageError};
use vfps_proto::v1 as pb;

use super::rest::{authorization, error_response, parse_body, respond};
use crate::{
    grpc::jobs::{address_to_proto, job_to_proto, raw_spec},
    state::AppState,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/csv-jobs", get(list).post(create))
        .route("/v1/csv-jobs:clearFinished", post(clear_finished))
        .route(
            "/v1/csv-jobs/{id}",
            get(get_job).delete(delete_job).post(custom_method),
        )
        .route("/v1/csv-jobs/{id}/input", axum::routing::put(upload))
        .route("/v1/csv-jobs/{id}/output", get(download))
}

/// The 64-bit integer fields of the job messages, written as numbers like
/// the rest of the REST API (pbjson writes them as strings).
const INT64_FIELDS: [&str; 10] = [
    "totalBytes",
    "bytesProcessed",
    "rowsProcessed",
    "missingValueCount",
    "malformedRowCount",
    "malformedRowLines",
    "unknownPseudonymCount",
    "epoch",
    "checkpointedRows",
    "resumedRows",
];

fn numbers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if INT64_FIELDS.contains(&key.as_str()) {
                    as_number(v);
                } else {
                    numbers(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(numbers),
        _ => {}
    }
}

fn as_number(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Ok(n) = s.parse::<i64>() {
                *v = Value::from(n);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(as_number),
        _ => {}
    }
}

/// A message as the REST API writes it.
fn json(message: &impl Serialize) -> Result<Value, Error> {
    let mut v = serde_json::to_value(message)
        .map_err(|e| Error::internal(format!("the answer could not be written as JSON: {e}")))?;
    numbers(&mut v);
    Ok(v)
}

async fn create(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let d = state.deadline(None);
    respond(&state, "CsvJobService/Create", async {
        let req: pb::CsvJobServiceCreateRequest = parse_body(&body)?;
        let (job, upload) = state
            .jobs
            .create(authorization(&headers), raw_spec(req)?, d)
            .await?;
        json(&pb::CsvJobServiceCreateResponse {
            job: Some(job_to_proto(&job)),
            upload: Some(address_to_proto(upload)),
        })
    })
    .await
}

async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let d = state.deadline(None);
    respond(&state, "CsvJobService/List", async {
        let jobs = state.jobs.list(authorization(&headers), d).await?;
        json(&pb::CsvJobServiceListResponse {
            jobs: jobs.iter().map(job_to_proto).collect(),
        })
    })
    .await
}

async fn get_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let d = state.deadline(None);
    if let Some(id) = id.strip_suffix(":downloadAddress") {
        return respond(&state, "CsvJobService/GetDownloadAddress", async {
            let address = state
                .jobs
                .download_address(authorization(&headers), id, d)
                .await?;
            json(&pb::CsvJobServiceGetDownloadAddressResponse {
                download: Some(address_to_proto(address)),
            })
        })
        .await;
    }
    respond(&state, "CsvJobService/Get", async {
        let job = state.jobs.get(authorization(&headers), &id, d).await?;
        json(&pb::CsvJobServiceGetResponse {
            job: Some(job_to_proto(&job)),
        })
    })
    .await
}

async fn delete_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let d = state.deadline(None);
    respond(&state, "CsvJobService/Delete", async {
        state.jobs.delete(authorization(&headers), &id, d).await?;
        json(&pb::CsvJobServiceDeleteResponse {})
    })
    .await
}

/// `POST /v1/csv-jobs/{id}:start` and `…:cancel`.
async fn custom_method(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    let d = state.deadline(None);
    match path.rsplit_once(':') {
        Some((id, "start")) => {
            respond(&state, "CsvJobService/Start", async {
                let job = state.jobs.start(authorization(&headers), id, d).await?;
                json(&pb::CsvJobServiceStartResponse {
                    job: Some(job_to_proto(&job)),
                })
            })
            .await
        }
        Some((id, "cancel")) => {
            respond(&state, "CsvJobService/Cancel", async {
                let job = state.jobs.cancel(authorization(&headers), id, d).await?;
                json(&pb::CsvJobServiceCancelResponse {
                    job: Some(job_to_proto(&job)),
                })
            })
            .await
        }
        _ => error_response(&Error::not_found(
            "no such method: POST /v1/csv-jobs/{id}:start or :cancel",
        )),
    }
}

async fn clear_finished(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let d = state.deadline(None);
    respond(&state, "CsvJobService/ClearFinished", async {
        let n = state
            .jobs
            .clear_finished(authorization(&headers), d)
            .await?;
        json(&pb::CsvJobServiceClearFinishedResponse {
            deleted: i32::try_from(n).unwrap_or(i32::MAX),
        })
    })
    .await
}

/// The input, streamed to the folder as it arrives.
async fn upload(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let d = state.deadline(None);
    respond(&state, "CsvJobService/Upload", async {
        let stream: ByteStream = Box::pin(body.into_data_stream().map(|chunk| {
            chunk.map_err(|e| StorageError::Refused(format!("the upload broke off: {e}")))
        }));
        let size = state
            .jobs
            .upload(authorization(&headers), &id, stream, d)
            .await?;
        Ok(serde_json::json!({ "size": size }))
    })
    .await
}

/// A completed job's output, streamed from the folder; an audit event.
async fn download(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    download_response(&state, authorization(&headers), &id).await
}

/// A completed job's output streamed through vfps to `credential`'s holder
/// (the API's route and the UI's).
pub(crate) async fn download_response(
    state: &AppState,
    credential: crate::auth::AuthHeader<'_>,
    id: &str,
) -> Response {
    let d = state.deadline(None);
    let started = std::time::Instant::now();
    let result = state.jobs.download(credential, id, d).await;
    state.metrics.observe_request(
        "http",
        "CsvJobService/Download",
        started.elapsed(),
        result.as_ref().err(),
    );
    let (name, stream) = match result {
        Ok(found) => found,
        Err(e) => return error_response(&e),
    };
    let body = Body::from_stream(stream.map(|chunk| chunk.map_err(std::io::Error::other)));
    // The exact name in `filename*`, an ASCII fallback in `filename`.
    let disposition = HeaderValue::from_str(&vfps_jobs::storage::s3::content_disposition(&name))
        .unwrap_or(HeaderValue::from_static("attachment"));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/csv")),
            (header::CONTENT_DISPOSITION, disposition),
            // Personal data: no shared cache keeps it.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_fields_are_written_as_numbers_and_nothing_else_changes() {
        let mut v = serde_json::json!({
            "job": {"rowsProcessed": "12", "malformedRowLines": ["3", "9"], "id": "7",
                    "takeovers": [{"resumedRows": "5", "runner": "42"}]}
        });
        numbers(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "job": {"rowsProcessed": 12, "malformedRowLines": [3, 9], "id": "7",
                        "takeovers": [{"resumedRows": 5, "runner": "42"}]}
            })
        );
    }
}
