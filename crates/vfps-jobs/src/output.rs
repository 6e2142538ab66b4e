//! A job's output as it is written: whole parts of a multipart upload, and the
//! part being filled kept in memory and made durable, at each checkpoint, as
//! immutable segment objects.
//!
//! Parts are cut at the end of the first record that makes the pending output
//! reach the part size, so where parts begin and end depends on the output's
//! bytes alone: a resumed runner cuts the same parts, and a fenced runner that
//! uploads part `n` late uploads the same bytes. It may get another tag for
//! them (S3 with SSE-KMS tags each upload anew), so a completion refused for
//! a changed tag is made again with the tags the store lists — after checking
//! every part is there with the size the checkpoint recorded (see
//! [`complete`]).
//!
//! S3 takes at most 10,000 parts: an output that would need part 10,001 fails
//! its job before that part is sent, naming the part size to raise (start-up
//! checks that the largest input fits; an output may outgrow its input when
//! pseudonyms are longer than the values they replace).
//! Segments are named by the runner's epoch and a sequence number, so a late
//! segment never replaces one that a checkpoint refers to. Memory is bounded by
//! about one part plus one batch.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use crate::{
    checkpoint::{Checkpoint, PartRecord, SegmentRecord},
    retry::Persist,
    storage::{output_key, segment_key, ListedPart, ObjectStore, StorageError, MAX_PARTS},
};

/// Segments kept for one part before they are merged into one: bounds the
/// checkpoint's size and the reads of a resumption.
const MAX_SEGMENTS: usize = 16;

pub struct Output {
    store: Arc<dyn ObjectStore>,
    job_id: String,
    key: String,
    /// Names this runner's segments.
    epoch: i64,
    seq: u64,
    upload_id: String,
    parts: Vec<PartRecord>,
    /// The output since the last part; whole parts are split off it without
    /// a copy.
    pending: BytesMut,
    /// A batch's records are written here first (reused).
    scratch: Vec<u8>,
    /// `pending[..durable]` is what `segments` hold.
    durable: usize,
    segments: Vec<SegmentRecord>,
    /// Ends of whole parts in `pending`, waiting to be uploaded.
    cuts: Vec<usize>,
    part_bytes: usize,
    /// Bytes in the uploaded parts.
    parted: u64,
}

impl Output {
    /// Opens the output where `checkpoint` left it: starts the multipart
    /// upload on a first run, else reads the pending segments back.
    pub async fn resume(
        store: Arc<dyn ObjectStore>,
        persist: &Persist,
        job_id: &str,
        epoch: i64,
        checkpoint: &Checkpoint,
        part_bytes: usize,
    ) -> Result<Self, StorageError> {
        let key = output_key(job_id);
        let upload_id = match &checkpoint.upload_id {
            Some(id) => id.clone(),
            None => {
                persist
                    .run("start the output's upload", || store.start_multipart(&key))
                    .await?
            }
        };
        let mut pending = BytesMut::with_capacity(part_bytes + (1 << 20));
        for s in &checkpoint.segments {
            let bytes = persist
                .run("read an output segment", || {
                    read_all(store.as_ref(), &s.key)
                })
                .await?;
            if bytes.len() as u64 != s.bytes {
                return Err(StorageError::Refused(format!(
                    "an output segment holds {} bytes, its checkpoint says {}",
                    bytes.len(),
                    s.bytes
                )));
            }
            pending.extend_from_slice(&bytes);
        }
        Ok(Self {
            store,
            job_id: job_id.to_owned(),
            key,
            epoch,
            seq: 0,
            upload_id,
            parted: checkpoint.parts.iter().map(|p| p.bytes).sum(),
            parts: checkpoint.parts.clone(),
            durable: pending.len(),
            pending,
            scratch: Vec::new(),
            segments: checkpoint.segments.clone(),
            cuts: Vec::new(),
            part_bytes,
        })
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.parted + self.pending.len() as u64
    }

    /// Lets `f` write records to the output; `f` calls the marker it is given
    /// after each record, where a part may be cut when full.
    pub fn write<R>(
        &mut self,
        f: impl FnOnce(&mut Vec<u8>, &mut dyn FnMut(&mut Vec<u8>)) -> R,
    ) -> R {
        let base = self.pending.len();
        let part_bytes = self.part_bytes;
        let cuts = &mut self.cuts;
        let mut row_end = move |out: &mut Vec<u8>| {
            let at = base + out.len();
            let last = cuts.last().copied().unwrap_or(0);
            if at - last >= part_bytes {
                cuts.push(at);
            }
        };
        let mut batch = std::mem::take(&mut self.scratch);
        batch.clear();
        let result = f(&mut batch, &mut row_end);
        self.pending.extend_from_slice(&batch);
        self.scratch = batch;
        result
    }

    /// Uploads the whole parts written since the last call.
    pub async fn upload_parts(&mut self, persist: &Persist) -> Result<(), StorageError> {
        if self.cuts.is_empty() {
            return Ok(());
        }
        let needed = self.parts.len() + self.cuts.len();
        if needed > MAX_PARTS as usize {
            return Err(StorageError::Refused(format!(
                "the output needs more than S3's {MAX_PARTS} parts of {} bytes: raise CsvProcessing__OutputPartSize (it grew past {} bytes)",
                self.part_bytes,
                self.bytes()
            )));
        }
        let mut start = 0;
        for &end in &self.cuts {
            let number = self.parts.len() as u32 + 1;
            let body = self.pending.split_to(end - start).freeze();
            let etag = persist
                .run("upload an output part", || {
                    self.store
                        .put_part(&self.key, &self.upload_id, number, body.clone())
                })
                .await?;
            self.parts.push(PartRecord {
                number,
                etag,
                bytes: (end - start) as u64,
            });
            self.parted += (end - start) as u64;
            start = end;
        }
        self.cuts.clear();
        // The segments held the front of `pending`, now in parts.
        self.durable = 0;
        self.segments.clear();
        Ok(())
    }

