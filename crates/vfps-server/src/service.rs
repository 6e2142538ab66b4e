//! The transport-independent core of vfps: what every gRPC, REST and FHIR call
//! does, with transient database errors retried inside the call's deadline.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use opentelemetry::{trace::SpanKind, KeyValue};
use tokio::time::timeout_at;
use vfps_core::{
    now_micros, Error, ErrorKind, Namespace, NamespaceName, OriginalValue, PageCursor, Pseudonym,
    PseudonymPage, PseudonymValue, TransientCause,
};
use vfps_store::{coalesce::Coalescer, trace, Candidate, Lookup, Store, Upserted};

mod erasure;
mod multi;
mod namespaces;
mod original_system;
mod together;
pub use erasure::Erasure;
pub use multi::{MAX_NEW_PSEUDONYMS, MAX_PSEUDONYMS_PER_ORIGINAL};
pub use namespaces::NewNamespace;
pub use original_system::Adopt;

use crate::{
    cache::TtlCache,
    config::{Batching, Caching},
    metrics::Metrics,
};

/// How many times a freshly generated pseudonym may collide before giving up.
const MAX_COLLISIONS: u32 = 16;
/// Default and maximum page size of List.
const DEFAULT_PAGE_SIZE: u32 = 25;
const MAX_PAGE_SIZE: u32 = 1000;
/// The create path's namespace cache holds at least this many namespaces.
const MIN_NAMESPACE_ENTRIES: usize = 1024;

/// An original's pseudonym, and whether the call that answered it made it.
#[derive(Debug, Clone)]
pub struct Pseudonymized {
    pub pseudonym: Pseudonym,
    /// Stored by this call (not found, not served from a cache).
    pub made: bool,
}

/// The service. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    store: Arc<dyn Store>,
    /// Batches concurrent Creates into multi-row upserts.
    coalescer: Coalescer<Candidate>,
    /// Batches concurrent Gets into multi-row lookups, where the store says
    /// that is worth it (a database in another process).
    lookups: Option<Coalescer<Lookup>>,
    /// Namespace settings, always on for Creates: a candidate carries the
    /// namespace's uid and the batch statement inserts nothing for another
    /// incarnation, so a stale entry costs one re-read, never a wrong write.
    namespaces: Arc<TtlCache<NamespaceName, Arc<Namespace>>>,
    /// `Pseudonymization__Caching__Namespaces__IsEnabled` (off by default, as
    /// upstream): reads (List's existence check) are served from the cache too,
    /// while the store's coherence says the namespace was not deleted since.
    namespaces_for_reads: bool,
    /// `Pseudonymization__Caching__Pseudonyms`: original → pseudonym, per replica,
    /// under the same rule.
    pseudonyms: Option<Arc<TtlCache<(NamespaceName, OriginalValue), Pseudonym>>>,
    metrics: Metrics,
    /// When the last interactive Create or Get arrived, for the CSV jobs'
    /// runners to make way.
    interactive: Arc<Interactive>,
    /// `VFPS_KEYS`: the namespaces' keys; new namespaces' originals are
    /// sealed at rest when there is a key source (docs/privacy.md).
    keys: Option<Arc<vfps_keys::Keyring>>,
}

/// When interactive callers last used the pseudonym calls.
#[derive(Debug)]
pub struct Interactive {
    origin: Instant,
    /// Milliseconds since `origin` of the last call.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Interactive {
    /// Calls within this long count as interactive load now.
    const RECENT: Duration = Duration::from_millis(500);

    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_ms
            .store(now.max(1), std::sync::atomic::Ordering::Relaxed);
    }
}

impl vfps_jobs::runner::Pressure for Interactive {
    fn interactive(&self) -> bool {
        let last = self.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        last > 0
            && self.origin.elapsed().as_millis() as u64 <= last + Self::RECENT.as_millis() as u64
    }
}

