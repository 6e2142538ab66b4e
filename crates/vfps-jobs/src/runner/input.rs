//! The input object read from an offset and reopened where it broke off, and
//! the heartbeat that renews the job's lease meanwhile.

use std::{sync::Arc, time::Instant};

use bytes::BytesMut;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use vfps_store::jobs::JobRecord;

use super::Context;
use crate::storage::{ByteStream, ObjectStore, StorageError};

/// The input, read from an offset; reopened where it broke off.
pub(super) struct Input {
    pub(super) objects: Arc<dyn ObjectStore>,
    pub(super) key: String,
    pub(super) stream: Option<ByteStream>,
    pub(super) buf: BytesMut,
    /// Input offset of the end of `buf`.
    pub(super) read: u64,
    pub(super) eof: bool,
}

impl Input {
    pub(super) fn new(objects: Arc<dyn ObjectStore>, key: String, offset: u64) -> Self {
        Self {
            objects,
            key,
            stream: None,
            buf: BytesMut::new(),
            read: offset,
            eof: false,
        }
    }

    /// Input offset of the start of `buf`.
    pub(super) fn offset_of_buffer(&self) -> u64 {
        self.read - self.buf.len() as u64
    }

    pub(super) async fn fill(&mut self) -> Result<(), StorageError> {
        if self.eof {
            return Ok(());
        }
        let stream = match &mut self.stream {
            Some(s) => s,
            None => self
                .stream
                .insert(self.objects.read(&self.key, self.read).await?),
        };
        match stream.next().await {
            Some(Ok(chunk)) => {
                self.read += chunk.len() as u64;
                self.buf.extend_from_slice(&chunk);
                Ok(())
            }
            Some(Err(e)) => {
                // Reopened at `read` by the next attempt.
                self.stream = None;
                Err(e)
            }
            None => {
                self.eof = true;
                Ok(())
            }
        }
    }
}

/// Renews a runner's lease every third of it; when a renewal is refused, or
/// none succeeded for a whole lease, the runner is stopped (`lost`).
pub(super) struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    pub(super) fn spawn(
        ctx: &Context,
        job: &JobRecord,
        stop: CancellationToken,
        lost: CancellationToken,
    ) -> Self {
        let store = ctx.store.clone();
        let lease = ctx.settings.lease;
        let (id, epoch) = (job.id.clone(), job.epoch);
        Self(tokio::spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(lease / 3) => {}
                }
                let attempt =
                    tokio::time::timeout(lease / 3, store.renew_job_lease(&id, epoch, lease)).await;
                match attempt {
                    Ok(Ok(true)) => renewed = Instant::now(),
                    Ok(Ok(false)) => break,
                    _ if renewed.elapsed() >= lease => {
                        tracing::warn!(job = %id, "cannot renew a CSV job's lease; the runner stops");
                        break;
                    }
                    _ => {}
                }
            }
            lost.cancel();
            stop.cancel();
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}
