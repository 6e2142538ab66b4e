//! Where a job's files live: an S3-compatible bucket (upstream's `S3__*`
//! settings) or, by default, a local folder.
//!
//! Every object of a job is under `csv-jobs/<id>/`: `input.csv` (uploaded by
//! the client), `output.csv` (made by the runner as a multipart upload, so it
//! appears under its name only whole) and `segments/…` (the output written
//! since the last part, kept durable at each checkpoint).
//!
//! Both stores answer the same [`ObjectStore`] calls, so one runner serves
//! both; only how a client transfers a file differs: straight to the bucket
//! through presigned addresses, or through vfps's HTTP port to the folder.

use std::{pin::Pin, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

pub mod folder;
pub mod s3;
use vfps_aws::{sigv4, xml};

/// The bytes of an object, in chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, StorageError>> + Send>>;

/// The prefix of every object of every job.
pub const PREFIX: &str = "csv-jobs/";

/// The key of a job's uploaded input.
pub fn input_key(job_id: &str) -> String {
    format!("{PREFIX}{job_id}/input.csv")
}

/// The key of a job's finished output.
pub fn output_key(job_id: &str) -> String {
    format!("{PREFIX}{job_id}/output.csv")
}

/// The key of one durable piece of a job's unfinished output, unique to the
/// runner (its epoch) and the checkpoint, so a fenced runner's late write can
/// never replace a piece another runner's checkpoint refers to.
pub fn segment_key(job_id: &str, epoch: i64, seq: u64) -> String {
    format!("{PREFIX}{job_id}/segments/{epoch:010}-{seq:08}")
}

/// Every object of a job.
pub fn job_prefix(job_id: &str) -> String {
    format!("{PREFIX}{job_id}/")
}

/// A transfer a client makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    Upload,
    Download,
}

/// Why an object operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The store did not answer, or answered that it cannot now (5xx, a
    /// connection refused or reset): worth retrying.
    #[error("the object store is unavailable: {0}")]
    Unavailable(String),
    #[error("no such object: {0}")]
    NotFound(String),
    /// The multipart upload was completed or aborted already.
    #[error("no such multipart upload")]
    NoSuchUpload,
    /// A completion named a part the upload does not hold under that tag:
    /// it was never uploaded, or uploaded again since (with SSE-KMS the same
    /// bytes get a new tag each time).
    #[error("a part is not the one named: {0}")]
    InvalidPart(String),
    #[error("the object is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// Anything else (refused credentials, a bad request): not retried.
    #[error("the object store refused the request: {0}")]
    Refused(String),
}

/// An AWS call's failure (the credentials' STS), as the store's.
impl From<vfps_aws::AwsError> for StorageError {
    fn from(e: vfps_aws::AwsError) -> Self {
        match e {
            vfps_aws::AwsError::Unavailable(text) => Self::Unavailable(text),
            vfps_aws::AwsError::Refused(text) => Self::Refused(text),
        }
    }
}

impl StorageError {
    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// An object store, as a job needs it.
#[async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// What it is, for logs and errors (no credential).
    fn describe(&self) -> String;

    /// Checks the store and applies what it needs at start-up (S3: that the
    /// bucket is there and may be listed, the lifecycle rule that expires
    /// `csv-jobs/` and the CORS rule for browsers).
    async fn configure(&self) -> Result<(), StorageError>;

    /// The object's size, `None` when it does not exist.
    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError>;

    /// The object's bytes from `offset` to its end.
    async fn read(&self, key: &str, offset: u64) -> Result<ByteStream, StorageError>;

    /// Stores a small object whole.
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError>;

    /// Stores an object streamed from a client, refusing it past `limit` bytes
    /// (nothing is kept then); answers its size.
    async fn put_stream(
        &self,
        key: &str,
        body: ByteStream,
        limit: u64,
    ) -> Result<u64, StorageError>;

    /// Deletes an object; an absent one is no error.
    async fn delete(&self, key: &str) -> Result<(), StorageError>;

    /// Deletes every object under `prefix`.
    async fn delete_prefix(&self, prefix: &str) -> Result<(), StorageError>;

    /// Starts a multipart upload to `key`; answers its id.
    async fn start_multipart(&self, key: &str) -> Result<String, StorageError>;

    /// Uploads part `number` (1 to [`MAX_PARTS`]); answers its entity tag.
    /// The same bytes uploaded again as the same part replace it, and may get
    /// another tag (S3 with SSE-KMS: tags are not the bytes' MD5 then).
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StorageError>;

    /// The parts an unfinished upload holds now, by number.
    async fn list_parts(&self, key: &str, upload_id: &str)
        -> Result<Vec<ListedPart>, StorageError>;

    /// Assembles the parts, in order, into the object at `key`, atomically.
    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StorageError>;

    /// Drops an unfinished multipart upload and its parts.
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StorageError>;

    /// Whether clients transfer files straight to the store through
    /// presigned addresses (else through vfps).
    fn presigns(&self) -> bool;

    /// A presigned address for a client's transfer of `key`, valid for
    /// `expires`; `download_name` names the saved file. `None`: the store
    /// cannot presign, and transfers go through vfps. Async: temporary
    /// credentials may need renewing first.
    async fn presign(
        &self,
        transfer: Transfer,
        key: &str,
        expires: Duration,
        download_name: Option<&str>,
    ) -> Result<Option<String>, StorageError>;
}

/// One part of an unfinished upload, as the store lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedPart {
    pub number: u32,
    pub etag: String,
    pub bytes: u64,
}

/// Smallest part of a multipart upload but the last (S3's rule).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;

/// Most parts of one multipart upload (S3's rule): part 10,001 is refused.
pub const MAX_PARTS: u32 = 10_000;
