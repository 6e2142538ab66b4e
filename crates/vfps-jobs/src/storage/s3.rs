//! An S3-compatible bucket, by upstream's `S3__*` settings.

use std::time::Duration;

/// `S3__*`, as upstream names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `S3__ServiceUrl`: the endpoint, e.g. `http://garage:3900`.
    pub service_url: String,
    /// `S3__AccessKey`.
    pub access_key: String,
    /// `S3__SecretKey`: never logged.
    pub secret_key: String,
    /// `S3__Bucket`.
    pub bucket: String,
    /// `S3__Region` (`us-east-1`).
    pub region: String,
    /// `S3__ForcePathStyle` (true): `https://host/bucket/key` rather than
    /// `https://bucket.host/key`.
    pub force_path_style: bool,
    /// `S3__PresignedUrlExpiry` (15 minutes).
    pub presigned_url_expiry: Duration,
    /// `S3__ObjectRetentionDays` (30): the lifecycle rule expiring `csv-jobs/`;
    /// 0 leaves the bucket's lifecycle alone.
    pub object_retention_days: u32,
    /// `S3__AllowedOrigins__N`: the bucket's CORS rule for browsers; empty
    /// leaves the bucket's CORS alone.
    pub allowed_origins: Vec<String>,
}
