//! Coalesces concurrent Creates into multi-row upserts, and concurrent Gets into
//! multi-row lookups.
//!
//! Callers enqueue a [`Request`] (a [`Candidate`] to upsert, a [`Lookup`]) and
//! await its answer. A caller that finds nothing executing and nothing queued
//! runs its request at once on its own task, as a batch of one: on an idle
//! machine the hop to a worker and back (two task wake-ups) costs as much as a
//! lookup. If that caller goes away mid-statement (its deadline), the statement
//! finishes on a task of its own: cut off, its PostgreSQL connection would be
//! discarded, and callers with tiny deadlines would make the pool reconnect as
//! fast as they leave. Otherwise a fixed set of workers each take whatever is queued (up to
//! `max_batch`), drop the requests whose callers have gone, deduplicate the rest
//! by key (`(namespace, original)`, `(namespace, pseudonym)`), sort them (so
//! concurrent batches lock rows in the same order and cannot deadlock each other)
//! and run one statement. Under light load a batch is one row and adds no latency;
//! under heavy load batches grow and one round trip (and, for upserts, one commit)
//! serves many callers.
//!
//! Nobody is told "ok" for a row that is not committed, and one caller's row never
//! fails another caller: a batch that fails for a transient reason fails every
//! caller with `Unavailable` (they retry), one that fails for any other reason is
//! run again row by row, so each caller gets its own answer. The queue is bounded:
//! when it is full a call is answered `Unavailable` at once instead of waiting
//! behind work the database cannot keep up with.
//!
//! An [`Observer`] is told how long each caller waited for its batch, how large
//! each batch is and how long its statement took (for metrics). Traces: each
//! caller's wait is a `coalescer.wait` span ([`crate::trace`]); the batch
//! is one `coalescer.batch` span, a child of its first caller's span, linked to
//! the spans of every other caller, whose waits link back to it. Spans carry
//! sizes and causes, never a value.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use opentelemetry::{trace::SpanKind, KeyValue};
use tokio::sync::{mpsc, oneshot, Mutex, Notify};
use vfps_core::{Error, Pseudonym, TransientCause};

use crate::{
    trace::{in_span, parent, Span},
    Candidate, Lookup, Store, Upsert, Upserted,
};

/// A call the coalescer batches.
pub trait Request: Clone + Send + Sync + 'static {
    /// What its caller is answered.
    type Answer: Clone + Send + 'static;
    /// The calls, for messages ("Creates").
    const CALLS: &'static str;
    /// The batch's statement, for traces ("upsert").
    const STATEMENT: &'static str;
    /// Requests with equal keys are one row of a batch; a batch is sorted by key.
    fn key(&self) -> (&str, &str);
}

impl Request for Candidate {
    type Answer = Upserted;
    const CALLS: &'static str = "Creates";
    const STATEMENT: &'static str = "upsert";
    fn key(&self) -> (&str, &str) {
        (self.namespace.as_str(), self.original.as_str())
    }
}

impl Request for Lookup {
    type Answer = Option<Pseudonym>;
    const CALLS: &'static str = "Gets";
    const STATEMENT: &'static str = "lookup";
    fn key(&self) -> (&str, &str) {
        (self.namespace.as_str(), self.pseudonym_value.as_str())
    }
}

/// Runs one batch of `R`: one answer per request, in input order, or one error
/// for the whole batch.
#[async_trait]
pub trait Execute<R: Request>: Send + Sync + 'static {
    async fn execute(&self, batch: &[R]) -> Result<Vec<R::Answer>, Error>;
}

