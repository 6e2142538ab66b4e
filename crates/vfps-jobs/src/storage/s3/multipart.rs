//! Multipart uploads beyond single calls: an upload streamed through vfps
//! (parts cut from the client's stream, aborted if it fails or is dropped),
//! and an unfinished upload's parts listed page by page.

use bytes::BytesMut;
use futures::StreamExt;
use reqwest::Method;

use super::{S3, STREAM_PART_BYTES};
use crate::storage::{xml, ByteStream, ListedPart, ObjectStore, StorageError, MAX_PARTS};

/// Aborts a multipart upload when dropped before it is completed, so an
/// upload through vfps that fails or is dropped leaves no parts behind.
struct AbortOnDrop {
    store: S3,
    key: String,
    upload_id: Option<String>,
}

impl AbortOnDrop {
    fn id(&self) -> &str {
        self.upload_id.as_deref().unwrap_or_default()
    }

    /// Aborts now, waiting for it.
    async fn abort(mut self) {
        if let Some(id) = self.upload_id.take() {
            if let Err(e) = self.store.abort_multipart(&self.key, &id).await {
                tracing::warn!(error = %e, "cannot abort an upload through vfps; the bucket's lifecycle rule removes it in time");
            }
        }
    }

    fn completed(mut self) {
        self.upload_id = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.upload_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key) = (self.store.clone(), std::mem::take(&mut self.key));
        runtime.spawn(async move {
            if let Err(e) = store.abort_multipart(&key, &id).await {
                tracing::warn!(error = %e, "cannot abort an upload through vfps; the bucket's lifecycle rule removes it in time");
            }
        });
    }
}

impl S3 {
    /// An upload streamed through vfps (see [`ObjectStore::put_stream`]).
    pub(super) async fn stream_upload(
        &self,
        key: &str,
        mut body: ByteStream,
        limit: u64,
    ) -> Result<u64, StorageError> {
        self.key_path(key)?;
        // Up to a part in memory: a small file is one PutObject, a larger one
        // a multipart upload (S3 takes no body of unknown length).
        let part_bytes = stream_part_bytes(limit);
        let mut pending = BytesMut::new();
        let mut size = 0u64;
        let mut upload: Option<AbortOnDrop> = None;
        let mut parts = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            if size > limit {
                if let Some(upload) = upload.take() {
                    upload.abort().await;
                }
                return Err(StorageError::TooLarge { limit });
            }
            pending.extend_from_slice(&chunk);
            while pending.len() >= part_bytes {
                let upload_id = match &upload {
                    Some(upload) => upload.id().to_owned(),
                    None => {
                        let id = self.start_multipart(key).await?;
                        upload = Some(AbortOnDrop {
                            store: self.clone(),
                            key: key.to_owned(),
                            upload_id: Some(id.clone()),
                        });
                        id
                    }
                };
                let number = parts.len() as u32 + 1;
                let part = pending.split_to(part_bytes).freeze();
                let etag = self.put_part(key, &upload_id, number, part).await?;
                parts.push((number, etag));
            }
        }
        match upload {
            None => self.put(key, pending.freeze()).await?,
            Some(upload) => {
                if !pending.is_empty() {
                    let number = parts.len() as u32 + 1;
                    let etag = self
                        .put_part(key, upload.id(), number, pending.freeze())
                        .await?;
                    parts.push((number, etag));
                }
                self.complete_multipart(key, upload.id(), &parts).await?;
                upload.completed();
            }
        }
        Ok(size)
    }

    /// ListParts, every page (see [`ObjectStore::list_parts`]).
    pub(super) async fn list_upload_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<ListedPart>, StorageError> {
        let what = "ListParts";
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut call = self
                .call(Method::GET, what, Some(key))
                .query("uploadId", upload_id)
                .query("max-parts", "1000");
            if let Some(marker) = &marker {
                call = call.query("part-number-marker", marker);
            }
            let page = self.send_for_text(call).await?;
            for part in xml::elements(&page, "Part") {
                let number = xml::text(part, "PartNumber").and_then(|n| n.parse().ok());
                let etag = xml::text(part, "ETag");
                let bytes = xml::text(part, "Size").and_then(|n| n.parse().ok());
                match (number, etag, bytes) {
                    (Some(number), Some(etag), Some(bytes)) => parts.push(ListedPart {
                        number,
                        etag,
                        bytes,
                    }),
                    _ => {
                        return Err(StorageError::Refused(format!(
                            "S3 {what} answered a part without its number, ETag or size"
                        )))
                    }
                }
            }
            if xml::text(&page, "IsTruncated").as_deref() != Some("true") {
                return Ok(parts);
            }
            marker = match xml::text(&page, "NextPartNumberMarker") {
                Some(next) if !next.is_empty() && marker.as_ref() != Some(&next) => Some(next),
                _ => {
                    return Err(StorageError::Refused(format!(
                        "S3 {what} answered a truncated page without a new marker"
                    )))
                }
            };
        }
    }
}

/// The part size of an upload through vfps of at most `limit` bytes: 8 MiB,
/// or more when 10,000 parts of 8 MiB would not hold the limit.
fn stream_part_bytes(limit: u64) -> usize {
    let needed = limit.div_ceil(u64::from(MAX_PARTS));
    usize::try_from(needed)
        .unwrap_or(usize::MAX)
        .max(STREAM_PART_BYTES)
}
