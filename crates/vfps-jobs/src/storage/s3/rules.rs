//! The bucket's rules vfps applies at start-up, as upstream does: a
//! lifecycle rule expiring job files, and a CORS rule for browsers using the
//! presigned addresses. Each replaces the bucket's whole configuration of its
//! kind, so the bucket is meant for vfps alone.

use reqwest::Method;

use super::{request::Payload, S3};
use crate::storage::{xml, StorageError, PREFIX};

impl S3 {
    /// PutBucketLifecycleConfiguration: objects under `csv-jobs/` (and
    /// uploads left unfinished there) expire after the retention days.
    pub(super) async fn put_lifecycle(&self) -> Result<(), StorageError> {
        let days = self.object_retention_days;
        let body = format!(
            "<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule>\
             <ID>vfps-csv-jobs-retention</ID><Filter><Prefix>{PREFIX}</Prefix></Filter>\
             <Status>Enabled</Status><Expiration><Days>{days}</Days></Expiration>\
             <AbortIncompleteMultipartUpload><DaysAfterInitiation>{days}</DaysAfterInitiation>\
             </AbortIncompleteMultipartUpload></Rule></LifecycleConfiguration>"
        );
        let call = self
            .call(Method::PUT, "PutBucketLifecycleConfiguration", None)
            .query("lifecycle", "")
            .payload(Payload::Signed(body.into()), self.timeouts.request);
        self.send(call).await?;
        tracing::info!(bucket = %self.bucket, prefix = PREFIX, days, "S3 lifecycle rule applied: CSV jobs' files expire");
        Ok(())
    }

    /// PutBucketCors: browsers on the allowed origins may GET and PUT the
    /// presigned addresses.
    pub(super) async fn put_cors(&self) -> Result<(), StorageError> {
        let origins: String = self
            .allowed_origins
            .iter()
            .map(|o| format!("<AllowedOrigin>{}</AllowedOrigin>", xml::escape(o)))
            .collect();
        let body = format!(
            "<CORSConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><CORSRule>\
             <ID>vfps-csv-jobs-cors</ID>{origins}<AllowedMethod>GET</AllowedMethod>\
             <AllowedMethod>PUT</AllowedMethod><AllowedMethod>HEAD</AllowedMethod>\
             <AllowedHeader>*</AllowedHeader><ExposeHeader>ETag</ExposeHeader>\
             <MaxAgeSeconds>3600</MaxAgeSeconds></CORSRule></CORSConfiguration>"
        );
        let call = self
            .call(Method::PUT, "PutBucketCors", None)
            .query("cors", "")
            .payload(Payload::Signed(body.into()), self.timeouts.request);
        self.send(call).await?;
        tracing::info!(bucket = %self.bucket, origins = ?self.allowed_origins, "S3 CORS rule applied");
        Ok(())
    }
}
