//! One request to the bucket: signed, sent under its deadline, and its
//! answer read as S3 means it — success, or an error classified by status
//! and code (transient, `NoSuchUpload`, not found, refused), naming S3's code
//! and never a credential.

use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use reqwest::{header, Method, Response, StatusCode};

use vfps_aws::AwsError;

use super::{S3, TIMEOUT_PER_MIB};
use crate::storage::{sigv4, xml, ByteStream, StorageError};

/// An error body read past this is cut (S3's are a few hundred bytes).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// S3 error codes that say "not now" whatever their status.
const TRANSIENT_CODES: &[&str] = &[
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "OperationAborted",
];

impl S3 {
    /// A request without a body, answered within the request timeout.
    pub(super) fn call<'a>(
        &self,
        method: Method,
        what: &'static str,
        key: Option<&'a str>,
    ) -> Call<'a> {
        Call {
            method,
            what,
            key,
            query: Vec::new(),
            headers: Vec::new(),
            body: Payload::Empty,
            deadline: Deadline::Whole(self.timeouts.request),
        }
    }

    pub(super) fn timeout_for(&self, body_bytes: usize) -> Duration {
        self.timeouts.request + TIMEOUT_PER_MIB * (body_bytes / (1024 * 1024)) as u32
    }

    /// Signs and sends `call`; answers whatever S3 answered.
    pub(super) async fn send_raw(&self, call: Call<'_>) -> Result<Response, StorageError> {
        let path = match call.key {
            Some(key) => self.key_path(key)?,
            None => self.bucket_root(),
        };
        let mut headers = call.headers;
        let writes = call.method == Method::PUT || call.method == Method::POST;
        let (payload_hash, body) = match call.body {
            Payload::Empty => (sigv4::payload_hash(b""), None),
            Payload::Signed(body) => {
                headers.push(("content-md5", content_md5(&body)));
                (sigv4::payload_hash(&body), Some(body))
            }
            Payload::Unsigned(body) => {
                headers.push(("content-md5", content_md5(&body)));
                (sigv4::UNSIGNED_PAYLOAD.to_owned(), Some(body))
            }
        };
        let credentials = self.credentials.current().await?;
        let signed = self.signer.sign(
            &credentials,
            &sigv4::Request {
                method: call.method.as_str(),
                host: &self.host,
                path: &path,
                query: &call.query,
                headers: &headers,
            },
            &payload_hash,
            SystemTime::now(),
        );
        let query = query_string(&call.query);
        let url = format!("{}://{}{path}{query}", self.scheme, self.host);
        let mut request = self
            .http
            .request(call.method, url)
            .header(header::HOST, &self.host);
        for (name, value) in headers.iter().chain(signed.iter()) {
            request = request.header(*name, value);
        }
        if writes && body.as_ref().is_none_or(|b| b.is_empty()) {
            // The HTTP client sends no length for an empty body, and AWS S3
            // answers a PUT or POST without one `411 MissingContentLength`
            // (Garage and MinIO forgive it): an empty object, the empty last
            // part of an empty output, and `POST ?uploads` all need it.
            request = request.header(header::CONTENT_LENGTH, "0");
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let what = call.what;
        let sent = match call.deadline {
            Deadline::Whole(limit) => request.timeout(limit).send().await,
            Deadline::Headers(limit) => match tokio::time::timeout(limit, request.send()).await {
                Ok(sent) => sent,
                Err(_) => {
                    return Err(StorageError::Unavailable(format!(
                        "S3 {what}: no answer within {limit:?}"
                    )))
                }
            },
        };
        self.handshakes(sent, what)
    }

    /// `sent`'s error as a [`StorageError`]; a TLS handshake reset
    /// [`MAX_HANDSHAKE_RESETS`] times in a row is refused, not retried for
    /// ever (an address that does not speak TLS will not start to).
    fn handshakes(
        &self,
        sent: reqwest::Result<Response>,
        what: &str,
    ) -> Result<Response, StorageError> {
        use std::sync::atomic::Ordering;
        match sent {
            Ok(response) => {
                self.handshake_resets.store(0, Ordering::Relaxed);
                Ok(response)
            }
            Err(e) => {
                let reset = handshake_reset(&e);
                let error = transport(what, e);
                if !reset {
                    return Err(error);
                }
                let in_a_row = self.handshake_resets.fetch_add(1, Ordering::Relaxed) + 1;
                match error {
                    StorageError::Unavailable(text) if in_a_row >= MAX_HANDSHAKE_RESETS => {
                        Err(StorageError::Refused(format!(
                            "{text}; {in_a_row} handshakes in a row were reset"
                        )))
                    }
                    other => Err(other),
                }
            }
        }
    }

    /// Sends `call`; an answer other than success is an error.
    pub(super) async fn send(&self, call: Call<'_>) -> Result<Response, StorageError> {
        let what = call.what;
        let response = self.send_raw(call).await?;
        self.check(what, response).await
    }

    /// Sends `call` and reads its whole (small) answer.
    pub(super) async fn send_for_text(&self, call: Call<'_>) -> Result<String, StorageError> {
        let what = call.what;
        let response = self.send(call).await?;
        let body = response.bytes().await.map_err(|e| transport(what, e))?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `response` if it is a success, else its error.
    pub(super) async fn check(
        &self,
        what: &'static str,
        response: Response,
    ) -> Result<Response, StorageError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        // A redirect is not followed (the signature would not go with it):
        // AWS sends one for a bucket in another region, and says which.
        let region = response
            .headers()
            .get("x-amz-bucket-region")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = tokio::time::timeout(self.timeouts.request, read_capped(response))
            .await
            .unwrap_or_default();
        match self.s3_error(what, status, &body) {
            StorageError::Refused(text) if status.is_redirection() => {
                Err(StorageError::Refused(match region {
                    Some(region) => format!(
                        "{text}: the bucket is in region {region:?}; set S3__Region and S3__ServiceUrl for it"
                    ),
                    None => format!("{text}: the bucket is elsewhere; check S3__ServiceUrl and S3__Region"),
                }))
            }
            other => Err(other),
        }
    }

    /// The error an S3 answer says, by its status and `<Code>`.
    pub(super) fn s3_error(&self, what: &str, status: StatusCode, body: &str) -> StorageError {
        let code = xml::text(body, "Code").unwrap_or_default();
        let mut text = format!("S3 {what} answered {status}");
        if !code.is_empty() {
            text.push_str(&format!(": {code}"));
        }
        if let Some(message) = xml::text(body, "Message").filter(|m| !m.is_empty()) {
            text.push_str(&format!(" ({message})"));
        }
        if self.credentials.revealed_in(&text) {
            text = format!("S3 {what} answered {status}: {code} (its message withheld)");
        }
        if code == "NoSuchUpload" {
            StorageError::NoSuchUpload
        } else if code == "NoSuchBucket" {
            // Not "object absent": a misspelt S3__Bucket must not pass
            // unnoticed as a missing file.
            StorageError::Refused(format!(
                "{text}: the bucket {:?} does not exist (S3__Bucket)",
                self.bucket
            ))
        } else if code == "InvalidPart" {
            StorageError::InvalidPart(text)
        } else if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || TRANSIENT_CODES.contains(&code.as_str())
        {
            StorageError::Unavailable(text)
        } else if status == StatusCode::NOT_FOUND {
            StorageError::NotFound(text)
        } else {
            StorageError::Refused(text)
        }
    }
}