    /// Makes everything written durable and records where it is in
    /// `checkpoint`.
    pub async fn persist(
        &mut self,
        persist: &Persist,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), StorageError> {
        self.upload_parts(persist).await?;
        if self.durable < self.pending.len() {
            // Merged into one segment when there are many.
            let from = if self.segments.len() >= MAX_SEGMENTS {
                0
            } else {
                self.durable
            };
            self.seq += 1;
            let key = segment_key(&self.job_id, self.epoch, self.seq);
            let body = Bytes::copy_from_slice(&self.pending[from..]);
            persist
                .run("write an output segment", || {
                    self.store.put(&key, body.clone())
                })
                .await?;
            if from == 0 {
                self.segments.clear();
            }
            self.segments.push(SegmentRecord {
                key,
                bytes: body.len() as u64,
            });
            self.durable = self.pending.len();
        }
        checkpoint.upload_id = Some(self.upload_id.clone());
        checkpoint.parts = self.parts.clone();
        checkpoint.segments = self.segments.clone();
        checkpoint.output_bytes = self.bytes();
        Ok(())
    }

    /// Uploads what is pending as the last part and records every part in
    /// `checkpoint` (nothing pending then); the upload's completion is left.
    pub async fn seal(
        &mut self,
        persist: &Persist,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), StorageError> {
        if !self.pending.is_empty() || self.parts.is_empty() {
            let end = self.pending.len();
            if self.cuts.last() != Some(&end) {
                self.cuts.push(end);
            }
        }
        self.upload_parts(persist).await?;
        checkpoint.upload_id = Some(self.upload_id.clone());
        checkpoint.parts = self.parts.clone();
        checkpoint.segments.clear();
        checkpoint.output_bytes = self.bytes();
        Ok(())
    }
}

/// Completes a sealed output: the object appears under its name, whole. A
/// completion already made (by this runner before a crash, or by a fenced
/// one: the same parts, so the same bytes) is recognised by the object's size.
pub async fn complete(
    store: &dyn ObjectStore,
    persist: &Persist,
    job_id: &str,
    checkpoint: &Checkpoint,
) -> Result<(), StorageError> {
    let key = output_key(job_id);
    let upload_id = checkpoint
        .upload_id
        .as_deref()
        .ok_or_else(|| StorageError::Refused("the output has no upload".into()))?;
    let mut parts: Vec<(u32, String)> = checkpoint
        .parts
        .iter()
        .map(|p| (p.number, p.etag.clone()))
        .collect();
    let mut attempt = 0;
    let completed = loop {
        let result = persist
            .run("complete the output", || {
                store.complete_multipart(&key, upload_id, &parts)
            })
            .await;
        match result {
            // A part's tag changed since it was recorded: a fenced runner
            // uploaded the same bytes again, under a new tag (SSE-KMS). The
            // listing gives the tags now held; a part missing or of another
            // size is not what the checkpoint recorded, and is refused.
            Err(StorageError::InvalidPart(why)) if attempt < MAX_RELISTS => {
                attempt += 1;
                tracing::info!(job = %job_id, reason = %why, "the output's completion named a part re-uploaded since; completing with the listed parts");
                let listed = persist
                    .run("list the output's parts", || {
                        store.list_parts(&key, upload_id)
                    })
                    .await?;
                parts = current_tags(checkpoint, &listed)?;
            }
            other => break other,
        }
    };
    match completed {
        Ok(()) => Ok(()),
        Err(StorageError::NoSuchUpload) => {
            let size = persist.run("check the output", || store.size(&key)).await?;
            if size == Some(checkpoint.output_bytes) {
                Ok(())
            } else {
                Err(StorageError::Refused(format!(
                    "the output's upload is gone and the object holds {size:?} bytes, not {}",
                    checkpoint.output_bytes
                )))
            }
        }
        Err(e) => Err(e),
    }
}

/// A completion refused for a changed tag is listed and made again this many
/// times (a fenced runner may still be uploading), then left failed.
const MAX_RELISTS: u32 = 3;

/// The tags the store holds now for the checkpoint's parts, each checked to be
/// there with the size recorded.
fn current_tags(
    checkpoint: &Checkpoint,
    listed: &[ListedPart],
) -> Result<Vec<(u32, String)>, StorageError> {
    checkpoint
        .parts
        .iter()
        .map(|p| match listed.iter().find(|l| l.number == p.number) {
            Some(l) if l.bytes == p.bytes => Ok((p.number, l.etag.clone())),
            Some(l) => Err(StorageError::Refused(format!(
                "the output's part {} holds {} bytes, its checkpoint says {}: not the part this job wrote",
                p.number, l.bytes, p.bytes
            ))),
            None => Err(StorageError::Refused(format!(
                "the output's part {} is not in its upload",
                p.number
            ))),
        })
        .collect()
}

async fn read_all(store: &dyn ObjectStore, key: &str) -> Result<Vec<u8>, StorageError> {
    let mut stream = store.read(key, 0).await?;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}
