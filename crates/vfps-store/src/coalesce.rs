//! Coalesces concurrent Creates into multi-row upserts.
//!
//! Callers enqueue a [`Candidate`] and await its answer. A fixed set of workers each
//! take whatever is queued (up to `max_batch`), deduplicate it by
//! `(namespace, original)`, sort it (so concurrent batches lock rows in the same
//! order and cannot deadlock each other) and run one upsert. Under light load a batch
//! is one row and adds no latency; under heavy load batches grow and one commit
//! serves many callers. A failed batch fails every caller in it: nobody is told "ok"
//! for a row that is not committed.

use std::{collections::BTreeMap, sync::Arc};

use tokio::sync::{mpsc, oneshot, Mutex};
use vfps_core::Error;

use crate::{Candidate, Store, Upserted};

type Reply = oneshot::Sender<Result<Upserted, Error>>;

/// Handle to the coalescing workers; cheap to clone.
#[derive(Clone)]
pub struct Coalescer {
    queue: mpsc::UnboundedSender<(Candidate, Reply)>,
}

impl Coalescer {
    /// Spawns `workers` batch workers on the current runtime. They stop when every
    /// handle is dropped.
    /// `on_batch` is told each batch's size (after deduplication), for metrics.
    pub fn spawn(
        store: Arc<dyn Store>,
        workers: usize,
        max_batch: usize,
        on_batch: Arc<dyn Fn(usize) + Send + Sync>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..workers.max(1) {
            let rx = rx.clone();
            let store = store.clone();
            let on_batch = on_batch.clone();
            tokio::spawn(async move {
                loop {
                    let batch = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else { return };
                        let mut batch = vec![first];
                        while batch.len() < max_batch.max(1) {
                            match rx.try_recv() {
                                Ok(item) => batch.push(item),
                                Err(_) => break,
                            }
                        }
                        batch
                    };
                    run_batch(store.as_ref(), batch, on_batch.as_ref()).await;
                }
            });
        }
        Self { queue: tx }
    }

    /// Upserts one candidate as part of whatever batch it lands in.
    pub async fn upsert(&self, candidate: Candidate) -> Result<Upserted, Error> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((candidate, tx))
            .map_err(|_| Error::unavailable("the server is shutting down"))?;
        rx.await
            .map_err(|_| Error::internal("create batch worker stopped without answering"))?
    }
}

async fn run_batch(
    store: &dyn Store,
    batch: Vec<(Candidate, Reply)>,
    on_batch: &(dyn Fn(usize) + Send + Sync),
) {
    // Deduplicate: one row per (namespace, original); every caller of a key gets it.
    let mut keyed: BTreeMap<(String, String), (Candidate, Vec<Reply>)> = BTreeMap::new();
    for (candidate, reply) in batch {
        let key = (
            candidate.namespace.as_str().to_owned(),
            candidate.original.as_str().to_owned(),
        );
        keyed
            .entry(key)
            .or_insert_with(|| (candidate, Vec::new()))
            .1
            .push(reply);
    }
    let (candidates, replies): (Vec<Candidate>, Vec<Vec<Reply>>) = keyed.into_values().unzip();
    on_batch(candidates.len());
    match store.upsert_pseudonyms(&candidates).await {
        Ok(results) if results.len() == candidates.len() => {
            for (result, replies) in results.into_iter().zip(replies) {
                for reply in replies {
                    let _ = reply.send(Ok(result.clone()));
                }
            }
        }
        Ok(results) => {
            let e = Error::internal(format!(
                "store answered {} of {} rows of a batch",
                results.len(),
                candidates.len()
            ));
            replies.into_iter().flatten().for_each(|r| {
                let _ = r.send(Err(e.clone()));
            });
        }
        Err(e) => replies.into_iter().flatten().for_each(|r| {
            let _ = r.send(Err(e.clone()));
        }),
    }
}
