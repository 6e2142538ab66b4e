//! The layer that turns the spans of [`SPANS_TARGET`](super::SPANS_TARGET) into
//! OpenTelemetry spans and hands each finished, sampled one to the batch
//! processor.
//!
//! Made for this service's few spans rather than taken from a general bridge: a
//! span's identity and sampling are decided when it starts, its fields are kept
//! as attributes from then on, and at its end one `SpanData` is built and queued.
//! A general bridge (tracing-opentelemetry) builds an SDK span and an
//! OpenTelemetry context per span on top, which under every-trace sampling was
//! a tenth of the server's CPU (see docs/performance.md).
//!
//! Fields with a meaning of their own, as OpenTelemetry bridges spell them:
//! `otel.name` (the span's name), `otel.kind` (`server`, `client`, …),
//! `otel.status_code` (`ERROR` or `OK`); `traceparent` and `tracestate` (the
//! caller's W3C trace context, the parent of a span that has no parent span).
//! Every other field is an attribute; an event inside a span is a span event
//! named after its message.

use std::{borrow::Cow, sync::Arc, time::SystemTime};

use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{
        Event as SpanEvent, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt,
        TraceFlags, TraceId, TraceState,
    },
    InstrumentationScope, Key, KeyValue, Value,
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor},
};
use tracing::{
    field::{Field, Visit},
    span::{Attributes, Id, Record as Values},
    Event, Subscriber,
};
use tracing_subscriber::{layer::Context, registry::LookupSpan, Layer};

/// The most links and events a span keeps (the SDK's default limits); more
/// are counted as dropped.
const MAX_LINKS: usize = 128;
const MAX_EVENTS: usize = 128;

/// Decides for a trace that starts here (no parent span, no caller's context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RootSampler {
    AlwaysOn,
    AlwaysOff,
    /// Keeps a trace when the low 63 bits of its id fall below this bound, the
    /// OpenTelemetry SDKs' `TraceIdRatioBased` rule.
    Ratio(u64),
}

impl RootSampler {
    pub(super) fn ratio(probability: f64) -> Self {
        if probability >= 1.0 {
            Self::AlwaysOn
        } else {
            Self::Ratio((probability.max(0.0) * (1u64 << 63) as f64) as u64)
        }
    }

    fn samples(self, trace: TraceId) -> bool {
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

/// See the module's documentation.
pub(super) struct SpanLayer {
    processor: Arc<BatchSpanProcessor>,
    sampler: RootSampler,
    scope: InstrumentationScope,
}

impl SpanLayer {
    pub(super) fn new(
        processor: Arc<BatchSpanProcessor>,
        sampler: RootSampler,
        scope: InstrumentationScope,
    ) -> Self {
        Self {
            processor,
            sampler,
            scope,
        }
    }
}

/// What a span carries from its start to its end, in the registry's
/// extensions. Unsampled spans keep only their context (for their children).
struct Record {
    context: SpanContext,
    parent: SpanId,
    parent_remote: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: SpanEvents,
    links: SpanLinks,
    status: Status,
}

impl Record {
    fn sampled(&self) -> bool {
        self.context.is_sampled()
    }

    fn set(&mut self, key: &'static str, value: Value) {
        match self.attributes.iter_mut().find(|kv| kv.key.as_str() == key) {
            Some(kv) => kv.value = value,
            None => self
                .attributes
                .push(KeyValue::new(Key::from_static_str(key), value)),
        }
    }

    fn link(&mut self, context: SpanContext) {
        if self.links.links.len() < MAX_LINKS {
            self.links.links.push(Link::with_context(context));
        } else {
            self.links.dropped_count += 1;
        }
    }
}

/// Where a visitor puts fields: a string field may have a meaning of its own
/// (a span's `otel.*`, an event's message); any other is an attribute.
trait Sink {
    fn text(&mut self, field: &Field, value: &str);
    fn value(&mut self, field: &Field, value: Value);
}

/// Visits fields into a [`Sink`].
struct Fields<'a, T>(&'a mut T);

impl<T: Sink> Visit for Fields<'_, T> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.text(field, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.text(field, &format!("{value:?}"));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.value(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.value(field, integer(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.value(field, Value::Bool(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.value(field, Value::F64(value));
    }
}

