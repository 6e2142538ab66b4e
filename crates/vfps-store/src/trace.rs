//! Trace spans, made by the service's own code and handed to a [`Sink`] (the
//! server's OpenTelemetry exporter) when they end.
//!
//! A span here is a reference-counted record: cloning it is a counter
//! increment, setting an attribute is a lock of its own record, and it ends
//! when its last clone is dropped. A span that is not recorded (tracing off,
//! or a trace its sampler left out) is nothing at all: every operation on it
//! is a branch, and so is every child made under it.
//!
//! Only [`Tracer::root`] starts a trace (the server's call spans, under the
//! caller's W3C context when it sent one); every other span is a child of the
//! span of the call it works for. Code below a call finds that span with
//! [`parent`]: the call runs [`in_span`], a task-local, rather than entering a
//! span at every poll. The `tracing` crate's spans would do all of this too,
//! at the price of its registry (every span allocated in a slab, looked up once
//! per layer filter at every record, clone, drop and close): about half of the
//! server's CPU cost of tracing, measured with nothing sampled (see
//! docs/performance.md).
//!
//! Spans carry names, kinds, counts and causes, never an original value, a
//! pseudonym or a credential.

use std::{
    borrow::Cow,
    future::Future,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::SystemTime,
};

use opentelemetry::{
    trace::{Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
    Key, KeyValue, Value,
};

/// The most links and events a span keeps (the OpenTelemetry SDKs' default
/// limits); more are counted as dropped.
pub const MAX_LINKS: usize = 128;
pub const MAX_EVENTS: usize = 128;

/// Decides for a trace that starts here (a call without a caller's context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSampler {
    AlwaysOn,
    AlwaysOff,
    /// Keeps a trace when the low 63 bits of its id fall below this bound, the
    /// OpenTelemetry SDKs' `TraceIdRatioBased` rule, so every replica (and
    /// every SDK) that sees a trace id decides alike.
    Ratio(u64),
}

impl RootSampler {
    /// Keeps `probability` of the traces (clamped to 0..=1).
    pub fn ratio(probability: f64) -> Self {
        if probability >= 1.0 {
            Self::AlwaysOn
        } else {
            Self::Ratio((probability.max(0.0) * (1u64 << 63) as f64) as u64)
        }
    }

    pub fn samples(self, trace: TraceId) -> bool {
        match self {
            Self::AlwaysOn => true,
            Self::AlwaysOff => false,
            Self::Ratio(bound) => {
                let low = u128::from_be_bytes(trace.to_bytes()) as u64;
                (low >> 1) < bound
            }
        }
    }
}

/// A span that has ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its trace, its id and the trace's flags and state.
    pub context: SpanContext,
    /// Its parent's id ([`SpanId::INVALID`] for none).
    pub parent: SpanId,
    /// Whether the parent is the caller's (another process's) span.
    pub parent_remote: bool,
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub events: Vec<Event>,
    pub dropped_events: u32,
    pub links: Vec<Link>,
    pub dropped_links: u32,
    pub status: Status,
}

/// Where ended spans go.
pub trait Sink: Send + Sync + 'static {
    /// Takes a span that has ended. Called on the thread that dropped the
    /// span's last clone: it must not block.
    fn end(&self, span: Finished);
}

/// A sink that keeps every span that ends in it (tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct Kept(Arc<Mutex<Vec<Finished>>>);

impl Sink for Kept {
    fn end(&self, span: Finished) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(span);
    }
}

impl Kept {
    /// The spans ended so far, in the order they ended.
    pub fn spans(&self) -> Vec<Finished> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Starts traces: the root sampler and the sink every span of its traces ends
/// in.
#[derive(Clone)]
pub struct Tracer(Arc<Inner>);

struct Inner {
    sampler: RootSampler,
    sink: Box<dyn Sink>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("sampler", &self.0.sampler)
            .finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<Tracer> = OnceLock::new();

/// Makes `tracer` the process's: the one [`global`] answers. Only the first
/// call installs one; a later one answers `false`.
pub fn install(tracer: Tracer) -> bool {
    GLOBAL.set(tracer).is_ok()
}

/// The process's tracer, if tracing is on.
pub fn global() -> Option<&'static Tracer> {
    GLOBAL.get()
}

impl Tracer {
    pub fn new(sampler: RootSampler, sink: impl Sink) -> Self {
        Self(Arc::new(Inner {
            sampler,
            sink: Box::new(sink),
        }))
    }