/// How a store operation shows in a trace.
#[derive(Debug, Clone, Copy)]
enum Shown {
    /// A span of its own, named after the operation, within the call's.
    OwnSpan,
    /// In the call's span, for an operation the coalescer batches: the
    /// coalescer's wait and batch spans show its database time, so a span of
    /// its own would only repeat the call's; its attempts, failure and `retry`
    /// events are the call span's.
    InCall,
}

impl Service {
    pub fn new(
        store: Arc<dyn Store>,
        batching: Batching,
        caching: Caching,
        metrics: Metrics,
    ) -> Self {
        let limits = batching.limits(store.write_parallelism());
        let coalescer = Coalescer::spawn(store.clone(), limits, Arc::new(metrics.clone()));
        let lookups = store
            .batches_reads()
            .then(|| Coalescer::spawn(store.clone(), limits, metrics.lookup_batches()));
        Self {
            store,
            coalescer,
            lookups,
            namespaces: {
                let (expiration, size) = caching.namespace_cache();
                Arc::new(TtlCache::new(expiration, size.max(MIN_NAMESPACE_ENTRIES)))
            },
            namespaces_for_reads: caching.namespaces,
            pseudonyms: caching.pseudonyms.then(|| {
                let (expiration, size) = caching.pseudonym_cache();
                Arc::new(TtlCache::new(expiration, size))
            }),
            metrics,
            interactive: Arc::new(Interactive::new()),
            keys: None,
        }
    }

    /// This service, sealing new namespaces' originals under `keys`.
    pub fn with_keys(self, keys: Option<Arc<vfps_keys::Keyring>>) -> Self {
        Self { keys, ..self }
    }

    /// The keyring, if the deployment has a key source.
    pub fn keys(&self) -> Option<&Arc<vfps_keys::Keyring>> {
        self.keys.as_ref()
    }

    /// How `original` is kept in `ns` (its blind index in a sealed
    /// namespace), within `deadline`.
    pub(crate) async fn stored_original(
        &self,
        ns: &Namespace,
        original: &OriginalValue,
        deadline: Instant,
    ) -> Result<vfps_keys::Stored, Error> {
        let keys = self.keys.as_deref();
        self.retry("namespace_keys", deadline, || {
            vfps_keys::keyring::stored(keys, ns, original)
        })
        .await
    }

