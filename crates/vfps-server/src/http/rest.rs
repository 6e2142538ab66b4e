//! REST routes in proto3 JSON, as upstream's gRPC JSON transcoding of
//! `vfps.api.v1` serves them (the JSON itself: `vfps_proto`), labelled
//! `application/json; charset=utf-8`. Errors are
//! `{"code": <grpc code>, "message": ..., "details": []}`, in that order.

use std::{collections::HashMap, time::Instant};

use axum::{
    body::Bytes,
    extract::{Path, Query, State},
    http::{header::CONTENT_TYPE, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use serde::{de::DeserializeOwned, Serialize};
use vfps_core::Error;
use vfps_proto::v1 as pb;

use super::{grpc_code, http_status};
use crate::{
    auth::Operation,
    grpc::{namespaces as ns_api, pseudonyms as ps_api},
    state::AppState,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/namespaces", get(get_all).post(create_namespace))
        .route(
            "/v1/namespaces/{name}",
            get(get_namespace).delete(delete_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}/pseudonyms",
            get(list_pseudonyms).post(create_pseudonym),
        )
        .route(
            "/v1/namespaces/{namespace}/pseudonyms/{pseudonym}",
            get(get_pseudonym),
        )
        .route(
            "/v1/namespaces/{namespace}/pseudonyms:erase",
            post(erase_pseudonym),
        )
}

/// The `Authorization` header's value, as sent.
pub(super) fn authorization(headers: &HeaderMap) -> crate::auth::AuthHeader<'_> {
    crate::auth::single(
        headers
            .get_all(axum::http::header::AUTHORIZATION)
            .iter()
            .map(|v| v.as_bytes()),
    )
}

/// The content type of upstream's JSON answers, errors included.
const JSON_UTF8: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");

/// A `google.rpc.Status` as upstream's transcoding writes an error: every
/// field, in field-number order.
#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i32,
    message: &'a str,
    /// Never filled here; written, as upstream writes an empty list.
    details: [(); 0],
}

pub(crate) fn error_response(e: &Error) -> Response {
    let body = ErrorBody {
        code: grpc_code(e.kind),
        message: &e.message,
        details: [],
    };
    // Cannot fail: an integer and a string.
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    // A restore hold is no fault of the request: 409, as FHIR answers it.
    let status = if e.is_restore_hold() {
        axum::http::StatusCode::CONFLICT
    } else {
        http_status(e.kind)
    };
    super::challenge(
        e.kind,
        (status, [(CONTENT_TYPE, JSON_UTF8)], bytes).into_response(),
    )
}

/// A call's answer as JSON, or `Internal` if the message cannot be written
/// (an enum field holding a number the contract does not name).
fn json_answer(body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (StatusCode::OK, [(CONTENT_TYPE, JSON_UTF8)], bytes).into_response(),
        Err(error) => {
            tracing::error!(%error, "an answer could not be written as JSON");
            error_response(&Error::internal("the answer could not be written as JSON"))
        }
    }
}

/// A namespace as upstream's REST answers it (prefix and suffix set, empty
/// when there is none, as on gRPC).
fn namespace(ns: &vfps_core::Namespace) -> pb::Namespace {
    ns_api::to_proto(ns)
}

pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, Error> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    super::json::proto3(body)
        .map_err(|e| Error::invalid_argument(format!("malformed JSON body: {e}")))
}

/// Runs one call with metrics and renders the proto3 JSON answer or the error.
pub(super) async fn respond<T: Serialize>(
    state: &AppState,
    method: &'static str,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Response {
    let started = Instant::now();
    let result = call.await;
    state
        .metrics
        .observe_request("http", method, started.elapsed(), result.as_ref().err());
    match result {
        Ok(body) => json_answer(&body),
        Err(e) => error_response(&e),
    }
}

async fn create_namespace(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let reveals = std::sync::OnceLock::new();
    let mut response = respond(&state, "NamespaceService/Create", async {
        let who = state.auth.authenticate(authorization(&headers), d).await?;
        let req: pb::NamespaceServiceCreateRequest = parse_body(&body)?;
        state
            .auth
            .authorize(&who, Operation::CreateNamespace, Some(&req.name))?;
        let ns = state
            .service
            .create_namespace(ns_api::new_namespace(req), d)
            .await?;
        if let Some(text) = ns.settings.method.reveals() {
            let _ = reveals.set(text);
        }
        Ok(pb::NamespaceServiceCreateResponse {
            namespace: Some(namespace(&ns)),
        })
    })
    .await;
    // What the method reveals, beside the answer (RFC 7234's Warning 299:
    // "miscellaneous persistent warning"; docs/privacy.md).
    if let Some(value) = reveals
        .get()
        .and_then(|t| axum::http::HeaderValue::from_str(&format!("299 vfps \"{t}\"")).ok())
    {
        response
            .headers_mut()
            .insert(axum::http::header::WARNING, value);
    }
    response
}