    /// The span of a call from outside, under `caller` (the caller's span,
    /// whose sampling decision it follows) or else the first of a new trace
    /// (which the root sampler decides on). Not recorded when not sampled.
    pub fn root(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        caller: Option<&SpanContext>,
    ) -> Span {
        let caller = caller.filter(|c| c.is_valid());
        let (trace, state, parent) = match caller {
            Some(c) if !c.is_sampled() => return Span::none(),
            Some(c) => (c.trace_id(), c.trace_state().clone(), c.span_id()),
            None => {
                let trace = new_trace_id();
                if !self.0.sampler.samples(trace) {
                    return Span::none();
                }
                (trace, TraceState::NONE, SpanId::INVALID)
            }
        };
        Span::start(
            self.clone(),
            trace,
            state,
            parent,
            caller.is_some(),
            name,
            kind,
        )
    }
}

/// A recorded span, or nothing (see the module's documentation).
#[derive(Clone, Default)]
pub struct Span(Option<Arc<Live>>);

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(live) => write!(f, "Span({:?})", live.context.span_id()),
            None => f.write_str("Span(none)"),
        }
    }
}

struct Live {
    context: SpanContext,
    tracer: Tracer,
    record: Mutex<Record>,
}

/// What a span gathers from its start to its end.
struct Record {
    parent: SpanId,
    parent_remote: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    dropped_events: u32,
    links: Vec<Link>,
    dropped_links: u32,
    status: Status,
}