    /// The row of the original kept as `stored`: by its form, then, while
    /// the namespace's rows are being moved, by the other.
    pub(crate) async fn find_stored(
        &self,
        name: &NamespaceName,
        stored: &vfps_keys::Stored,
        deadline: Instant,
    ) -> Result<Option<Pseudonym>, Error> {
        for key in std::iter::once(&stored.key).chain(stored.also.as_ref()) {
            let found = self
                .retry("find_pseudonym", deadline, || {
                    self.store.find_pseudonym(name, key)
                })
                .await?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Whether `current` keeps its originals otherwise than `known` (another
    /// incarnation, or sealed or moving since): what `known` made is stale.
    pub(crate) fn kept_otherwise(known: &Namespace, current: &Namespace) -> bool {
        current.uid != known.uid
            || current.settings.sealed != known.settings.sealed
            || current.settings.moving != known.settings.moving
            || current.settings.index_version != known.settings.index_version
    }

    /// `p`, a row of `ns` as stored, with its original opened.
    pub(crate) async fn opened(
        &self,
        ns: &Namespace,
        p: Pseudonym,
        deadline: Instant,
    ) -> Result<Pseudonym, Error> {
        if p.original_sealed.is_none() {
            return Ok(p);
        }
        let keys = self.keys.as_deref();
        self.retry("namespace_keys", deadline, || {
            vfps_keys::keyring::open(keys, ns, p.clone())
        })
        .await
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// When interactive callers last used Create or Get.
    pub fn interactive(&self) -> Arc<Interactive> {
        self.interactive.clone()
    }

    /// Runs a store operation, retrying transient failures with capped exponential
    /// backoff until `deadline`; then answers `Unavailable` with the last cause.
    /// Traced as one span named after the operation, with a `retry` event (and a
    /// count in `vfps_store_retries_total`) per retry, by cause.
    async fn retry<T, F, Fut>(
        &self,
        operation: &'static str,
        deadline: Instant,
        op: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        self.retry_traced(operation, Shown::OwnSpan, deadline, op)
            .await
    }

    /// [`Service::retry`], shown in a trace as `shown` says.
    async fn retry_traced<T, F, Fut>(
        &self,
        operation: &'static str,
        shown: Shown,
        deadline: Instant,
        mut op: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let span = match shown {
            Shown::OwnSpan => trace::parent().child(operation, SpanKind::Internal),
            Shown::InCall => trace::parent(),
        };
        let traced = match shown {
            Shown::OwnSpan => span.clone(),
            // Already the parent of what the operation makes.
            Shown::InCall => trace::Span::none(),
        };
        let attempts = async move {
            let mut backoff = Duration::from_millis(25);
            let mut attempt = 0u32;
            let give_up = |cause: TransientCause, e: Error| {
                span.set("error.type", cause.as_str());
                Err(e.because(cause))
            };
            loop {
                attempt += 1;
                // Added, not set: a call's batched operations share its span.
                span.add("vfps.attempts", 1);
                let started = Instant::now();
                let result = timeout_at(deadline.into(), op()).await;
                self.metrics.observe_store(operation, started.elapsed());
                let (last, cause) = match result {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) => match e.transient_cause() {
                        Some(cause) => (e, cause),
                        None => {
                            span.set("error.type", crate::metrics::code_name(Some(e.kind)));
                            return Err(e);
                        }
                    },
                    Err(_) => {
                        return give_up(TransientCause::Timeout, Error::unavailable(format!(
                            "{operation}: the database did not answer within the call's deadline ({attempt} attempts)"
                        )))
                    }
                };
                let jitter =
                    Duration::from_millis(rand::random_range(0..=backoff.as_millis() as u64 / 2));
                let wait = backoff + jitter;
                if Instant::now() + wait >= deadline {
                    return give_up(cause, Error::unavailable(format!(
                        "{operation}: {} (gave up after {attempt} attempts within the call's deadline)",
                        last.message
                    )));
                }
                self.metrics.retry(cause);
                span.event(
                    "retry",
                    [
                        KeyValue::new("reason", cause.as_str()),
                        KeyValue::new("attempt", i64::from(attempt)),
                        KeyValue::new("backoff_ms", wait.as_millis() as i64),
                    ],
                );
                tracing::debug!(operation, attempt, error = %last, "transient database error, retrying");
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        };
        // Untraced, the span is none: nothing below needs it as a parent.
        if traced.is_recording() {
            trace::in_span(traced, attempts).await
        } else {
            attempts.await
        }
    }

    /// Whether a cache entry of `namespace` read at `read_at` may be served.
    fn fresh(&self, namespace: &NamespaceName, read_at: Instant) -> bool {
        self.store.coherence().fresh(namespace.as_str(), read_at)
    }

    /// Whether anything served from a cache depends on the store's coherence
    /// (and a delete must wait its settle delay).
    fn caches(&self) -> bool {
        self.namespaces_for_reads || self.pseudonyms.is_some()
    }

    /// The namespace for a Create: from the cache whatever its age (the batch
    /// statement checks its uid), else from the store.
    async fn namespace_for_create(
        &self,
        name: &NamespaceName,
        deadline: Instant,
    ) -> Result<Arc<Namespace>, Error> {
        match self.namespaces.get(name) {
            Some((ns, _)) => Ok(ns),
            None => self.read_namespace(name, deadline).await,
        }
    }

    /// The namespace for a read: from the cache only when reads may use it and
    /// no deletion of it can have been missed.
    async fn namespace_for_read(
        &self,
        name: &NamespaceName,
        deadline: Instant,
    ) -> Result<Arc<Namespace>, Error> {
        if self.namespaces_for_reads {
            if let Some((ns, read_at)) = self.namespaces.get(name) {
                if self.fresh(name, read_at) {
                    return Ok(ns);
                }
            }
        }
        self.read_namespace(name, deadline).await
    }

    /// Reads a namespace from the store and caches it.
    async fn read_namespace(
        &self,
        name: &NamespaceName,
        deadline: Instant,
    ) -> Result<Arc<Namespace>, Error> {
        let read_at = Instant::now();
        let found = self
            .retry("get_namespace", deadline, || self.store.get_namespace(name))
            .await?
            .ok_or_else(|| Error::not_found(format!("namespace {name} not found")))?;
        let found = Arc::new(found);
        self.namespaces.insert(name.clone(), found.clone(), read_at);
        Ok(found)
    }

    /// Entries in this replica's caches (namespaces and pseudonyms).
    pub fn cache_entries(&self) -> usize {
        self.namespaces.len() + self.pseudonyms.as_ref().map_or(0, |c| c.len())
    }

    /// Forgets a cached namespace (it may have vanished).
    fn forget_namespace(&self, name: &NamespaceName) {
        self.namespaces.remove(name);
    }

    /// Forgets a deleted namespace and, with it, its cached pseudonyms (to free
    /// their memory: the store's coherence already makes them unservable).
    fn forget(&self, name: &NamespaceName) {
        self.forget_namespace(name);
        if let Some(cache) = &self.pseudonyms {
            cache.remove_where(|(ns, _)| ns == name);
        }
    }

    /// Returns the original's pseudonym, creating it if there is none.
    pub async fn create_pseudonym(
        &self,
        namespace: &str,
        original: &str,
        deadline: Instant,
    ) -> Result<Pseudonym, Error> {
        self.pseudonymize(namespace, original, deadline)
            .await
            .map(|p| p.pseudonym)
    }

    /// [`Service::create_pseudonym`], saying whether this call made it (FHIR
    /// answers `201 Created` then).
    pub async fn pseudonymize(
        &self,
        namespace: &str,
        original: &str,
        deadline: Instant,
    ) -> Result<Pseudonymized, Error> {
        self.interactive.touch();
        let name = NamespaceName::parse(namespace)?;
        let original = OriginalValue::parse(original)?;
        let mut ns = self.namespace_for_create(&name, deadline).await?;
        if ns.settings.multi {
            // A cached namespace may have been replaced by a single one.
            self.forget_namespace(&name);
            ns = self.read_namespace(&name, deadline).await?;
            multi::single_only(&ns)?;
        }
        if let Some(cache) = &self.pseudonyms {
            let hit = cache
                .get(&(name.clone(), original.clone()))
                .filter(|(_, read_at)| self.fresh(&name, *read_at));
            self.metrics.pseudonym_cache(hit.is_some());
            if let Some((p, _)) = hit {
                return Ok(Pseudonymized {
                    pseudonym: p,
                    made: false,
                });
            }
        }
        let mut collisions = 0;
        let mut stored = self.stored_original(&ns, &original, deadline).await?;
        while collisions < MAX_COLLISIONS {
            let read_at = Instant::now();
            // Rows being moved to the other form: one not moved yet is it.
            if let Some(also) = &stored.also {
                let found = self
                    .retry("find_pseudonym", deadline, || {
                        self.store.find_pseudonym(&name, also)
                    })
                    .await?;
                if let Some(mut p) = found {
                    p.original_value = original.as_str().to_owned();
                    p.original_sealed = None;
                    return Ok(Pseudonymized {
                        pseudonym: p,
                        made: false,
                    });
                }
            }
            let pseudonym = stored.generate(&ns.settings, &original)?;
            let candidate = Candidate {
                namespace: name.clone(),
                namespace_uid: ns.uid,
                original: stored.key.clone(),
                sealed: stored.seal(&pseudonym, &original)?,
                moving: stored.moving,
                pseudonym,
                created_at: now_micros(),
            };
            let result = self
                .retry_traced("upsert_pseudonyms", Shown::InCall, deadline, || {
                    self.coalescer.call(candidate.clone())
                })
                .await?;
            match result {
                Upserted::Stored(mut p) => {
                    // The caller's original, not the row's index.
                    p.original_value = original.as_str().to_owned();
                    p.original_sealed = None;
                    if let Some(cache) = &self.pseudonyms {
                        cache.insert((name.clone(), original.clone()), p.clone(), read_at);
                    }
                    // This call's candidate is what was stored (an earlier
                    // attempt of it may have committed it): made here.
                    let made = p.pseudonym_value == candidate.pseudonym
                        && p.created_at == candidate.created_at;
                    return Ok(Pseudonymized { pseudonym: p, made });
                }
                Upserted::Conflict => {
                    // The namespace vanished, is another incarnation or
                    // keeps its originals otherwise now (perhaps while
                    // cached), or the pseudonym collided.
                    self.forget_namespace(&name);
                    let current = self.read_namespace(&name, deadline).await?;
                    multi::single_only(&current)?;
                    if Self::kept_otherwise(&ns, &current) {
                        ns = current;
                        stored = self.stored_original(&ns, &original, deadline).await?;
                        continue;
                    }
                    collisions += 1;
                    self.metrics.pseudonym_collision();
                    if ns.settings.method.is_deterministic() {
                        break;
                    }
                }
            }
        }
        Err(Error::new(
            ErrorKind::ResourceExhausted,
            format!("could not generate an unused pseudonym in namespace {name}; choose a longer pseudonym length"),
        ))
    }

    pub async fn get_pseudonym(
        &self,
        namespace: &str,
        pseudonym_value: &str,
        deadline: Instant,
    ) -> Result<Pseudonym, Error> {
        self.interactive.touch();
        let name = NamespaceName::parse(namespace)?;
        let pseudonym_value = PseudonymValue::parse(pseudonym_value)?;
        let lookup = Lookup {
            namespace: name.clone(),
            pseudonym_value,
        };
        // Batched only where the store has a lookup coalescer.
        let shown = match self.lookups {
            Some(_) => Shown::InCall,
            None => Shown::OwnSpan,
        };
        let found = self
            .retry_traced("get_pseudonym", shown, deadline, || async {
                match &self.lookups {
                    Some(lookups) => lookups.call(lookup.clone()).await,
                    None => {
                        self.store
                            .get_pseudonym(&lookup.namespace, &lookup.pseudonym_value)
                            .await
                    }
                }
            })
            .await?
            .ok_or_else(|| Error::not_found(format!("pseudonym not found in namespace {name}")))?;
        if found.original_sealed.is_none() {
            return Ok(found);
        }
        // Its keys are the namespace's incarnation's: any cached one will do,
        // whether reads use the cache or not (they read the row, not the
        // namespace). A row of another incarnation does not open under it
        // (its ciphertext is bound to its namespace's uid), and then the
        // namespace is read anew.
        let ns = match self.namespaces.get(&name) {
            Some((ns, _)) => ns,
            None => self.read_namespace(&name, deadline).await?,
        };
        match self.opened(&ns, found.clone(), deadline).await {
            Ok(p) => Ok(p),
            // Sealed for another incarnation than the one cached: read it anew.
            Err(_) => {
                self.forget_namespace(&name);
                let ns = self.read_namespace(&name, deadline).await?;
                self.opened(&ns, found, deadline).await
            }
        }
    }

    pub async fn list_pseudonyms(
        &self,
        namespace: &str,
        page_size: i32,
        page_token: &str,
        include_total_size: bool,
        deadline: Instant,
    ) -> Result<PseudonymPage, Error> {
        let name = NamespaceName::parse(namespace)?;
        let size = match u32::try_from(page_size) {
            Ok(0) | Err(_) => DEFAULT_PAGE_SIZE,
            Ok(n) => n.min(MAX_PAGE_SIZE),
        };
        let cursor = if page_token.is_empty() {
            None
        } else {
            Some(PageCursor::decode(page_token)?)
        };
        let ns = self.namespace_for_read(&name, deadline).await?;
        let mut page = if ns.settings.multi {
            self.retry("list_pseudonyms", deadline, || {
                self.store
                    .list_multi_pseudonyms(&name, size, cursor.as_ref(), include_total_size)
            })
            .await?
        } else {
            self.retry("list_pseudonyms", deadline, || {
                self.store
                    .list_pseudonyms(&name, size, cursor.as_ref(), include_total_size)
            })
            .await?
        };
        for p in &mut page.items {
            // A sealed row's original is its blind index here; a List
            // answers no original either way.
            if p.original_sealed.take().is_some() {
                p.original_value.clear();
            }
        }
        if vfps_core::generate::revealing() {
            // The self-test mode shows a page newest first.
            page.items.sort_by(|a, b| {
                b.created_at
                    .cmp(&a.created_at)
                    .then(b.pseudonym_value.cmp(&a.pseudonym_value))
            });
        }
        Ok(page)
    }
}

/// Whether an attempt of a call failed in a way that leaves its commit unknown
/// (the connection broke or the answer did not come: the transaction may have
/// committed), as opposed to failures that certainly committed nothing (no
/// connection from the pool, a serialization failure, too many connections).
#[derive(Default)]
struct CommitUnknown(std::sync::atomic::AtomicBool);

impl CommitUnknown {
    /// `attempt`, noting whether it failed with its commit unknown.
    async fn watch<T>(
        &self,
        attempt: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let result = attempt.await;
        if let Err(e) = &result {
            if matches!(
                e.transient_cause(),
                Some(TransientCause::Unavailable | TransientCause::Timeout)
            ) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        result
    }

    fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vfps_store::{
        sqlite::SqliteStore,
        trace::{Kept, RootSampler, Tracer},
    };

    use super::*;

    fn service() -> Service {
        let path = vfps_testkit::scratch_dir("service").join("vfps.sqlite");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let batching = Batching {
            max_batch: 64,
            max_queue: 1000,
            workers: None,
        };
        Service::new(store, batching, Caching::default(), Metrics::new().unwrap())
    }

    /// A Create that upserts twice (a collision, a recreated namespace) shows
    /// the attempts of both on its call span, not only the last upsert's.
    #[tokio::test]
    async fn a_calls_attempts_add_up_over_its_batched_operations() {
        let service = service();
        let kept = Kept::default();
        let tracer = Tracer::new(RootSampler::AlwaysOn, kept.clone());
        let call = tracer.root("call", SpanKind::Server, None);
        let deadline = Instant::now() + Duration::from_secs(10);
        trace::in_span(call.clone(), async {
            let mut failures_left = 2;
            service
                .retry_traced("upsert_pseudonyms", Shown::InCall, deadline, || {
                    let fail = failures_left > 0;
                    failures_left -= 1;
                    async move {
                        if fail {
                            Err(Error::unavailable("connection lost"))
                        } else {
                            Ok(())
                        }
                    }
                })
                .await
                .unwrap();
            service
                .retry_traced("upsert_pseudonyms", Shown::InCall, deadline, || async {
                    Ok::<_, Error>(())
                })
                .await
                .unwrap();
        })
        .await;
        drop(call);
        let spans = kept.spans();
        let call = spans.iter().find(|s| s.name == "call").unwrap();
        let attempts = call
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "vfps.attempts")
            .map(|kv| kv.value.to_string());
        assert_eq!(attempts.as_deref(), Some("4"), "3 attempts, then 1");
        let retries = call.events.iter().filter(|e| e.name == "retry").count();
        assert_eq!(retries, 2);
    }
}
