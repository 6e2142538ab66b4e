//! Coalesces concurrent Creates into multi-row upserts.
//!
//! Callers enqueue a [`Candidate`] and await its answer. A fixed set of workers each
//! take whatever is queued (up to `max_batch`), deduplicate it by
//! `(namespace, original)`, sort it (so concurrent batches lock rows in the same
//! order and cannot deadlock each other) and run one upsert. Under light load a batch
//! is one row and adds no latency; under heavy load batches grow and one commit
//! serves many callers. A failed batch fails every caller in it: nobody is told "ok"
//! for a row that is not committed.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use tokio::sync::{mpsc, oneshot, Mutex, Notify};
use vfps_core::Error;

use crate::{Candidate, Store, Upserted};

type Reply = oneshot::Sender<Result<Upserted, Error>>;
type Item = (Candidate, Reply);

/// What the workers share.
struct Shared {
    /// Only the worker holding this lock collects; the others wait their turn.
    rx: Mutex<mpsc::UnboundedReceiver<Item>>,
    /// Batches executing now.
    in_flight: AtomicUsize,
    /// Size of the batch started last: a new batch waits to be about as large
    /// while another is executing.
    last_size: AtomicUsize,
    /// Signalled whenever a batch finishes.
    finished: Notify,
}

impl Shared {
    /// Takes the next batch: at least one item; while another batch is executing,
    /// keeps collecting until the batch is as large as the one executing or that
    /// one finishes. Idle: one request goes out at once. Busy: batches grow and
    /// overlap, one executing while the next fills. `None` once the queue is closed.
    async fn collect(&self, max_batch: usize) -> Option<Vec<Item>> {
        let mut rx = self.rx.lock().await;
        let mut batch = vec![rx.recv().await?];
        loop {
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            // Registered before in_flight is read, so a batch finishing in between
            // still wakes this collector.
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            let target = self.last_size.load(Ordering::Relaxed).clamp(1, max_batch);
            if batch.len() >= target || self.in_flight.load(Ordering::SeqCst) == 0 {
                return Some(batch);
            }
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => batch.push(item),
                    None => return Some(batch),
                },
                _ = finished => {}
            }
        }
    }
}

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
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            in_flight: AtomicUsize::new(0),
            last_size: AtomicUsize::new(1),
            finished: Notify::new(),
        });
        let max_batch = max_batch.max(1);
        for _ in 0..workers.max(1) {
            let shared = shared.clone();
            let store = store.clone();
            let on_batch = on_batch.clone();
            tokio::spawn(async move {
                loop {
                    let Some(batch) = shared.collect(max_batch).await else {
                        return;
                    };
                    shared.in_flight.fetch_add(1, Ordering::SeqCst);
                    shared.last_size.store(batch.len(), Ordering::Relaxed);
                    run_batch(store.as_ref(), batch, on_batch.as_ref()).await;
                    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                    shared.finished.notify_waiters();
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
    // Deduplicate: one row per (namespace, original); every caller of a key gets
    // it. Sorted by key, so concurrent batches lock index entries in one order.
    let mut batch = batch;
    batch.sort_by(|a, b| {
        (a.0.namespace.as_str(), a.0.original.as_str())
            .cmp(&(b.0.namespace.as_str(), b.0.original.as_str()))
    });
    let mut candidates: Vec<Candidate> = Vec::with_capacity(batch.len());
    let mut replies: Vec<Vec<Reply>> = Vec::with_capacity(batch.len());
    for (candidate, reply) in batch {
        match candidates.last() {
            Some(last)
                if last.namespace == candidate.namespace && last.original == candidate.original =>
            {
                if let Some(r) = replies.last_mut() {
                    r.push(reply);
                }
            }
            _ => {
                candidates.push(candidate);
                replies.push(vec![reply]);
            }
        }
    }
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
