//! An S3-compatible bucket, by upstream's `S3__*` settings: AWS S3, MinIO,
//! Ceph RGW or Garage.
//!
//! Requests are signed by our own SigV4 (`storage::sigv4`, checked against
//! AWS's and botocore's signatures) and S3's XML is read with `quick-xml`
//! (`storage::xml`): a dozen calls do not need an SDK, and `rusty-s3` would
//! cost more than the lines it saves (measured in docs/object-storage.md). Every request has a
//! deadline — a connection within [`CONNECT_TIMEOUT`], an answer within
//! [`REQUEST_TIMEOUT`] (more for a large body), a read's next bytes within
//! [`READ_IDLE_TIMEOUT`] — so a bucket that is paused or unreachable is
//! `Unavailable` within seconds and the runner retries, rather than hanging.
//!
//! Errors are classified by S3's status and error code: 5xx, 429, `SlowDown`
//! and a dropped connection are transient; `NoSuchUpload` and `InvalidPart`
//! are their own, since a completion may find its upload completed already or
//! a part's tag changed; a TLS failure and `NoSuchBucket` are refused with
//! their cause (waiting mends neither); anything else is refused, naming S3's
//! code and never a credential.
//!
//! Where AWS is stricter than the stores we test on, the client does as AWS
//! requires: an empty body is sent with `Content-Length: 0`, temporary
//! credentials with their session token.
//!
//! Here: each [`ObjectStore`] call as S3 operations.
//! `config`: the settings, checked. `credentials`: a key pair, or a role's
//! temporary credentials from STS, renewed. `request`: one request signed,
//! sent under its deadline, its answer classified. `rules`: the lifecycle and
//! CORS rules applied at start-up.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::{header, Method, StatusCode};

pub use self::config::S3Config;
use self::{
    config::Layout,
    request::{idle_limited, Deadline, Payload},
};
use super::{
    sigv4::{self, Signer},
    xml, ByteStream, ListedPart, ObjectStore, StorageError, Transfer,
};
use vfps_aws::credentials::Provider;
pub use vfps_aws::{
    credentials::{sts_endpoint, CredentialSource, WebIdentity},
    sigv4::Credentials,
};

/// A bucket that does not accept a connection within this is down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// From sending a request to the last byte of its answer (a read: to its
/// headers), for a request without a large body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Added to [`REQUEST_TIMEOUT`] per MiB sent, so a part still goes through
/// at a slow 512 KiB/s.
const TIMEOUT_PER_MIB: Duration = Duration::from_secs(2);
/// A read's longest wait for its next bytes: a stalled bucket mid-stream.
pub const READ_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Assembling a large object's parts may take S3 a while.
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(60);

/// Parts of an upload streamed through vfps: 10 GiB in 1280 parts, within
/// S3's 10,000 (larger for a larger limit: `multipart::stream_part_bytes`).
const STREAM_PART_BYTES: usize = 8 * 1024 * 1024;

/// The deadlines of one bucket's requests.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    request: Duration,
    read_idle: Duration,
    complete: Duration,
}

/// An S3-compatible bucket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct S3 {
    http: reqwest::Client,
    signer: Signer,
    /// The credentials each request is signed with (temporary ones renewed).
    credentials: Arc<Provider>,
    /// `http` or `https`.
    scheme: &'static str,
    /// Where requests go, `host[:port]`; the bucket's name in front with
    /// virtual-host addressing.
    host: String,
    /// Before every key's path: `/<bucket>` path-style, nothing virtual-host.
    bucket_path: String,
    bucket: String,
    /// The endpoint as configured, for logs.
    service_url: String,
    object_retention_days: u32,
    allowed_origins: Vec<String>,
    /// Keys per listing page, and so per DeleteObjects (S3's maximum: 1000).
    list_page_keys: u32,
    timeouts: Timeouts,
    /// TLS handshakes reset in a row (see `request::handshake_reset`).
    handshake_resets: Arc<std::sync::atomic::AtomicU32>,
}

