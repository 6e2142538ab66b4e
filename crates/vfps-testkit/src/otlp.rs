//! An in-process OpenTelemetry collector for tests: a real tonic server of
//! OTLP/gRPC `TraceService/Export` that keeps every span it receives, flattened
//! into [`ReceivedSpan`]s that are easy to assert on (ids in hex, every value as
//! text). For benchmarks it can count the spans instead, keeping none: a
//! collector runs elsewhere in production, so the one sharing the benchmark's
//! cores should cost no more than receiving the bytes; it walks the
//! protobuf encoding to the spans and counts them, decoding nothing else.

mod counting;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        trace_service_server::{TraceService, TraceServiceServer},
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    },
    common::v1::{any_value::Value, AnyValue, KeyValue},
};
use tonic::{Request, Response, Status};

/// One exported span, as the collector received it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// 16 lower-case hex digits.
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub kind: SpanKind,
    /// The W3C `tracestate` the span was exported with.
    pub trace_state: String,
    pub attributes: BTreeMap<String, String>,
    /// Each event's name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// `(trace_id, span_id)` of each linked span.
    pub links: Vec<(String, String)>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    /// The exporting process's resource (`service.name`, …).
    pub resource: BTreeMap<String, String>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// Every piece of text the exporter sent for this span: its name, trace
    /// state, status message, resource, and every key and value of its
    /// attributes and events. For checks that something never leaves the process.
    pub fn texts(&self) -> Vec<&str> {
        let mut out = vec![
            self.name.as_str(),
            self.trace_state.as_str(),
            self.status_message.as_str(),
        ];
        out.extend(pairs(&self.attributes));
        out.extend(pairs(&self.resource));
        for (name, attributes) in &self.events {
            out.push(name);
            out.extend(pairs(attributes));
        }
        out
    }
}

fn pairs(m: &BTreeMap<String, String>) -> impl Iterator<Item = &str> {
    m.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()])
}

/// A running collector; dropping it stops the server.
pub struct Collector {
    /// `http://127.0.0.1:<port>`, for `Tracing__Otlp__Endpoint`.
    pub endpoint: String,
    pub addr: SocketAddr,
    /// Filled by the server task, read by the test.
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Spans received, kept or not.
    count: Arc<AtomicU64>,
    /// Dropped with the collector, which stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Collector {
    /// Starts the collector on a free port of 127.0.0.1, keeping every span.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(true).await
    }

    /// Starts a collector that counts spans (without decoding them) and keeps none
    /// ([`Collector::spans`] stays empty; see [`Collector::span_count`]).
    pub async fn start_counting() -> std::io::Result<Self> {
        Self::start_with(false).await
    }

    async fn start_with(keep: bool) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let count = Arc::new(AtomicU64::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let stop = async {
            let _ = rx.await;
        };
        let mut server = tonic::transport::Server::builder();
        if keep {
            tokio::spawn(
                server
                    .add_service(TraceServiceServer::new(Receiver {
                        spans: spans.clone(),
                        count: count.clone(),
                    }))
                    .serve_with_incoming_shutdown(incoming, stop),
            );
        } else {
            tokio::spawn(
                server
                    .add_service(counting::Counting(count.clone()))
                    .serve_with_incoming_shutdown(incoming, stop),
            );
        }
        Ok(Self {
            endpoint: format!("http://{addr}"),
            addr,
            spans,
            count,
            _stop: tx,
        })
    }

    /// How many spans were received so far, kept or not.
    pub fn span_count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `timeout` until `done` holds for the spans received; answers
    /// them either way, so the caller's assertion can show what did arrive.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct Receiver {
    /// Shared with the [`Collector`].
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    count: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let request = request.into_inner();
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        let kept = &self.spans;
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    let status = span.status.unwrap_or_default();
                    received.push(ReceivedSpan {
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        name: span.name,
                        kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
                        trace_state: span.trace_state,
                        attributes: attributes(&span.attributes),
                        events: span
                            .events
                            .iter()
                            .map(|e| (e.name.clone(), attributes(&e.attributes)))
                            .collect(),
                        links: span
                            .links
                            .iter()
                            .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                            .collect(),
                        status_code: status.code,
                        status_message: status.message,
                        resource: resource.clone(),
                    });
                }
            }
        }
        kept.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(received);
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

/// Any value as text: scalars as written, arrays and maps as their items
/// joined, bytes in hex.
fn text(value: &AnyValue) -> String {
    match &value.value {
        None => String::new(),
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => hex(b),
        Some(Value::ArrayValue(a)) => a.values.iter().map(text).collect::<Vec<_>>().join(","),
        Some(Value::KvlistValue(l)) => l
            .values
            .iter()
            .map(|kv| {
                format!(
                    "{}={}",
                    kv.key,
                    kv.value.as_ref().map(text).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(","),
        #[allow(unreachable_patterns)]
        Some(other) => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use opentelemetry_proto::tonic::{
        collector::trace::v1::trace_service_client::TraceServiceClient,
        trace::v1::{ResourceSpans, ScopeSpans, Span},
    };

    use super::*;

    /// Exports one request of `n` spans named `s0`, `s1`, ….
    async fn export(collector: &Collector, n: usize) {
        let spans = (0..n)
            .map(|i| Span {
                trace_id: vec![1; 16],
                span_id: vec![i as u8 + 1; 8],
                name: format!("s{i}"),
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        TraceServiceClient::connect(collector.endpoint.clone())
            .await
            .unwrap()
            .export(request)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_collector_keeps_and_counts_what_it_receives_and_a_counting_one_only_counts() {
        let keeping = Collector::start().await.unwrap();
        export(&keeping, 3).await;
        assert_eq!(keeping.span_count(), 3);
        let names: Vec<String> = keeping.spans().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["s0", "s1", "s2"]);

        let counting = Collector::start_counting().await.unwrap();
        export(&counting, 3).await;
        export(&counting, 2).await;
        assert_eq!(counting.span_count(), 5);
        assert!(
            counting.spans().is_empty(),
            "a counting collector keeps nothing"
        );
    }
}