#[async_trait]
impl<S: Upsert + ?Sized> Execute<Candidate> for S {
    async fn execute(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error> {
        self.upsert_pseudonyms(batch).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> Execute<Lookup> for S {
    async fn execute(&self, batch: &[Lookup]) -> Result<Vec<Option<Pseudonym>>, Error> {
        self.get_pseudonyms(batch).await
    }
}

type Reply<R> = oneshot::Sender<Result<<R as Request>::Answer, Error>>;

/// One caller's request, waiting for a batch.
struct Item<R: Request> {
    request: R,
    reply: Reply<R>,
    /// When it joined the queue, for the wait metric.
    enqueued_at: Instant,
    /// The caller's span: the batch span's parent or one of its links.
    caller: Span,
    /// The caller's wait, closed when its batch starts.
    wait: Span,
}

/// What the coalescer reports, for metrics. Called on the hot path (the caller's
/// task or a batch worker): keep it to counters and histograms.
pub trait Observer: Send + Sync + 'static {
    /// A call is about to join the queue.
    fn enqueued(&self) {}
    /// `n` calls left the queue: taken into a batch, or refused because it was full.
    fn left_queue(&self, n: usize) {
        let _ = n;
    }
    /// A batch starts with `rows` distinct rows.
    fn batch_started(&self, rows: usize) {
        let _ = rows;
    }
    /// How long one caller of a starting batch waited since it joined the queue.
    fn waited(&self, wait: Duration) {
        let _ = wait;
    }
    /// One statement of a batch (the batch, or one row of a failed batch that is
    /// split) took `elapsed` to answer, successfully or not.
    fn statement(&self, elapsed: Duration) {
        let _ = elapsed;
    }
}

/// A closure observes batch sizes only.
impl<F: Fn(usize) + Send + Sync + 'static> Observer for F {
    fn batch_started(&self, rows: usize) {
        self(rows)
    }
}

/// What the workers share.
struct Shared<R: Request> {
    /// Only the worker holding this lock collects; the others wait their turn.
    rx: Mutex<mpsc::Receiver<Item<R>>>,
    /// Batches executing now.
    in_flight: AtomicUsize,
    /// Size of the batch started last: a new batch waits to be about as large
    /// while another is executing.
    last_size: AtomicUsize,
    /// Signalled whenever a batch finishes.
    finished: Notify,
}

/// A batch executing: holds its slot in `in_flight` and gives it back when
/// dropped, finished or not (a caller's task running its own request may be
/// dropped mid-statement), waking the collectors.
struct Running<'a, R: Request>(&'a Shared<R>);

impl<R: Request> Drop for Running<'_, R> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.finished.notify_waiters();
    }
}

/// [`Running`] for the batch of one a caller runs, owned by its future.
struct RunningAlone<R: Request>(Arc<Shared<R>>);

impl<R: Request> Drop for RunningAlone<R> {
    fn drop(&mut self) {
        drop(Running(&*self.0));
    }
}

/// The batch of one a caller runs on its own task: polled there while the
/// caller waits; if the caller goes away first (its deadline, a hang-up), the
/// rest runs on a task of its own instead of being cut off mid-statement.
struct FinishOnDrop(Option<futures::future::BoxFuture<'static, ()>>);

impl std::future::Future for FinishOnDrop {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let Some(f) = self.0.as_mut() else {
            return std::task::Poll::Ready(());
        };
        let done = f.as_mut().poll(cx);
        if done.is_ready() {
            self.0 = None;
        }
        done
    }
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        if let (Some(rest), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(rest);
        }
    }
}