impl S3 {
    /// Checks `config` and makes the client; an error names the bad setting
    /// (never the secret key).
    pub fn new(config: S3Config) -> Result<S3, String> {
        let Layout {
            scheme,
            host,
            bucket_path,
        } = config.layout()?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // A redirect (a bucket in another region) would not carry the
            // signature; its error is clearer.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client for S3: {e}"))?;
        let credentials = Arc::new(Provider::new(
            config.credentials,
            http.clone(),
            config.presigned_url_expiry,
        ));
        Ok(S3 {
            http,
            signer: Signer::new(&config.region),
            credentials,
            scheme,
            host,
            bucket_path,
            bucket: config.bucket,
            service_url: config.service_url,
            object_retention_days: config.object_retention_days,
            allowed_origins: config.allowed_origins,
            list_page_keys: 1000,
            timeouts: Timeouts {
                request: REQUEST_TIMEOUT,
                read_idle: READ_IDLE_TIMEOUT,
                complete: COMPLETE_TIMEOUT,
            },
            handshake_resets: Arc::new(std::sync::atomic::AtomicU32::new(0)),
        })
    }

    /// Lists (and deletes) `keys` at a time (1 to 1000) rather than 1000, so
    /// tests cross pages with a few objects.
    pub fn with_list_page_keys(mut self, keys: u32) -> Self {
        self.list_page_keys = keys.clamp(1, 1000);
        self
    }

    /// The path of `key`, encoded; keys are relative, without `.` or `..`
    /// segments (an HTTP client would resolve them).
    fn key_path(&self, key: &str) -> Result<String, StorageError> {
        let plain = !key.is_empty()
            && !key.starts_with('/')
            && key.split('/').all(|s| s != "." && s != "..");
        if !plain {
            return Err(StorageError::Refused(format!("invalid object key {key:?}")));
        }
        Ok(format!("{}/{}", self.bucket_path, sigv4::encode_key(key)))
    }

    /// The path of the bucket itself.
    fn bucket_root(&self) -> String {
        if self.bucket_path.is_empty() {
            "/".to_owned()
        } else {
            self.bucket_path.clone()
        }
    }

    /// HeadBucket: whether the bucket is there and these credentials may
    /// list it; an error says which is not so.
    async fn head_bucket(&self) -> Result<(), StorageError> {
        let what = "HeadBucket";
        let response = self.send_raw(self.call(Method::HEAD, what, None)).await?;
        let bucket = &self.bucket;
        match response.status() {
            StatusCode::NOT_FOUND => Err(StorageError::Refused(format!(
                "S3 {what} answered 404 Not Found: the bucket {bucket:?} does not exist (S3__Bucket)"
            ))),
            // HEAD has no body to say why: a wrong secret key, an expired
            // session token and a clock off by minutes are refused with 403
            // as a missing permission is.
            StatusCode::FORBIDDEN => Err(StorageError::Refused(format!(
                "S3 {what} answered 403 Forbidden on the bucket {bucket:?}: access denied: a wrong \
                 key (S3__AccessKey, S3__SecretKey), an expired session token, this machine's clock \
                 minutes off, or the credentials lack s3:ListBucket on the bucket, which vfps needs"
            ))),
            _ => self.check(what, response).await.map(drop),
        }
    }

    /// DeleteObjects: `keys` (at most 1000) in one request.
    async fn delete_objects(&self, keys: &[String]) -> Result<(), StorageError> {
        let mut body = String::from("<Delete><Quiet>true</Quiet>");
        for key in keys {
            body.push_str(&format!("<Object><Key>{}</Key></Object>", xml::escape(key)));
        }
        body.push_str("</Delete>");
        let call = self
            .call(Method::POST, "DeleteObjects", None)
            .query("delete", "")
            .payload(Payload::Signed(body.into()), self.timeouts.request);
        let answer = self.send_for_text(call).await?;
        // Quiet: only the keys that could not be deleted are listed.
        match xml::elements(&answer, "Error").first() {
            None => Ok(()),
            Some(first) => {
                let failed = xml::elements(&answer, "Error").len();
                Err(self.s3_error(
                    &format!("DeleteObjects ({failed} of {} keys)", keys.len()),
                    StatusCode::OK,
                    first,
                ))
            }
        }
    }
}

#[async_trait]
impl ObjectStore for S3 {
    fn describe(&self) -> String {
        format!("the S3 bucket {} at {}", self.bucket, self.service_url)
    }

