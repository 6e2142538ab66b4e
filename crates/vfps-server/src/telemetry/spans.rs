//! Where the service's spans ([`vfps_store::trace`]) end: each one is turned
//! into the SDK's `SpanData` (a move of its parts) and queued in the batch
//! processor, which exports them over OTLP. Also reads the caller's W3C trace
//! context from a call's headers.

use std::sync::Arc;

use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{SpanContext, TraceContextExt},
    InstrumentationScope,
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor},
};
use vfps_store::trace::{Finished, Sink};

/// Queues each span that ends in the batch processor.
pub(super) struct Exporting {
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
}

impl Exporting {
    pub(super) fn new(processor: Arc<BatchSpanProcessor>, scope: InstrumentationScope) -> Self {
        Self { processor, scope }
    }
}

impl Sink for Exporting {
    fn end(&self, span: Finished) {
        let mut events = SpanEvents::default();
        events.events = span.events;
        events.dropped_count = span.dropped_events;
        let mut links = SpanLinks::default();
        links.links = span.links;
        links.dropped_count = span.dropped_links;
        self.processor.on_end(SpanData {
            span_context: span.context,
            parent_span_id: span.parent,
            parent_span_is_remote: span.parent_remote,
            span_kind: span.kind,
            name: span.name,
            start_time: span.start,
            end_time: span.end,
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events,
            links,
            status: span.status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

/// The caller's W3C trace context: its `traceparent` and `tracestate`
/// headers.
#[derive(Default)]
pub(super) struct Caller<'a> {
    pub(super) traceparent: Option<&'a str>,
    pub(super) tracestate: Option<&'a str>,
}

impl Extractor for Caller<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

impl Caller<'_> {
    /// The caller's span, if the headers hold a valid W3C trace context.
    pub(super) fn context(&self) -> Option<SpanContext> {
        self.traceparent?;
        let cx = TraceContextPropagator::new().extract(self);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(span)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry::{
        trace::{SpanId, SpanKind, Status, TraceId},
        KeyValue,
    };
    use opentelemetry_sdk::{error::OTelSdkResult, trace::SpanExporter};
    use vfps_store::trace::{RootSampler, Tracer};

    use super::*;

    /// Keeps what it is given.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    #[test]
    fn an_ended_span_reaches_the_exporter_whole() {
        let kept = Kept::default();
        let processor = Arc::new(BatchSpanProcessor::builder(kept.clone()).build());
        let scope = InstrumentationScope::builder("test").build();
        let tracer = Tracer::new(
            RootSampler::AlwaysOn,
            Exporting::new(Arc::clone(&processor), scope.clone()),
        );
        let caller = Caller {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            tracestate: None,
        }
        .context();
        let call = tracer.root("svc/Method", SpanKind::Server, caller.as_ref());
        call.set("rpc.method", "Method");
        call.fail();
        let store = call.child("store", SpanKind::Internal);
        store.event("retry", [KeyValue::new("attempt", 1i64)]);
        let other = tracer.root("other", SpanKind::Server, None);
        store.link(&other);
        drop((store, call, other));
        processor.force_flush().unwrap();
        processor.shutdown().unwrap();
        let spans = kept.0.lock().unwrap().clone();
        let [store, call, other] = &spans[..] else {
            panic!("three spans: {spans:#?}")
        };
        assert_eq!(call.name, "svc/Method");
        assert_eq!(call.span_kind, SpanKind::Server);
        assert_eq!(
            call.span_context.trace_id(),
            TraceId::from(0x0af7651916cd43dd8448eb211c80319c_u128)
        );
        assert_eq!(call.parent_span_id, SpanId::from(0xb7ad6b7169203331_u64));
        assert!(call.parent_span_is_remote);
        assert_eq!(call.status, Status::error(""));
        assert_eq!(call.attributes, vec![KeyValue::new("rpc.method", "Method")]);
        assert_eq!(call.instrumentation_scope, scope);
        assert!(call.start_time <= call.end_time);
        assert_eq!(store.parent_span_id, call.span_context.span_id());
        assert!(!store.parent_span_is_remote);
        assert_eq!(store.events.events.len(), 1);
        assert_eq!(store.events.events[0].name, "retry");
        assert_eq!(store.links.links.len(), 1);
        assert_eq!(store.links.links[0].span_context, other.span_context);
    }

    #[test]
    fn a_callers_context_is_read_only_when_valid() {
        fn caller(tp: &str) -> Caller<'_> {
            Caller {
                traceparent: Some(tp),
                tracestate: Some("vendor=1"),
            }
        }
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