impl<R: Request> Shared<R> {
    /// Counts a batch of `size` as executing until the guard is dropped.
    fn start(&self, size: usize) -> Running<'_, R> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.last_size.store(size, Ordering::Relaxed);
        Running(self)
    }

    /// Claims the only slot if nothing executes: the caller runs its request
    /// (and releases the slot with a [`RunningAlone`]).
    fn start_if_idle(&self) -> bool {
        let claimed = self
            .in_flight
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if claimed {
            self.last_size.store(1, Ordering::Relaxed);
        }
        claimed
    }

    /// Takes the next batch: at least one item; while another batch is executing,
    /// keeps collecting until the batch is as large as the one executing or that
    /// one finishes. Idle: one request goes out at once. Busy: batches grow and
    /// overlap, one executing while the next fills. `None` once the queue is closed.
    async fn collect(&self, max_batch: usize) -> Option<Vec<Item<R>>> {
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

/// Handle to the coalescing workers of one kind of request; cheap to clone.
pub struct Coalescer<R: Request> {
    queue: mpsc::Sender<Item<R>>,
    /// The queue's bound, for the error message.
    capacity: usize,
    /// Told when a call joins the queue or is refused, and about batches run
    /// on a caller's task.
    observer: Arc<dyn Observer>,
    /// For running a request on the caller's task when idle.
    shared: Arc<Shared<R>>,
    store: Arc<dyn Execute<R>>,
}

impl<R: Request> Clone for Coalescer<R> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            capacity: self.capacity,
            observer: self.observer.clone(),
            shared: self.shared.clone(),
            store: self.store.clone(),
        }
    }
}

/// Any store, as a `dyn Execute<R>`.
struct Via<S: ?Sized>(Arc<S>);

#[async_trait]
impl<R: Request, S: Execute<R> + ?Sized> Execute<R> for Via<S> {
    async fn execute(&self, batch: &[R]) -> Result<Vec<R::Answer>, Error> {
        self.0.execute(batch).await
    }
}

/// How the coalescer batches.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Batches executing at once.
    pub workers: usize,
    /// Most candidates in one batch.
    pub max_batch: usize,
    /// Most candidates waiting for a batch; more are refused at once.
    pub max_queue: usize,
}

impl<R: Request> Coalescer<R> {
    /// Spawns the batch workers on the current runtime. They stop when every
    /// handle is dropped. `observer` is told about waits, batches and statements.
    pub fn spawn<S: Execute<R> + ?Sized>(
        store: Arc<S>,
        limits: Limits,
        observer: Arc<dyn Observer>,
    ) -> Self {
        let capacity = limits.max_queue.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let shared = Arc::new(Shared {
            rx: Mutex::new(rx),
            in_flight: AtomicUsize::new(0),
            last_size: AtomicUsize::new(1),
            finished: Notify::new(),
        });
        let store: Arc<dyn Execute<R>> = Arc::new(Via(store));
        let max_batch = limits.max_batch.max(1);
        for _ in 0..limits.workers.max(1) {
            let shared = shared.clone();
            let store = store.clone();
            let observer = observer.clone();
            tokio::spawn(async move {
                loop {
                    let Some(batch) = shared.collect(max_batch).await else {
                        return;
                    };
                    observer.left_queue(batch.len());
                    let _running = shared.start(batch.len());
                    run_batch(store.as_ref(), batch, observer.as_ref()).await;
                }
            });
        }
        Self {
            queue: tx,
            capacity,
            observer,
            shared,
            store,
        }
    }

    /// Runs one request as part of whatever batch it lands in, or at once on
    /// this task when nothing else executes or waits. Dropping the future
    /// before the answer takes the request out of any batch not yet started;
    /// a statement of its own already running finishes on another task.
    pub async fn call(&self, request: R) -> Result<R::Answer, Error> {
        let (tx, rx) = oneshot::channel();
        let caller = parent();
        let wait = caller
            .child("coalescer.wait", SpanKind::Internal)
            .with([KeyValue::new("vfps.batch.statement", R::STATEMENT)]);
        let item = Item {
            request,
            reply: tx,
            enqueued_at: Instant::now(),
            caller,
            wait,
        };
        let queued = self.queue.max_capacity() - self.queue.capacity();
        if queued == 0 && self.shared.start_if_idle() {
            let running = RunningAlone(self.shared.clone());
            let (store, observer) = (self.store.clone(), self.observer.clone());
            FinishOnDrop(Some(Box::pin(async move {
                run_batch(store.as_ref(), vec![item], observer.as_ref()).await;
                drop(running);
            })))
            .await;
            return rx
                .await
                .map_err(|_| Error::internal("a batch of one ended without answering"))?;
        }
        self.observer.enqueued();
        self.queue.try_send(item).map_err(|e| {
            self.observer.left_queue(1);
            match e {
                mpsc::error::TrySendError::Full(_) => Error::unavailable(format!(
                    "overloaded: {} {} are already waiting for the database",
                    self.capacity,
                    R::CALLS
                ))
                .because(TransientCause::Overloaded),
                mpsc::error::TrySendError::Closed(_) => {
                    Error::unavailable("the server is shutting down")
                }
            }
        })?;
        rx.await
            .map_err(|_| Error::internal("batch worker stopped without answering"))?
    }
}