impl Default for Record {
    fn default() -> Self {
        Self {
            parent: SpanId::INVALID,
            parent_remote: false,
            name: Cow::Borrowed(""),
            kind: SpanKind::Internal,
            start: SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            events: Vec::new(),
            dropped_events: 0,
            links: Vec::new(),
            dropped_links: 0,
            status: Status::Unset,
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let record = std::mem::take(
            self.record
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.tracer.0.sink.end(Finished {
            context: self.context.clone(),
            parent: record.parent,
            parent_remote: record.parent_remote,
            name: record.name,
            kind: record.kind,
            start: record.start,
            end: SystemTime::now(),
            attributes: record.attributes,
            events: record.events,
            dropped_events: record.dropped_events,
            links: record.links,
            dropped_links: record.dropped_links,
            status: record.status,
        });
    }
}

impl Span {
    /// The span that records nothing.
    pub const fn none() -> Self {
        Self(None)
    }

    fn start(
        tracer: Tracer,
        trace: TraceId,
        state: TraceState,
        parent: SpanId,
        parent_remote: bool,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
    ) -> Self {
        let context = SpanContext::new(trace, new_span_id(), TraceFlags::SAMPLED, false, state);
        Self(Some(Arc::new(Live {
            context,
            tracer,
            record: Mutex::new(Record {
                parent,
                parent_remote,
                name: name.into(),
                kind,
                start: SystemTime::now(),
                ..Record::default()
            }),
        })))
    }

    /// Whether anything is recorded: what is set on a span that is not goes
    /// nowhere, so work done only for a span can be skipped.
    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    /// The span's trace and id, when it is recorded.
    pub fn context(&self) -> Option<&SpanContext> {
        self.0.as_ref().map(|live| &live.context)
    }

    /// Whether both are the same span (or both none).
    pub fn is(&self, other: &Span) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// A span within this one, in its trace; none under none.
    pub fn child(&self, name: impl Into<Cow<'static, str>>, kind: SpanKind) -> Span {
        match &self.0 {
            Some(live) => Self::start(
                live.tracer.clone(),
                live.context.trace_id(),
                live.context.trace_state().clone(),
                live.context.span_id(),
                false,
                name,
                kind,
            ),
            None => Self::none(),
        }
    }

    fn with_record(&self, f: impl FnOnce(&mut Record)) {
        if let Some(live) = &self.0 {
            f(&mut live.record.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Sets these attributes (replacing a value set before under the same key).
    pub fn set_all(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        self.with_record(|r| {
            for kv in attributes {
                match r.attributes.iter_mut().find(|old| old.key == kv.key) {
                    Some(old) => old.value = kv.value,
                    None => r.attributes.push(kv),
                }
            }
        });
    }

    /// Sets one attribute (replacing a value set before under `key`).
    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        if self.is_recording() {
            self.set_all([KeyValue::new(Key::from_static_str(key), value)]);
        }
    }

    /// Adds `n` to the integer attribute under `key` (which becomes `n` when
    /// it is unset or not an integer): a count several parts of a call add to.
    pub fn add(&self, key: &'static str, n: i64) {
        self.with_record(|r| {
            let key = Key::from_static_str(key);
            match r.attributes.iter_mut().find(|old| old.key == key) {
                Some(old) => {
                    old.value = match old.value {
                        Value::I64(v) => Value::I64(v.saturating_add(n)),
                        _ => Value::I64(n),
                    }
                }
                None => r.attributes.push(KeyValue::new(key, n)),
            }
        });
    }

    /// [`Span::set_all`], on this span, for a span just made.
    pub fn with(self, attributes: impl IntoIterator<Item = KeyValue>) -> Self {
        self.set_all(attributes);
        self
    }

    /// Names the span anew.
    pub fn rename(&self, name: impl Into<Cow<'static, str>>) {
        self.with_record(|r| r.name = name.into());
    }

    /// Marks the span failed.
    pub fn fail(&self) {
        self.with_record(|r| r.status = Status::error(""));
    }

    /// Adds an event at this time.
    pub fn event(
        &self,
        name: impl Into<Cow<'static, str>>,
        attributes: impl IntoIterator<Item = KeyValue>,
    ) {
        self.with_record(|r| {
            if r.events.len() < MAX_EVENTS {
                let attributes = attributes.into_iter().collect();
                r.events
                    .push(Event::new(name, SystemTime::now(), attributes, 0));
            } else {
                r.dropped_events = r.dropped_events.saturating_add(1);
            }
        });
    }

    /// Links this span to `other` (which it follows from), when both are
    /// recorded.
    pub fn link(&self, other: &Span) {
        let Some(target) = other.context() else {
            return;
        };
        self.with_record(|r| {
            if r.links.len() < MAX_LINKS {
                r.links.push(Link::with_context(target.clone()));
            } else {
                r.dropped_links = r.dropped_links.saturating_add(1);
            }
        });
    }
}

fn new_trace_id() -> TraceId {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return TraceId::from(id);
        }
    }
}

fn new_span_id() -> SpanId {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return SpanId::from(id);
        }
    }
}

tokio::task_local! {
    /// The span the spans made by this task belong under (see [`in_span`]).
    static PARENT: Span;
}

/// Runs `future` with `span` as the parent of the spans made within it
/// ([`parent`]), without entering anything at every poll.
pub fn in_span<F: Future>(span: Span, future: F) -> impl Future<Output = F::Output> {
    PARENT.scope(span, future)
}

/// [`in_span`] for a closure.
pub fn in_span_sync<R>(span: Span, f: impl FnOnce() -> R) -> R {
    PARENT.sync_scope(span, f)
}