async fn get_all(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let d = state.deadline(None);
    respond(&state, "NamespaceService/GetAll", async {
        let who = state
            .auth
            .check(authorization(&headers), Operation::ListNamespaces, None, d)
            .await?;
        let all = state.service.list_namespaces(d).await?;
        Ok(pb::NamespaceServiceGetAllResponse {
            namespaces: all
                .iter()
                .filter(|ns| state.auth.may_see(&who, ns.name.as_str()))
                .map(namespace)
                .collect(),
        })
    })
    .await
}

async fn get_namespace(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let d = state.deadline(None);
    respond(&state, "NamespaceService/Get", async {
        state
            .auth
            .check(
                authorization(&headers),
                Operation::GetNamespace,
                Some(&name),
                d,
            )
            .await?;
        let ns = state.service.get_namespace(&name, d).await?;
        Ok(pb::NamespaceServiceGetResponse {
            namespace: Some(namespace(&ns)),
        })
    })
    .await
}

async fn delete_namespace(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let d = state.deadline(None);
    let call = async {
        state
            .delete_namespace(authorization(&headers), &name, d)
            .await?;
        Ok(pb::NamespaceServiceDeleteResponse {})
    };
    respond(&state, "NamespaceService/Delete", call).await
}

async fn create_pseudonym(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(namespace): Path<String>,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    respond(&state, "PseudonymService/Create", async {
        state
            .auth
            .check(
                authorization(&headers),
                Operation::CreatePseudonym,
                Some(&namespace),
                d,
            )
            .await?;
        let req: pb::PseudonymServiceCreateRequest = parse_body(&body)?;
        let p = state
            .service
            .create_pseudonym(&namespace, &req.original_value, d)
            .await?;
        Ok(pb::PseudonymServiceCreateResponse {
            pseudonym: Some(ps_api::to_proto(p, true)),
        })
    })
    .await
}

/// `{"originalValue": …, "mode": "ERASURE_MODE_DELETE" | "ERASURE_MODE_ANONYMIZE"}`.
async fn erase_pseudonym(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(namespace): Path<String>,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let call = async {
        let req: pb::PseudonymServiceEraseRequest = parse_body(&body)?;
        let how = ps_api::erasure_mode(req.mode)?;
        state
            .service
            .erase(&namespace, &req.original_value, how, d)
            .await?;
        Ok(pb::PseudonymServiceEraseResponse {})
    };
    let audited = state.auth.audited(
        authorization(&headers),
        Operation::ErasePseudonym,
        &namespace,
        d,
        call,
        |_| 1,
    );
    respond(&state, "PseudonymService/Erase", audited).await
}

async fn get_pseudonym(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((namespace, pseudonym)): Path<(String, String)>,
) -> Response {
    let d = state.deadline(None);
    let call = async {
        let p = state
            .service
            .get_pseudonym(&namespace, &pseudonym, d)
            .await?;
        Ok(pb::PseudonymServiceGetResponse {
            pseudonym: Some(ps_api::to_proto(p, true)),
        })
    };
    let audited = state.auth.audited(
        authorization(&headers),
        Operation::GetPseudonym,
        &namespace,
        d,
        call,
        |_| 1,
    );
    respond(&state, "PseudonymService/Get", audited).await
}

async fn list_pseudonyms(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(namespace): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let d = state.deadline(None);
    let call = async {
        let param = |camel: &str, snake: &str| query.get(camel).or_else(|| query.get(snake));
        let page_size = match param("pageSize", "page_size") {
            None => 0,
            Some(raw) => raw.parse::<i32>().map_err(|_| {
                Error::invalid_argument(format!("pageSize must be an integer, got {raw:?}"))
            })?,
        };
        let include_total_size =
            match param("includeTotalSize", "include_total_size").map(String::as_str) {
                None | Some("false") => false,
                Some("true") => true,
                Some(raw) => {
                    return Err(Error::invalid_argument(format!(
                        "includeTotalSize must be true or false, got {raw:?}"
                    )))
                }
            };
        let token = param("pageToken", "page_token")
            .cloned()
            .unwrap_or_default();
        let page = state
            .service
            .list_pseudonyms(&namespace, page_size, &token, include_total_size, d)
            .await?;
        Ok(ps_api::list_response(namespace.clone(), page))
    };
    let audited = state.auth.audited(
        authorization(&headers),
        Operation::ListPseudonyms,
        &namespace,
        d,
        call,
        |r: &pb::PseudonymServiceListResponse| r.pseudonyms.len() as u64,
    );
    respond(&state, "PseudonymService/List", audited).await
}