/// A span's fields: its name, kind and status, or attributes.
impl Sink for Record {
    fn text(&mut self, field: &Field, value: &str) {
        match field.name() {
            "otel.name" => self.name = Cow::Owned(value.to_owned()),
            "otel.kind" => self.kind = kind(value),
            "otel.status_code" => self.status = status(value),
            "traceparent" | "tracestate" => {}
            _ => self.value(field, Value::from(value.to_owned())),
        }
    }
    fn value(&mut self, field: &Field, value: Value) {
        self.set(field.name(), value);
    }
}

/// An event's name (its message) and attributes (its other fields).
#[derive(Default)]
struct EventFields {
    name: Option<String>,
    attributes: Vec<KeyValue>,
}

impl Sink for EventFields {
    fn text(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.name = Some(value.to_owned()),
            _ => self.value(field, Value::from(value.to_owned())),
        }
    }
    fn value(&mut self, field: &Field, value: Value) {
        self.attributes
            .push(KeyValue::new(Key::from_static_str(field.name()), value));
    }
}

/// The caller's W3C trace context, as the span's `traceparent` and
/// `tracestate` fields carry it.
#[derive(Default)]
struct Caller {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Visit for Caller {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "traceparent" => self.traceparent = Some(value.to_owned()),
            "tracestate" => self.tracestate = Some(value.to_owned()),
            _ => {}
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl Extractor for Caller {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent.as_deref(),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

impl Caller {
    /// The caller's span, if the fields hold a valid W3C trace context.
    fn context(&self) -> Option<SpanContext> {
        self.traceparent.as_ref()?;
        let cx = TraceContextPropagator::new().extract(self);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(span)
    }
}

fn integer(value: u64) -> Value {
    match i64::try_from(value) {
        Ok(v) => Value::I64(v),
        Err(_) => Value::from(value.to_string()),
    }
}

fn kind(value: &str) -> SpanKind {
    match value.to_ascii_lowercase().as_str() {
        "server" => SpanKind::Server,
        "client" => SpanKind::Client,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

fn status(value: &str) -> Status {
    if value.eq_ignore_ascii_case("error") {
        Status::error("")
    } else if value.eq_ignore_ascii_case("ok") {
        Status::Ok
    } else {
        Status::Unset
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

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        // The parent span this layer sees (the registry resolves explicit and
        // contextual parents), else the caller's context, else a new trace.
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Record>()
                .map(|r| (r.context.clone(), false))
        });
        let parent = parent.or_else(|| {
            let mut caller = Caller::default();
            attrs.record(&mut caller);
            caller.context().map(|c| (c, true))
        });
        let (trace, flags, state, parent_id, parent_remote) = match parent {
            Some((p, remote)) => (
                p.trace_id(),
                p.trace_flags() & TraceFlags::SAMPLED,
                p.trace_state().clone(),
                p.span_id(),
                remote,
            ),
            None => {
                let trace = new_trace_id();
                let flags = if self.sampler.samples(trace) {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::NOT_SAMPLED
                };
                (trace, flags, TraceState::NONE, SpanId::INVALID, false)
            }
        };
        let mut record = Record {
            context: SpanContext::new(trace, new_span_id(), flags, false, state),
            parent: parent_id,
            parent_remote,
            name: Cow::Borrowed(attrs.metadata().name()),
            kind: SpanKind::Internal,
            start: SystemTime::now(),
            attributes: Vec::new(),
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
        };
        if record.sampled() {
            record.attributes.reserve(attrs.fields().len());
            attrs.record(&mut Fields(&mut record));
        }
        span.extensions_mut().insert(record);
    }

    fn on_record(&self, id: &Id, values: &Values<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(record) = extensions.get_mut::<Record>().filter(|r| r.sampled()) {
            values.record(&mut Fields(record));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        let Some(target) = ctx
            .span(follows)
            .and_then(|f| f.extensions().get::<Record>().map(|r| r.context.clone()))
        else {
            return;
        };
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(record) = extensions.get_mut::<Record>().filter(|r| r.sampled()) {
            record.link(target);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(record) = extensions.get_mut::<Record>().filter(|r| r.sampled()) else {
            return;
        };
        if record.events.events.len() >= MAX_EVENTS {
            record.events.dropped_count += 1;
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut Fields(&mut fields));
        let name = fields
            .name
            .map(Cow::Owned)
            .unwrap_or(Cow::Borrowed(event.metadata().name()));
        record.events.events.push(SpanEvent::new(
            name,
            SystemTime::now(),
            fields.attributes,
            0,
        ));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(record) = span.extensions_mut().remove::<Record>() else {
            return;
        };
        if !record.sampled() {
            return;
        }
        self.processor.on_end(SpanData {
            span_context: record.context,
            parent_span_id: record.parent,
            parent_span_is_remote: record.parent_remote,
            span_kind: record.kind,
            name: record.name,
            start_time: record.start,
            end_time: SystemTime::now(),
            attributes: record.attributes,
            dropped_attributes_count: 0,
            events: record.events,
            links: record.links,
            status: record.status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry_sdk::{error::OTelSdkResult, trace::SpanExporter};
    use tracing_subscriber::{filter::Targets, layer::SubscriberExt};

    use super::*;
    use crate::telemetry::SPANS_TARGET;

    /// Keeps what it is given.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// Runs `f` under the span layer alone and returns the spans it exported.
    fn exported(sampler: RootSampler, f: impl FnOnce()) -> Vec<SpanData> {
        let kept = Kept::default();
        let processor = Arc::new(BatchSpanProcessor::builder(kept.clone()).build());
        let layer = SpanLayer::new(
            Arc::clone(&processor),
            sampler,
            InstrumentationScope::builder("test").build(),
        )
        .with_filter(Targets::new().with_target(SPANS_TARGET, tracing::Level::TRACE));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
        processor.force_flush().unwrap();
        processor.shutdown().unwrap();
        let spans = kept.0.lock().unwrap().clone();
        spans
    }

    const CALLER_TRACE: u128 = 0x0af7651916cd43dd8448eb211c80319c;
    const CALLER_SPAN: u64 = 0xb7ad6b7169203331;

    fn traceparent(flags: &str) -> String {
        format!("00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-{flags}")
    }

    #[test]
    fn fields_become_the_spans_name_kind_status_attributes_events_and_links() {
        let spans = exported(RootSampler::AlwaysOff, || {
            let tp = traceparent("01");
            let server = tracing::info_span!(
                target: SPANS_TARGET,
                "grpc",
                traceparent = tp.as_str(),
                tracestate = "vendor=1",
                otel.name = "svc/Method",
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                rpc.method = "Method",
                vfps.attempts = tracing::field::Empty,
            );
            let _entered = server.enter();
            server.record("vfps.attempts", 1u64);
            server.record("vfps.attempts", 2u64);
            server.record("otel.status_code", "ERROR");
            let other = tracing::info_span!(target: SPANS_TARGET, "other");
            let child = tracing::info_span!(target: SPANS_TARGET, "store", error.type = ?"Timeout");
            child.follows_from(&other);
            child.in_scope(|| {
                tracing::info!(target: SPANS_TARGET, reason = "timeout", attempt = 1u32, "retry");
            });
            // Not a span of SPANS_TARGET: not exported, and skipped as a parent.
            let log = tracing::info_span!("log line");
            log.in_scope(|| tracing::info_span!(target: SPANS_TARGET, "under a log span"));
        });
        let named = |n: &str| {
            spans
                .iter()
                .find(|s| s.name == n)
                .unwrap_or_else(|| panic!("no span {n}: {spans:#?}"))
        };
        let attribute = |s: &SpanData, k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(spans.len(), 4, "{spans:#?}");
        let server = named("svc/Method");
        // The caller's decision (sampled) overrides the root sampler (off).
        assert_eq!(server.span_context.trace_id(), TraceId::from(CALLER_TRACE));
        assert_eq!(server.parent_span_id, SpanId::from(CALLER_SPAN));
        assert!(server.parent_span_is_remote);
        assert_eq!(server.span_context.trace_state().get("vendor"), Some("1"));
        assert_eq!(server.span_kind, SpanKind::Server);
        assert_eq!(server.status, Status::error(""));
        assert_eq!(attribute(server, "rpc.method").as_deref(), Some("Method"));
        assert_eq!(attribute(server, "vfps.attempts").as_deref(), Some("2"));
        for hidden in ["traceparent", "tracestate", "otel.name", "otel.kind"] {
            assert_eq!(attribute(server, hidden), None, "{hidden} is an attribute");
        }
        assert_eq!(server.attributes.len(), 2, "{server:#?}");

        let store = named("store");
        let other = named("other");
        assert_eq!(store.parent_span_id, server.span_context.span_id());
        assert_eq!(other.span_context.trace_id(), TraceId::from(CALLER_TRACE));
        assert_eq!(store.span_kind, SpanKind::Internal);
        assert_eq!(
            attribute(store, "error.type").as_deref(),
            Some("\"Timeout\"")
        );
        assert_eq!(store.links.len(), 1);
        assert_eq!(store.links[0].span_context, other.span_context);
        assert_eq!(store.events.len(), 1);
        let retry = &store.events[0];
        assert_eq!(retry.name, "retry");
        assert_eq!(retry.attributes.len(), 2, "{retry:#?}");
        assert!(store.start_time <= store.end_time);

        let under_log = named("under a log span");
        assert_eq!(under_log.parent_span_id, server.span_context.span_id());
    }

    /// The server names parents instead of entering spans (`in_span`): a span
    /// or an event with an explicit parent belongs to it, entered or not.
    #[test]
    fn explicit_parents_need_no_entered_span() {
        let spans = exported(RootSampler::AlwaysOn, || {
            let call = tracing::info_span!(target: SPANS_TARGET, "call");
            let store = tracing::info_span!(target: SPANS_TARGET, parent: &call, "store");
            tracing::info!(target: SPANS_TARGET, parent: &store, reason = "timeout", "retry");
        });
        let [store, call] = &spans[..] else {
            panic!("two spans: {spans:#?}")
        };
        assert_eq!((store.name.as_ref(), call.name.as_ref()), ("store", "call"));
        assert_eq!(store.parent_span_id, call.span_context.span_id());
        assert_eq!(store.span_context.trace_id(), call.span_context.trace_id());
        assert_eq!(store.events.len(), 1, "{store:#?}");
        assert_eq!(store.events[0].name, "retry");
        assert!(call.events.is_empty());
    }

    #[test]
    fn the_callers_decision_or_else_the_root_sampler_decides() {
        let call = |flags: Option<&str>| {
            let tp = flags.map(traceparent);
            let span = tracing::info_span!(
                target: SPANS_TARGET,
                "grpc",
                traceparent = tp.as_deref(),
            );
            span.in_scope(|| tracing::info_span!(target: SPANS_TARGET, "store").in_scope(|| {}));
        };
        assert!(exported(RootSampler::AlwaysOn, || call(Some("00"))).is_empty());
        assert_eq!(
            exported(RootSampler::AlwaysOff, || call(Some("01"))).len(),
            2
        );
        assert!(exported(RootSampler::AlwaysOff, || call(None)).is_empty());
        let spans = exported(RootSampler::AlwaysOn, || call(None));
        assert_eq!(spans.len(), 2);
        assert!(spans
            .iter()
            .all(|s| s.span_context.trace_id() == spans[0].span_context.trace_id()));
        // An invalid caller's context starts a trace of its own.
        let spans = exported(RootSampler::AlwaysOn, || call(Some("zz")));
        assert_eq!(spans.len(), 2);
        assert_ne!(
            spans[0].span_context.trace_id(),
            TraceId::from(CALLER_TRACE)
        );
    }

    /// The ratio rule keeps the traces whose low 63 bits fall below the bound,
    /// as the OpenTelemetry SDKs do, so every replica (and every SDK) that sees
    /// a trace id decides alike.
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

    #[test]
    fn a_callers_context_is_read_only_when_valid() {
        let caller = |tp: &str| Caller {
            traceparent: Some(tp.to_owned()),
            tracestate: Some("vendor=1".to_owned()),
        };
        let cx = caller("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .context()
            .expect("a valid traceparent");
        assert_eq!(
            cx.trace_id(),
            TraceId::from(0x0af7651916cd43dd8448eb211c80319c_u128)
        );
        assert_eq!(cx.span_id(), SpanId::from(0xb7ad6b7169203331_u64));
        assert!(cx.is_sampled() && cx.is_remote());
        assert_eq!(cx.trace_state().get("vendor"), Some("1"));
        for bad in [
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "not a trace context",
        ] {
            assert!(caller(bad).context().is_none(), "{bad} was taken");
        }
        assert!(Caller::default().context().is_none());
    }
}