/// The span given by the innermost [`in_span`] around the caller, or none.
pub fn parent() -> Span {
    PARENT.try_with(Span::clone).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracer(sampler: RootSampler) -> (Tracer, Kept) {
        let kept = Kept::default();
        (Tracer::new(sampler, kept.clone()), kept)
    }

    const CALLER_TRACE: u128 = 0x0af7651916cd43dd8448eb211c80319c;
    const CALLER_SPAN: u64 = 0xb7ad6b7169203331;

    fn caller(sampled: bool) -> SpanContext {
        let flags = match sampled {
            true => TraceFlags::SAMPLED,
            false => TraceFlags::NOT_SAMPLED,
        };
        let state = TraceState::from_key_value([("vendor", "1")]).unwrap();
        SpanContext::new(
            TraceId::from(CALLER_TRACE),
            SpanId::from(CALLER_SPAN),
            flags,
            true,
            state,
        )
    }

    fn attribute(s: &Finished, k: &str) -> Option<String> {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn added_counts_add_up_and_replace_what_is_not_an_integer() {
        let (tracer, kept) = tracer(RootSampler::AlwaysOn);
        let span = tracer.root("call", SpanKind::Server, None);
        span.add("a", 2);
        span.add("a", 3);
        span.set("b", "text");
        span.add("b", 1);
        span.add("c", i64::MAX);
        span.add("c", 1);
        drop(span);
        let spans = kept.spans();
        assert_eq!(attribute(&spans[0], "a").as_deref(), Some("5"));
        assert_eq!(attribute(&spans[0], "b").as_deref(), Some("1"));
        assert_eq!(
            attribute(&spans[0], "c"),
            Some(i64::MAX.to_string()),
            "saturates"
        );
        assert_eq!(spans[0].attributes.len(), 3);
        // Unsampled: nothing is kept, nothing fails.
        Span::none().add("a", 1);
    }

    #[test]
    fn a_span_keeps_its_name_kind_status_attributes_events_and_links_until_its_last_clone_ends() {
        let (tracer, kept) = tracer(RootSampler::AlwaysOff);
        let server = tracer.root("grpc", SpanKind::Server, Some(&caller(true)));
        server.rename("svc/Method");
        server.set("rpc.method", "Method");
        server.set("vfps.attempts", 1i64);
        server.set("vfps.attempts", 2i64);
        server.fail();
        let other = server.child("other", SpanKind::Internal);
        let store = server
            .child("store", SpanKind::Client)
            .with([KeyValue::new("error.type", "Timeout")]);
        store.link(&other);
        store.link(&Span::none());
        store.event(
            "retry",
            [
                KeyValue::new("reason", "timeout"),
                KeyValue::new("attempt", 1i64),
            ],
        );
        let clone = store.clone();
        drop(store);
        assert!(kept.spans().is_empty(), "a span ended while a clone lived");
        drop((clone, other, server));
        let spans = kept.spans();
        let named = |n: &str| {
            spans
                .iter()
                .find(|s| s.name == n)
                .unwrap_or_else(|| panic!("no span {n}: {spans:#?}"))
        };
        assert_eq!(spans.len(), 3, "{spans:#?}");
        let server = named("svc/Method");
        // The caller's decision (sampled) overrides the root sampler (off).
        assert_eq!(server.context.trace_id(), TraceId::from(CALLER_TRACE));
        assert_eq!(server.parent, SpanId::from(CALLER_SPAN));
        assert!(server.parent_remote);
        assert!(server.context.is_sampled() && !server.context.is_remote());
        assert_eq!(server.context.trace_state().get("vendor"), Some("1"));
        assert_eq!(server.kind, SpanKind::Server);
        assert_eq!(server.status, Status::error(""));
        assert_eq!(attribute(server, "rpc.method").as_deref(), Some("Method"));
        assert_eq!(attribute(server, "vfps.attempts").as_deref(), Some("2"));
        assert_eq!(server.attributes.len(), 2, "{server:#?}");

        let store = named("store");
        let other = named("other");
        assert_eq!(store.parent, server.context.span_id());
        assert!(!store.parent_remote);
        assert_eq!(other.context.trace_id(), TraceId::from(CALLER_TRACE));
        assert_eq!(store.kind, SpanKind::Client);
        assert_eq!(store.status, Status::Unset);
        assert_eq!(attribute(store, "error.type").as_deref(), Some("Timeout"));
        assert_eq!(store.links.len(), 1);
        assert_eq!(store.links[0].span_context, other.context);
        assert_eq!(store.events.len(), 1);
        assert_eq!(store.events[0].name, "retry");
        assert_eq!(store.events[0].attributes.len(), 2);
        assert!(store.start <= store.end);
        assert!(server.start <= store.start && store.end <= server.end);
    }

    #[test]
    fn events_and_links_beyond_the_limits_are_counted_as_dropped() {
        let (tracer, kept) = tracer(RootSampler::AlwaysOn);
        let span = tracer.root("call", SpanKind::Server, None);
        let other = tracer.root("other", SpanKind::Server, None);
        for _ in 0..MAX_EVENTS + 3 {
            span.event("retry", []);
            span.link(&other);
        }
        drop((span, other));
        let call = kept.spans().into_iter().find(|s| s.name == "call").unwrap();
        assert_eq!((call.events.len(), call.dropped_events), (MAX_EVENTS, 3));
        assert_eq!((call.links.len(), call.dropped_links), (MAX_LINKS, 3));
    }

    #[test]
    fn the_callers_decision_or_else_the_root_sampler_decides() {
        let call = |sampler, caller: Option<SpanContext>| {
            let (tracer, kept) = tracer(sampler);
            let span = tracer.root("call", SpanKind::Server, caller.as_ref());
            let child = in_span_sync(span.clone(), || parent().child("store", SpanKind::Internal));
            assert_eq!(span.is_recording(), child.is_recording());
            drop((span, child));
            kept.spans()
        };
        assert!(call(RootSampler::AlwaysOn, Some(caller(false))).is_empty());
        assert_eq!(call(RootSampler::AlwaysOff, Some(caller(true))).len(), 2);
        assert!(call(RootSampler::AlwaysOff, None).is_empty());
        let spans = call(RootSampler::AlwaysOn, None);
        assert_eq!(spans.len(), 2);
        assert!(spans
            .iter()
            .all(|s| s.context.trace_id() == spans[0].context.trace_id()));
        let [root, store] = &spans[..] else {
            unreachable!()
        };
        assert_eq!(store.parent, root.context.span_id());
        assert_eq!(root.parent, SpanId::INVALID);
        assert!(!root.parent_remote);
        // An invalid caller's context starts a trace of its own.
        let invalid = SpanContext::new(
            TraceId::INVALID,
            SpanId::from(CALLER_SPAN),
            TraceFlags::SAMPLED,
            true,
            TraceState::NONE,
        );
        let spans = call(RootSampler::AlwaysOn, Some(invalid));
        assert_eq!(spans.len(), 2);
        assert_ne!(spans[0].context.trace_id(), TraceId::INVALID);
        assert!(!spans[1].parent_remote);
    }

    #[test]
    fn a_span_that_is_not_recorded_takes_nothing_and_makes_nothing() {
        let none = Span::none();
        none.set("key", "value");
        none.event("retry", [KeyValue::new("attempt", 1i64)]);
        none.fail();
        assert!(!none.is_recording() && none.context().is_none());
        assert!(!none.child("store", SpanKind::Internal).is_recording());
        assert!(!parent().is_recording(), "a parent outside in_span");
        assert!(none.is(&Span::none()));
    }

    #[tokio::test]
    async fn in_span_is_the_parent_of_what_runs_within_and_no_longer() {
        let (tracer, _kept) = tracer(RootSampler::AlwaysOn);
        let call = tracer.root("call", SpanKind::Server, None);
        let inner = in_span(call.clone(), async {
            tokio::task::yield_now().await;
            parent()
        })
        .await;
        assert!(inner.is(&call));
        assert!(!parent().is_recording());
    }

    /// The ratio rule keeps the traces whose low 63 bits fall below the bound.
    #[test]
    fn the_ratio_sampler_decides_by_the_trace_ids_low_bits() {
        let half = RootSampler::ratio(0.5);
        assert!(half.samples(TraceId::from(
            0x0000_0000_0000_0000_3fff_ffff_ffff_ffff_u128
        )));
        assert!(!half.samples(TraceId::from(
            0x0000_0000_0000_0000_8000_0000_0000_0000_u128
        )));
        assert!(!half.samples(TraceId::from(
            0x7fff_ffff_ffff_ffff_ffff_ffff_ffff_ffff_u128
        )));
        assert_eq!(RootSampler::ratio(1.0), RootSampler::AlwaysOn);
        assert!(!RootSampler::ratio(0.0).samples(TraceId::from(2u128)));
        let kept = (0..10_000).filter(|_| half.samples(new_trace_id())).count();
        assert!(
            (4_500..5_500).contains(&kept),
            "{kept} of 10,000 kept at 0.5"
        );
    }
}