async fn run_batch<R: Request, S: Execute<R> + ?Sized>(
    store: &S,
    mut batch: Vec<Item<R>>,
    observer: &dyn Observer,
) {
    // Nobody waits for these any more.
    batch.retain(|item| !item.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    // The batch belongs to the trace of its first traced caller (in queue
    // order) and links every other traced caller's.
    let callers = batch.len();
    let first_caller = batch
        .iter()
        .map(|item| &item.caller)
        .find(|caller| caller.is_recording())
        .cloned()
        .unwrap_or_default();
    let span = first_caller
        .child("coalescer.batch", SpanKind::Client)
        .with([
            KeyValue::new("vfps.batch.statement", R::STATEMENT),
            KeyValue::new("vfps.batch.callers", callers as i64),
        ]);
    // Deduplicate: one row per key; every caller of a key gets its answer.
    // Sorted by key, so concurrent batches lock index entries in one order.
    batch.sort_by(|a, b| a.request.key().cmp(&b.request.key()));
    let started = Instant::now();
    let mut candidates: Vec<R> = Vec::with_capacity(batch.len());
    let mut replies: Vec<Vec<Reply<R>>> = Vec::with_capacity(batch.len());
    for item in batch {
        observer.waited(started.saturating_duration_since(item.enqueued_at));
        if span.is_recording() && !item.caller.is(&first_caller) {
            span.link(&item.caller);
            item.wait.link(&span);
        }
        let (candidate, reply) = (item.request, item.reply);
        match candidates.last() {
            Some(last) if last.key() == candidate.key() => {
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
    span.set("vfps.batch.size", candidates.len() as i64);
    observer.batch_started(candidates.len());
    match in_span(span.clone(), execute(store, &candidates, observer)).await {
        Ok(results) => answer::<R>(results.into_iter().map(Ok), replies),
        Err(e) if e.is_transient() || candidates.len() == 1 => {
            record_error(&span, &e);
            answer::<R>(std::iter::repeat(Err(e)), replies)
        }
        Err(e) => {
            // Some row the database would not take: find out whose, row by row.
            tracing::debug!(rows = candidates.len(), error = %e, "batch failed; retrying row by row");
            if span.is_recording() {
                span.event(
                    "split row by row",
                    [
                        KeyValue::new("rows", candidates.len() as i64),
                        KeyValue::new("error.type", format!("{:?}", e.kind)),
                    ],
                );
            }
            let mut results = Vec::with_capacity(candidates.len());
            for candidate in &candidates {
                results.push(
                    in_span(
                        span.clone(),
                        execute(store, std::slice::from_ref(candidate), observer),
                    )
                    .await
                    .map(|mut r| r.remove(0)),
                );
            }
            answer::<R>(results.into_iter(), replies)
        }
    }
}

/// Records why the batch failed on its span (`error.type`): the error's
/// transient cause or kind, never its message.
fn record_error(span: &Span, e: &Error) {
    match e.transient_cause() {
        Some(cause) => span.set("error.type", cause.as_str()),
        None if span.is_recording() => span.set("error.type", format!("{:?}", e.kind)),
        None => {}
    }
}

/// One statement that answers exactly one result per request, or an error.
async fn execute<R: Request, S: Execute<R> + ?Sized>(
    store: &S,
    candidates: &[R],
    observer: &dyn Observer,
) -> Result<Vec<R::Answer>, Error> {
    let started = Instant::now();
    let results = store.execute(candidates).await;
    observer.statement(started.elapsed());
    let results = results?;
    if results.len() != candidates.len() {
        return Err(Error::internal(format!(
            "store answered {} of {} rows of a batch",
            results.len(),
            candidates.len()
        )));
    }
    Ok(results)
}

/// Sends each deduplicated row's result to every caller of that row.
fn answer<R: Request>(
    results: impl Iterator<Item = Result<R::Answer, Error>>,
    replies: Vec<Vec<Reply<R>>>,
) {
    for (result, replies) in results.zip(replies) {
        for reply in replies {
            let _ = reply.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Mutex as StdMutex, time::Duration};

    use async_trait::async_trait;
    use vfps_core::{now_micros, NamespaceName, NamespaceUid, OriginalValue, Pseudonym};

    use super::*;

    /// Stores whatever it gets, fails batches holding an original starting with
    /// "poison", and records every batch; waits on `gate` before answering.
    struct Recording {
        batches: StdMutex<Vec<Vec<String>>>,
        /// The task each batch ran on.
        tasks: StdMutex<Vec<Option<tokio::task::Id>>>,
        gate: tokio::sync::Semaphore,
        transient: bool,
        /// Batches whose statement ran to its end.
        finished: AtomicUsize,
    }

    impl Recording {
        fn new(transient: bool) -> Arc<Self> {
            Arc::new(Self {
                batches: StdMutex::default(),
                tasks: StdMutex::default(),
                gate: tokio::sync::Semaphore::new(0),
                transient,
                finished: AtomicUsize::new(0),
            })
        }
    }

    #[async_trait]
    impl Upsert for Recording {
        async fn upsert_pseudonyms(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error> {
            let originals: Vec<String> = batch
                .iter()
                .map(|c| c.original.as_str().to_owned())
                .collect();
            self.batches.lock().unwrap().push(originals.clone());
            self.tasks.lock().unwrap().push(tokio::task::try_id());
            let _permit = self.gate.acquire().await.unwrap();
            self.finished.fetch_add(1, Ordering::SeqCst);
            if originals.iter().any(|o| o.starts_with("poison")) {
                return Err(if self.transient {
                    Error::unavailable("connection lost")
                } else {
                    Error::invalid_argument("the database cannot store this value")
                });
            }
            Ok(batch
                .iter()
                .map(|c| {
                    Upserted::Stored(Pseudonym {
                        namespace: c.namespace.clone(),
                        original_value: c.original.as_str().to_owned(),
                        pseudonym_value: c.pseudonym.clone(),
                        created_at: c.created_at,
                        last_updated_at: c.created_at,
                        original_sealed: None,
                    })
                })
                .collect())
        }
    }

    fn candidate(original: &str) -> Candidate {
        Candidate {
            namespace: NamespaceName::parse("n").unwrap(),
            namespace_uid: NamespaceUid(1),
            original: OriginalValue::parse(original).unwrap(),
            pseudonym: format!("p-{original}"),
            created_at: now_micros(),
            sealed: None,
            moving: false,
        }
    }

    fn spawn(store: Arc<Recording>, max_queue: usize) -> Coalescer<Candidate> {
        Coalescer::spawn(
            store,
            Limits {
                workers: 1,
                max_batch: 64,
                max_queue,
            },
            Arc::new(|_| {}),
        )
    }

    /// Waits until the store has seen `n` batches.
    async fn batches_seen(store: &Recording, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while store.batches.lock().unwrap().len() < n {
            assert!(tokio::time::Instant::now() < deadline, "no batch arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    type Call = tokio::task::JoinHandle<Result<Upserted, Error>>;

    fn call_in_task(c: &Coalescer<Candidate>, original: &str) -> Call {
        let c = c.clone();
        let original = original.to_owned();
        tokio::spawn(async move { c.call(candidate(&original)).await })
    }

    /// Two batches held at the store's gate: one on its caller's task (the
    /// coalescer was idle), one on the only worker. What is called next waits
    /// in the queue.
    async fn occupied(c: &Coalescer<Candidate>, store: &Recording) -> [Call; 2] {
        let first = call_in_task(c, "first");
        batches_seen(store, 1).await;
        let second = call_in_task(c, "second");
        batches_seen(store, 2).await;
        [first, second]
    }

    /// A batch whose first caller is not traced still shows in the trace of
    /// the first caller that is (a sampled call behind an unsampled one).
    #[tokio::test]
    async fn a_batch_belongs_to_its_first_traced_callers_trace() {
        use opentelemetry::trace::SpanKind;

        use crate::trace::{self, Kept, RootSampler, Tracer};

        let store = Recording::new(false);
        let c = spawn(store.clone(), 16);
        let held = occupied(&c, &store).await;
        let untraced = call_in_task(&c, "untraced");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let kept = Kept::default();
        let tracer = Tracer::new(RootSampler::AlwaysOn, kept.clone());
        let call = tracer.root("call", SpanKind::Server, None);
        let traced = {
            let c = c.clone();
            tokio::spawn(trace::in_span(call.clone(), async move {
                c.call(candidate("traced")).await
            }))
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        store.gate.add_permits(100);
        for h in held.into_iter().chain([untraced, traced]) {
            h.await.unwrap().unwrap();
        }
        let batches = store.batches.lock().unwrap().clone();
        assert_eq!(batches[2], ["traced", "untraced"], "one batch of both");
        let call_id = call.context().unwrap().span_id();
        drop(call);
        let spans = kept.spans();
        let batch = spans
            .iter()
            .find(|s| s.name == "coalescer.batch")
            .unwrap_or_else(|| panic!("no batch span: {spans:#?}"));
        assert_eq!(batch.parent, call_id);
        assert!(batch.links.is_empty(), "nothing traced to link: {batch:#?}");
        let callers = batch
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "vfps.batch.callers")
            .map(|kv| kv.value.to_string());
        assert_eq!(callers.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn an_idle_call_runs_on_its_own_task_and_a_busy_one_on_a_worker() {
        let store = Recording::new(false);
        let c = spawn(store.clone(), 16);
        let [first, second] = occupied(&c, &store).await;
        let (first_task, second_task) = (first.id(), second.id());
        store.gate.add_permits(100);
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let tasks = store.tasks.lock().unwrap().clone();
        assert_eq!(tasks[0], Some(first_task), "idle: on the caller's task");
        assert_ne!(tasks[1], Some(second_task), "busy: on a worker");
    }

    #[tokio::test]
    async fn the_workers_bound_the_batches_executing_at_once() {
        let store = Recording::new(false);
        let limits = Limits {
            workers: 3,
            max_batch: 1,
            max_queue: 64,
        };
        let c = Coalescer::spawn(store.clone(), limits, Arc::new(|_| {}));
        let calls: Vec<Call> = (0..10)
            .map(|i| call_in_task(&c, &format!("o{i}")))
            .collect();
        // One on its caller's task, one on each worker; the rest wait.
        batches_seen(&store, 4).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.batches.lock().unwrap().len(), 4);
        store.gate.add_permits(100);
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(store.batches.lock().unwrap().len(), 10);
    }

    /// A caller gone at its deadline while its batch of one runs on its task
    /// does not cut the statement off (on PostgreSQL its connection would be
    /// discarded, and a flood of callers with tiny deadlines would reopen
    /// connections as fast as they leave): the statement finishes on a task
    /// of its own, and then the slot is free again.
    #[tokio::test]
    async fn a_call_dropped_while_running_on_its_own_task_finishes_its_statement() {
        let store = Recording::new(false);
        let c = spawn(store.clone(), 16);
        // Runs on this task, held at the gate, and is dropped there.
        let gone = tokio::time::timeout(Duration::from_millis(50), c.call(candidate("gone"))).await;
        assert!(gone.is_err(), "the caller timed out");
        store.gate.add_permits(100);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while store.finished.load(Ordering::SeqCst) < 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the dropped caller's statement was cut off"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while c.shared.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Idle again: the next call runs on its own task too.
        let next = call_in_task(&c, "next");
        let next_task = next.id();
        next.await.unwrap().unwrap();
        let tasks = store.tasks.lock().unwrap().clone();
        assert_eq!(tasks.len(), 2);
        assert_eq!(
            tasks[1],
            Some(next_task),
            "the dropped call's slot was freed"
        );
    }

    #[tokio::test]
    async fn a_full_queue_is_unavailable_at_once() {
        let store = Recording::new(false);
        let c = spawn(store.clone(), 2);
        // Two batches execute (held at the gate), two calls wait in the queue.
        let [first, second] = occupied(&c, &store).await;
        let queued: Vec<_> = (0..2)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.call(candidate(&format!("q{i}"))).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let e = tokio::time::timeout(Duration::from_millis(100), c.call(candidate("over")))
            .await
            .expect("refused at once, not queued")
            .unwrap_err();
        assert!(e.is_transient() && e.message.contains("overloaded"), "{e}");
        store.gate.add_permits(100);
        assert!(first.await.unwrap().is_ok());
        assert!(second.await.unwrap().is_ok());
        for q in queued {
            assert!(q.await.unwrap().is_ok());
        }
    }

    #[tokio::test]
    async fn candidates_whose_callers_left_are_not_written() {
        let store = Recording::new(false);
        let c = spawn(store.clone(), 16);
        let [first, second] = occupied(&c, &store).await;
        // These wait behind the executing batches; their callers give up.
        let gone = tokio::time::timeout(Duration::from_millis(20), c.call(candidate("gone"))).await;
        assert!(gone.is_err(), "the caller timed out");
        let kept = tokio::spawn({
            let c = c.clone();
            async move { c.call(candidate("kept")).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        store.gate.add_permits(100);
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        kept.await.unwrap().unwrap();
        let written: Vec<String> = store.batches.lock().unwrap().concat();
        assert!(written.contains(&"kept".to_owned()));
        assert!(!written.contains(&"gone".to_owned()), "{written:?}");
    }

    async fn a_batch_with_one_bad_row(transient: bool) -> Vec<Result<Upserted, Error>> {
        let store = Recording::new(transient);
        let c = spawn(store.clone(), 64);
        let [first, second] = occupied(&c, &store).await;
        // Queued together behind the executing batches: they become one batch.
        let calls: Vec<_> = ["a", "poison", "b", "c"]
            .into_iter()
            .map(|o| {
                let c = c.clone();
                tokio::spawn(async move { c.call(candidate(o)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.gate.add_permits(1000);
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let mut results = Vec::new();
        for call in calls {
            results.push(call.await.unwrap());
        }
        assert_eq!(
            store.batches.lock().unwrap()[2].len(),
            4,
            "the four were one batch"
        );
        results
    }

    #[tokio::test]
    async fn one_bad_row_fails_only_its_own_caller() {
        let results = a_batch_with_one_bad_row(false).await;
        for (i, r) in results.iter().enumerate() {
            if i == 1 {
                let e = r.as_ref().unwrap_err();
                assert_eq!(e.kind, vfps_core::ErrorKind::InvalidArgument, "{e}");
            } else {
                assert!(r.is_ok(), "innocent row {i} failed: {r:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_transient_batch_failure_is_unavailable_for_everyone() {
        let results = a_batch_with_one_bad_row(true).await;
        assert!(results
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.is_transient())));
    }
}