/// A request's body and how it is signed.
pub(super) enum Payload {
    Empty,
    /// Hashed into the signature: small XML.
    Signed(Bytes),
    /// Not hashed (an object's bytes); S3 checks it against its Content-MD5.
    Unsigned(Bytes),
}

/// How long a request may take.
pub(super) enum Deadline {
    /// Until its answer's last byte.
    Whole(Duration),
    /// Until its answer's headers; the body is a stream read at its
    /// consumer's pace.
    Headers(Duration),
}

/// One request to the bucket.
pub(super) struct Call<'a> {
    pub(super) method: Method,
    /// S3's name of the operation, for errors.
    pub(super) what: &'static str,
    /// The object, or `None` for the bucket.
    pub(super) key: Option<&'a str>,
    pub(super) query: Vec<(String, String)>,
    pub(super) headers: Vec<(&'static str, String)>,
    pub(super) body: Payload,
    pub(super) deadline: Deadline,
}

impl<'a> Call<'a> {
    pub(super) fn query(mut self, name: &str, value: &str) -> Self {
        self.query.push((name.to_owned(), value.to_owned()));
        self
    }

    pub(super) fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = deadline;
        self
    }

    pub(super) fn payload(mut self, body: Payload, limit: Duration) -> Self {
        self.body = body;
        self.deadline = Deadline::Whole(limit);
        self
    }
}

/// `?` and the query, encoded as it was signed; nothing for none.
fn query_string(query: &[(String, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = query
        .iter()
        .map(|(name, value)| format!("{}={}", sigv4::encode(name), sigv4::encode(value)))
        .collect();
    format!("?{}", pairs.join("&"))
}

fn content_md5(body: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(body))
}

/// A failure to reach S3 or to hear it out (see [`vfps_aws::transport`]),
/// named as S3's unless it was STS's.
pub(super) fn transport(what: &str, e: reqwest::Error) -> StorageError {
    let prefix = if what.starts_with("STS") { "" } else { "S3 " };
    match vfps_aws::transport(what, e) {
        AwsError::Unavailable(text) => StorageError::Unavailable(format!("{prefix}{text}")),
        AwsError::Refused(text) => StorageError::Refused(format!("{prefix}{text}")),
    }
}

pub(super) use vfps_aws::handshake_reset;

/// TLS handshakes reset in a row before the endpoint is refused.
pub(super) const MAX_HANDSHAKE_RESETS: u32 = 3;

/// Up to [`MAX_ERROR_BODY_BYTES`] of an answer, as text.
async fn read_capped(response: Response) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BODY_BYTES {
            body.truncate(MAX_ERROR_BODY_BYTES);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// An answer's body as a [`ByteStream`] that fails (transiently) when no
/// bytes come for `idle` while its consumer waits for them, and ends after
/// its first error.
pub(super) fn idle_limited(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Duration,
) -> ByteStream {
    let body = Box::pin(body);
    Box::pin(futures::stream::unfold(
        Some(body),
        move |state| async move {
            let mut body = state?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(transport("GetObject", e)), None)),
                Err(_) => Some((
                    Err(StorageError::Unavailable(format!(
                        "S3 GetObject: no bytes for {idle:?}"
                    ))),
                    None,
                )),
            }
        },
    ))
}