    async fn configure(&self) -> Result<(), StorageError> {
        // A misspelt S3__Bucket or a missing s3:ListBucket is said at
        // start-up, not at the first job (and even with no rule to apply).
        self.head_bucket().await?;
        // Each applied whatever became of the other, as upstream does: a
        // permission missing for one should not cost the other.
        let lifecycle = if self.object_retention_days == 0 {
            tracing::info!(
                "S3__ObjectRetentionDays is 0: the bucket's lifecycle rules are left alone"
            );
            Ok(())
        } else {
            self.put_lifecycle().await
        };
        let cors = if self.allowed_origins.is_empty() {
            tracing::info!("S3__AllowedOrigins is empty: the bucket's CORS rules are left alone");
            Ok(())
        } else {
            self.put_cors().await
        };
        lifecycle.and(cors)
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let what = "HeadObject";
        let response = self
            .send_raw(self.call(Method::HEAD, what, Some(key)))
            .await?;
        match response.status() {
            // An answer to HEAD has no body to tell a missing key from a
            // missing bucket: the bucket is asked.
            StatusCode::NOT_FOUND => {
                self.head_bucket().await?;
                return Ok(None);
            }
            // S3 answers 403 for a missing key when the credentials lack
            // s3:ListBucket; vfps needs that permission anyway (to delete a
            // job's files), so 403 is taken as refused, saying both.
            StatusCode::FORBIDDEN => {
                return Err(StorageError::Refused(format!(
                    "S3 {what} answered 403 Forbidden: the credentials may not read {key}, or it does not exist and they lack s3:ListBucket on the bucket {} (vfps needs both)",
                    self.bucket
                )))
            }
            _ => {}
        }
        let response = self.check(what, response).await?;
        // Not `content_length()`: an answer to HEAD has no body, and says 0.
        response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| StorageError::Refused(format!("S3 {what} answered no size")))
    }

    async fn read(&self, key: &str, offset: u64) -> Result<ByteStream, StorageError> {
        let what = "GetObject";
        let mut call = self
            .call(Method::GET, what, Some(key))
            .deadline(Deadline::Headers(self.timeouts.request));
        if offset > 0 {
            call.headers.push(("range", format!("bytes={offset}-")));
        }
        let response = self.send_raw(call).await?;
        if offset > 0 && response.status() == StatusCode::RANGE_NOT_SATISFIABLE {
            // At or past the end: nothing left, as from a file.
            return Ok(Box::pin(futures::stream::empty()));
        }
        let response = self.check(what, response).await?;
        if offset > 0 && response.status() != StatusCode::PARTIAL_CONTENT {
            return Err(StorageError::Refused(format!(
                "S3 {what} answered {} to a ranged read, not 206",
                response.status()
            )));
        }
        Ok(idle_limited(
            response.bytes_stream(),
            self.timeouts.read_idle,
        ))
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        // An empty body too is sent with its length (see `send_raw`).
        let limit = self.timeout_for(body.len());
        let call = self
            .call(Method::PUT, "PutObject", Some(key))
            .payload(Payload::Unsigned(body), limit);
        self.send(call).await?;
        Ok(())
    }

    async fn put_stream(
        &self,
        key: &str,
        body: ByteStream,
        limit: u64,
    ) -> Result<u64, StorageError> {
        self.stream_upload(key, body, limit).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        // S3 answers 204 for an absent key; some stores 404 `NoSuchKey`. A
        // 404 `NoSuchBucket` stays an error (`s3_error` refuses it).
        match self
            .send(self.call(Method::DELETE, "DeleteObject", Some(key)))
            .await
        {
            Ok(_) | Err(StorageError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<(), StorageError> {
        let mut token: Option<String> = None;
        loop {
            let mut call = self
                .call(Method::GET, "ListObjectsV2", None)
                .query("list-type", "2")
                .query("prefix", prefix)
                .query("max-keys", &self.list_page_keys.to_string());
            if let Some(token) = &token {
                call = call.query("continuation-token", token);
            }
            let page = self.send_for_text(call).await?;
            let keys: Vec<String> = xml::elements(&page, "Contents")
                .iter()
                .filter_map(|c| xml::text(c, "Key"))
                .collect();
            if !keys.is_empty() {
                self.delete_objects(&keys).await?;
            }
            if xml::text(&page, "IsTruncated").as_deref() != Some("true") {
                return Ok(());
            }
            token =
                match xml::text(&page, "NextContinuationToken") {
                    Some(next) if !next.is_empty() => Some(next),
                    _ => return Err(StorageError::Refused(
                        "S3 ListObjectsV2 answered a truncated page without a continuation token"
                            .into(),
                    )),
                };
        }
    }

    async fn start_multipart(&self, key: &str) -> Result<String, StorageError> {
        let what = "CreateMultipartUpload";
        let call = self
            .call(Method::POST, what, Some(key))
            .query("uploads", "");
        let answer = self.send_for_text(call).await?;
        xml::text(&answer, "UploadId")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| StorageError::Refused(format!("S3 {what} answered no UploadId")))
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StorageError> {
        let what = "UploadPart";
        let limit = self.timeout_for(body.len());
        let call = self
            .call(Method::PUT, what, Some(key))
            .query("partNumber", &number.to_string())
            .query("uploadId", upload_id)
            .payload(Payload::Unsigned(body), limit);
        let response = self.send(call).await?;
        response
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| StorageError::Refused(format!("S3 {what} answered no ETag")))
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<ListedPart>, StorageError> {
        self.list_upload_parts(key, upload_id).await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StorageError> {
        let what = "CompleteMultipartUpload";
        let mut body = String::from("<CompleteMultipartUpload>");
        for (number, etag) in parts {
            body.push_str(&format!(
                "<Part><PartNumber>{number}</PartNumber><ETag>{}</ETag></Part>",
                xml::escape(etag)
            ));
        }
        body.push_str("</CompleteMultipartUpload>");
        let call = self
            .call(Method::POST, what, Some(key))
            .query("uploadId", upload_id)
            .payload(Payload::Signed(body.into()), self.timeouts.complete);
        let answer = self.send_for_text(call).await?;
        // S3 may answer 200 and an error in the body (it failed after it
        // began answering).
        if xml::elements(&answer, "Error").is_empty() {
            Ok(())
        } else {
            Err(self.s3_error(what, StatusCode::OK, &answer))
        }
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StorageError> {
        let call = self
            .call(Method::DELETE, "AbortMultipartUpload", Some(key))
            .query("uploadId", upload_id);
        match self.send(call).await {
            Ok(_) | Err(StorageError::NoSuchUpload) | Err(StorageError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn presigns(&self) -> bool {
        true
    }

    async fn presign(
        &self,
        transfer: Transfer,
        key: &str,
        expires: Duration,
        download_name: Option<&str>,
    ) -> Result<Option<String>, StorageError> {
        let path = self.key_path(key)?;
        let (method, query) = match transfer {
            Transfer::Upload => ("PUT", Vec::new()),
            Transfer::Download => (
                "GET",
                download_name
                    .map(|name| {
                        vec![(
                            "response-content-disposition".to_owned(),
                            content_disposition(name),
                        )]
                    })
                    .unwrap_or_default(),
            ),
        };
        let request = sigv4::Request {
            method,
            host: &self.host,
            path: &path,
            query: &query,
            headers: &[],
        };
        let credentials = self.credentials.current().await?;
        let signed = self
            .signer
            .presign(&credentials, &request, expires, SystemTime::now())
            .map_err(|e| StorageError::Refused(format!("{e} (S3__PresignedUrlExpiry)")))?;
        Ok(Some(format!(
            "{}://{}{path}?{signed}",
            self.scheme, self.host
        )))
    }
}

/// `Content-Disposition` for a download saved as `name` (RFC 6266): an
/// ASCII fallback `filename` for old clients, and the exact name as
/// `filename*` in RFC 5987's encoding. Nothing in either can break the header
/// (no quote, backslash, control character or non-ASCII raw).
pub fn content_disposition(name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| match c {
            // `%` too: some browsers percent-decode the fallback.
            ' '..='~' if c != '"' && c != '\\' && c != '%' => c,
            _ => '_',
        })
        .collect();
    // RFC 5987's attr-char: letters, digits and !#$&+-.^_`|~ stay.
    const ATTR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    let exact = percent_encoding::utf8_percent_encode(name, ATTR);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}")
}

mod config;
mod multipart;
mod request;
mod rules;
#[cfg(test)]
mod tests;
