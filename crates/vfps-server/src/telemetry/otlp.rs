//! The OTLP/gRPC span exporter. Each batch the SDK's batch processor hands over
//! is written straight into one `ExportTraceServiceRequest` in protobuf's wire
//! format — from the spans as they are, with no copy of the batch and no
//! intermediate messages — and sent to the collector's
//! `opentelemetry.proto.collector.trace.v1.TraceService/Export`, retried with
//! backoff on the codes OTLP calls transient until the export timeout ends.
//!
//! The encoding is the one the OpenTelemetry proto crate's conversion produces
//! (a test decodes both and compares); only its cost differs: the general
//! exporter copied every batch before converting it into messages of owned
//! strings and vectors, then encoded those, which under every-trace sampling
//! was a tenth of the server's CPU.

use std::{
    borrow::Cow,
    fmt,
    time::{Duration, Instant},
};

use opentelemetry::{
    trace::{SpanContext, SpanKind, Status},
    Array, InstrumentationScope, KeyValue, StringValue, Value,
};
use opentelemetry_proto::{
    tonic::{
        collector::trace::v1::ExportTraceServiceResponse,
        common::v1::InstrumentationScope as ScopeMessage,
        resource::v1::Resource as ResourceMessage,
    },
    transform::common::tonic::ResourceAttributesWithSchema,
};
use opentelemetry_sdk::{
    error::{OTelSdkError, OTelSdkResult},
    trace::{SpanData, SpanExporter},
    Resource,
};
use prost::bytes::{BufMut, Bytes};
use prost::{
    encoding::{encode_varint, encoded_len_varint},
    Message,
};
use tonic::{
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    metadata::MetadataMap,
    transport::{Channel, ClientTlsConfig, Endpoint},
    Code,
};

use crate::config::Tracing;

/// The collector's method.
const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// See the module's documentation.
pub(super) struct Exporter {
    client: tonic::client::Grpc<Channel>,
    endpoint: String,
    headers: MetadataMap,
    timeout: Duration,
    /// The runtime the channel's connection runs on; each export's sending
    /// runs there too (the batch processor calls from a thread of its own).
    runtime: tokio::runtime::Handle,
    /// The `Resource` message, encoded once.
    resource: Vec<u8>,
    resource_schema: String,
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// Connects lazily (a collector that is not up yet is no start-up error);
    /// `https://` is verified against the system's roots. Must run inside the
    /// Tokio runtime.
    pub(super) fn new(settings: &Tracing) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            anyhow::anyhow!("the OTLP exporter must be set up inside the Tokio runtime")
        })?;
        let mut endpoint = Endpoint::from_shared(settings.otlp_endpoint.clone())?;
        if settings.otlp_endpoint.starts_with("https://") {
            endpoint = endpoint.tls_config(ClientTlsConfig::new().with_native_roots())?;
        }
        let mut headers = MetadataMap::new();
        for (name, value) in settings.otlp_headers.iter() {
            headers.insert(name.clone(), value.clone());
        }
        Ok(Self {
            client: tonic::client::Grpc::new(endpoint.connect_lazy()),
            endpoint: settings.otlp_endpoint.clone(),
            headers,
            timeout: settings.otlp_timeout,
            runtime,
            resource: ResourceMessage::default().encode_to_vec(),
            resource_schema: String::new(),
        })
    }
}

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let request = Bytes::from(encode(&batch, &self.resource, &self.resource_schema));
        drop(batch);
        let send = send(
            self.client.clone(),
            self.headers.clone(),
            request,
            self.timeout,
        );
        self.runtime
            .spawn(send)
            .await
            .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
    }

    fn set_resource(&mut self, resource: &Resource) {
        let resource = ResourceAttributesWithSchema::from(resource);
        self.resource = ResourceMessage {
            attributes: resource.attributes.0,
            dropped_attributes_count: 0,
            entity_refs: Vec::new(),
        }
        .encode_to_vec();
        self.resource_schema = resource.schema_url.unwrap_or_default();
    }
}

/// Sends one request, retrying what OTLP calls transient with backoff (100 ms
/// doubling to 5 s) while `timeout` lasts. Errors name the gRPC code only: a
/// collector's message may echo credentials.
async fn send(
    mut client: tonic::client::Grpc<Channel>,
    headers: MetadataMap,
    request: Bytes,
    timeout: Duration,
) -> OTelSdkResult {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(100);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let mut call = tonic::Request::new(request.clone());
        *call.metadata_mut() = headers.clone();
        call.set_timeout(left);
        let answer = tokio::time::timeout(left, async {
            client
                .ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            client
                .unary(
                    call,
                    tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT),
                    Raw,
                )
                .await
        })
        .await;
        let status = match answer {
            Ok(Ok(response)) => {
                if let Some(partial) = response.into_inner().partial_success {
                    if partial.rejected_spans > 0 {
                        tracing::warn!(
                            rejected_spans = partial.rejected_spans,
                            "the trace collector rejected spans"
                        );
                    }
                }
                return Ok(());
            }
            Ok(Err(status)) => status,
            Err(_) => return Err(OTelSdkError::Timeout(timeout)),
        };
        let code = status.code();
        let transient = matches!(
            code,
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::OutOfRange
                | Code::Unavailable
                | Code::DataLoss
        );
        if !transient || Instant::now() + backoff >= deadline {
            return Err(OTelSdkError::InternalFailure(format!(
                "the trace collector answered {code:?} ({attempts} attempts)"
            )));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Sends encoded bytes as they are; reads the collector's answer.
#[derive(Debug, Clone, Copy)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = ExportTraceServiceResponse;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, tonic::Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

/// One `ExportTraceServiceRequest`: one `ResourceSpans`, one `ScopeSpans` per
/// instrumentation scope (in order of appearance).
fn encode(batch: &[SpanData], resource: &[u8], resource_schema: &str) -> Vec<u8> {
    let mut scopes: Vec<(&InstrumentationScope, Vec<u8>, Vec<usize>)> = Vec::new();
    for (i, span) in batch.iter().enumerate() {
        match scopes
            .iter_mut()
            .find(|(s, _, _)| *s == &span.instrumentation_scope)
        {
            Some((_, _, spans)) => spans.push(i),
            None => {
                let scope = &span.instrumentation_scope;
                let message: ScopeMessage = (scope, None::<Cow<'static, str>>).into();
                scopes.push((scope, message.encode_to_vec(), vec![i]));
            }
        }
    }
    let states: Vec<String> = batch
        .iter()
        .map(|s| s.span_context.trace_state().header())
        .collect();
    let lens: Vec<usize> = batch
        .iter()
        .zip(&states)
        .map(|(s, state)| span_len(s, state))
        .collect();
    let scope_len = |(scope, message, spans): &(&InstrumentationScope, Vec<u8>, Vec<usize>)| {
        wire::message_len(1, message.len())
            + spans
                .iter()
                .map(|&i| wire::message_len(2, lens[i]))
                .sum::<usize>()
            + wire::bytes_len(3, scope.schema_url().unwrap_or_default().as_bytes())
    };
    let scope_lens: Vec<usize> = scopes.iter().map(scope_len).collect();
    let resource_spans_len = wire::message_len(1, resource.len())
        + scope_lens
            .iter()
            .map(|&len| wire::message_len(2, len))
            .sum::<usize>()
        + wire::bytes_len(3, resource_schema.as_bytes());
    let total = wire::message_len(1, resource_spans_len);
    let mut buf = Vec::with_capacity(total);
    wire::head(&mut buf, 1, resource_spans_len);
    wire::head(&mut buf, 1, resource.len());
    buf.extend_from_slice(resource);
    for ((scope, message, spans), &len) in scopes.iter().zip(&scope_lens) {
        wire::head(&mut buf, 2, len);
        wire::head(&mut buf, 1, message.len());
        buf.extend_from_slice(message);
        for &i in spans {
            wire::head(&mut buf, 2, lens[i]);
            put_span(&mut buf, &batch[i], &states[i]);
        }
        wire::bytes(
            &mut buf,
            3,
            scope.schema_url().unwrap_or_default().as_bytes(),
        );
    }
    wire::bytes(&mut buf, 3, resource_schema.as_bytes());
    debug_assert_eq!(buf.len(), total);
    buf
}

fn nanos(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// OTLP's span flags: the W3C flags, and whether the parent is remote.
fn flags(context: &SpanContext, parent_remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    let remote = if parent_remote { IS_REMOTE } else { 0 };
    u32::from(context.trace_flags().to_u8()) | HAS_IS_REMOTE | remote
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn status(status: &Status) -> (u64, &str) {
    match status {
        Status::Unset => (0, ""),
        Status::Ok => (1, ""),
        Status::Error { description } => (2, description.as_ref()),
    }
}

fn span_len(span: &SpanData, state: &str) -> usize {
    use wire::*;
    let parent = parent_len(span);
    let (code, message) = status(&span.status);
    bytes_len(1, &[0; 16])
        + bytes_len(2, &[0; 8])
        + bytes_len(3, state.as_bytes())
        + parent
        + bytes_len(5, span.name.as_bytes())
        + varint_len(6, kind(&span.span_kind))
        + fixed64_len(7, nanos(span.start_time))
        + fixed64_len(8, nanos(span.end_time))
        + attributes_len(9, &span.attributes)
        + varint_len(10, span.dropped_attributes_count.into())
        + span
            .events
            .iter()
            .map(|e| message_len(11, event_len(e)))
            .sum::<usize>()
        + varint_len(12, span.events.dropped_count.into())
        + span
            .links
            .iter()
            .map(|l| message_len(13, link_len(l)))
            .sum::<usize>()
        + varint_len(14, span.links.dropped_count.into())
        + message_len(15, bytes_len(2, message.as_bytes()) + varint_len(3, code))
        + fixed32_len(16, flags(&span.span_context, span.parent_span_is_remote))
}

fn parent_len(span: &SpanData) -> usize {
    if span.parent_span_id == opentelemetry::trace::SpanId::INVALID {
        0
    } else {
        wire::bytes_len(4, &[0; 8])
    }
}

fn put_span(buf: &mut Vec<u8>, span: &SpanData, state: &str) {
    use wire::*;
    let context = &span.span_context;
    bytes(buf, 1, &context.trace_id().to_bytes());
    bytes(buf, 2, &context.span_id().to_bytes());
    bytes(buf, 3, state.as_bytes());
    if parent_len(span) > 0 {
        bytes(buf, 4, &span.parent_span_id.to_bytes());
    }
    bytes(buf, 5, span.name.as_bytes());
    varint(buf, 6, kind(&span.span_kind));
    fixed64(buf, 7, nanos(span.start_time));
    fixed64(buf, 8, nanos(span.end_time));
    put_attributes(buf, 9, &span.attributes);
    varint(buf, 10, span.dropped_attributes_count.into());
    for event in span.events.iter() {
        head(buf, 11, event_len(event));
        fixed64(buf, 1, nanos(event.timestamp));
        bytes(buf, 2, event.name.as_bytes());
        put_attributes(buf, 3, &event.attributes);
        varint(buf, 4, event.dropped_attributes_count.into());
    }
    varint(buf, 12, span.events.dropped_count.into());
    for link in span.links.iter() {
        head(buf, 13, link_len(link));
        let state = link.span_context.trace_state().header();
        bytes(buf, 1, &link.span_context.trace_id().to_bytes());
        bytes(buf, 2, &link.span_context.span_id().to_bytes());
        bytes(buf, 3, state.as_bytes());
        put_attributes(buf, 4, &link.attributes);
        varint(buf, 5, link.dropped_attributes_count.into());
        fixed32(
            buf,
            6,
            flags(&link.span_context, link.span_context.is_remote()),
        );
    }
    varint(buf, 14, span.links.dropped_count.into());
    let (code, message) = status(&span.status);
    head(
        buf,
        15,
        bytes_len(2, message.as_bytes()) + varint_len(3, code),
    );
    bytes(buf, 2, message.as_bytes());
    varint(buf, 3, code);
    fixed32(buf, 16, flags(context, span.parent_span_is_remote));
}

fn event_len(event: &opentelemetry::trace::Event) -> usize {
    use wire::*;
    fixed64_len(1, nanos(event.timestamp))
        + bytes_len(2, event.name.as_bytes())
        + attributes_len(3, &event.attributes)
        + varint_len(4, event.dropped_attributes_count.into())
}

fn link_len(link: &opentelemetry::trace::Link) -> usize {
    use wire::*;
    let context = &link.span_context;
    bytes_len(1, &[0; 16])
        + bytes_len(2, &[0; 8])
        + bytes_len(3, context.trace_state().header().as_bytes())
        + attributes_len(4, &link.attributes)
        + varint_len(5, link.dropped_attributes_count.into())
        + fixed32_len(6, flags(context, context.is_remote()))
}

/// An attribute's value, or an element of an array value.
enum Scalar<'a> {
    Bool(bool),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
}

fn scalar(value: &Value) -> Option<Scalar<'_>> {
    Some(match value {
        Value::Bool(b) => Scalar::Bool(*b),
        Value::I64(i) => Scalar::I64(*i),
        Value::F64(f) => Scalar::F64(*f),
        Value::String(s) => Scalar::Str(Cow::Borrowed(s.as_str())),
        Value::Array(_) => return None,
        other => Scalar::Str(other.as_str()),
    })
}

/// The elements of an array value (`AnyValue`s of one kind).
fn elements(array: &Array) -> Vec<Scalar<'_>> {
    match array {
        Array::Bool(v) => v.iter().map(|b| Scalar::Bool(*b)).collect(),
        Array::I64(v) => v.iter().map(|i| Scalar::I64(*i)).collect(),
        Array::F64(v) => v.iter().map(|f| Scalar::F64(*f)).collect(),
        Array::String(v) => v
            .iter()
            .map(|s: &StringValue| Scalar::Str(Cow::Borrowed(s.as_str())))
            .collect(),
        other => vec![Scalar::Str(Cow::Owned(other.to_string()))],
    }
}

/// An `AnyValue` holding a scalar (its oneof field is written even when zero).
fn scalar_len(value: &Scalar<'_>) -> usize {
    match value {
        Scalar::Bool(_) => 2,
        Scalar::I64(i) => 1 + encoded_len_varint(*i as u64),
        Scalar::F64(_) => 9,
        Scalar::Str(s) => wire::message_len(1, s.len()),
    }
}

fn put_scalar(buf: &mut Vec<u8>, value: &Scalar<'_>) {
    match value {
        Scalar::Bool(b) => {
            wire::key(buf, 2, wire::VARINT);
            buf.push(u8::from(*b));
        }
        Scalar::I64(i) => {
            wire::key(buf, 3, wire::VARINT);
            encode_varint(*i as u64, buf);
        }
        Scalar::F64(f) => {
            wire::key(buf, 4, wire::FIXED64);
            buf.put_f64_le(*f);
        }
        Scalar::Str(s) => {
            wire::head(buf, 1, s.len());
            buf.extend_from_slice(s.as_bytes());
        }
    }
}

fn any_len(value: &Value) -> usize {
    match (scalar(value), value) {
        (Some(s), _) => scalar_len(&s),
        (None, Value::Array(array)) => wire::message_len(5, array_len(array)),
        (None, _) => 0,
    }
}

fn array_len(array: &Array) -> usize {
    elements(array)
        .iter()
        .map(|e| wire::message_len(1, scalar_len(e)))
        .sum()
}

fn put_any(buf: &mut Vec<u8>, value: &Value) {
    match (scalar(value), value) {
        (Some(s), _) => put_scalar(buf, &s),
        (None, Value::Array(array)) => {
            wire::head(buf, 5, array_len(array));
            for e in elements(array) {
                wire::head(buf, 1, scalar_len(&e));
                put_scalar(buf, &e);
            }
        }
        (None, _) => {}
    }
}

fn key_value_len(kv: &KeyValue) -> usize {
    wire::bytes_len(1, kv.key.as_str().as_bytes()) + wire::message_len(2, any_len(&kv.value))
}

fn attributes_len(tag: u32, attributes: &[KeyValue]) -> usize {
    attributes
        .iter()
        .map(|kv| wire::message_len(tag, key_value_len(kv)))
        .sum()
}

fn put_attributes(buf: &mut Vec<u8>, tag: u32, attributes: &[KeyValue]) {
    for kv in attributes {
        wire::head(buf, tag, key_value_len(kv));
        wire::bytes(buf, 1, kv.key.as_str().as_bytes());
        wire::head(buf, 2, any_len(&kv.value));
        put_any(buf, &kv.value);
    }
}

/// Protobuf's wire format, as prost writes it: scalar fields left out when
/// zero or empty, embedded messages always written.
mod wire {
    use prost::encoding::{encode_varint, encoded_len_varint};

    pub const VARINT: u32 = 0;
    pub const FIXED64: u32 = 1;
    const DELIMITED: u32 = 2;
    const FIXED32: u32 = 5;

    fn key_len(tag: u32) -> usize {
        encoded_len_varint(u64::from(tag << 3))
    }

    pub fn key(buf: &mut Vec<u8>, tag: u32, wire_type: u32) {
        encode_varint(u64::from(tag << 3 | wire_type), buf);
    }

    /// An embedded message (or string, or bytes) of `len` bytes, in all.
    pub fn message_len(tag: u32, len: usize) -> usize {
        key_len(tag) + encoded_len_varint(len as u64) + len
    }

    /// The key and length of an embedded message; its body follows.
    pub fn head(buf: &mut Vec<u8>, tag: u32, len: usize) {
        key(buf, tag, DELIMITED);
        encode_varint(len as u64, buf);
    }

    pub fn bytes_len(tag: u32, bytes: &[u8]) -> usize {
        if bytes.is_empty() {
            0
        } else {
            message_len(tag, bytes.len())
        }
    }

    pub fn bytes(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            head(buf, tag, bytes.len());
            buf.extend_from_slice(bytes);
        }
    }

    pub fn varint_len(tag: u32, value: u64) -> usize {
        if value == 0 {
            0
        } else {
            key_len(tag) + encoded_len_varint(value)
        }
    }

    pub fn varint(buf: &mut Vec<u8>, tag: u32, value: u64) {
        if value != 0 {
            key(buf, tag, VARINT);
            encode_varint(value, buf);
        }
    }

    pub fn fixed64_len(tag: u32, value: u64) -> usize {
        if value == 0 {
            0
        } else {
            key_len(tag) + 8
        }
    }

    pub fn fixed64(buf: &mut Vec<u8>, tag: u32, value: u64) {
        if value != 0 {
            key(buf, tag, FIXED64);
            buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    pub fn fixed32_len(tag: u32, value: u32) -> usize {
        if value == 0 {
            0
        } else {
            key_len(tag) + 4
        }
    }

    pub fn fixed32(buf: &mut Vec<u8>, tag: u32, value: u32) {
        if value != 0 {
            key(buf, tag, FIXED32);
            buf.extend_from_slice(&value.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        str::FromStr,
        sync::{Arc, Mutex},
        time::SystemTime,
    };

    use opentelemetry::trace::{Event, Link, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::{
        tonic::collector::trace::v1::{
            trace_service_server::{TraceService, TraceServiceServer},
            ExportTraceServiceRequest,
        },
        transform::trace::tonic::group_spans_by_resource_and_scope,
    };
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;
    use crate::config::Tracing;

    fn context(trace: u128, span: u64, sampled: bool, remote: bool, state: &str) -> SpanContext {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::NOT_SAMPLED
        };
        let state = if state.is_empty() {
            TraceState::NONE
        } else {
            TraceState::from_str(state).unwrap()
        };
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            flags,
            remote,
            state,
        )
    }

    /// Spans with every kind of content the encoding has a case for: zero and
    /// empty values, arrays, events, links, remote parents, statuses, two
    /// scopes.
    fn batch() -> Vec<SpanData> {
        let at = |ns: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        let vfps = InstrumentationScope::builder("vfps").build();
        let other = InstrumentationScope::builder("other")
            .with_version("1.2")
            .with_schema_url("https://opentelemetry.io/schemas/1.26.0")
            .with_attributes([KeyValue::new("scope.attr", 7)])
            .build();
        let mut events = SpanEvents::default();
        events.events = vec![
            Event::new(
                "retry",
                at(1_700_000_000_000_000_500),
                vec![
                    KeyValue::new("reason", "timeout"),
                    KeyValue::new("attempt", 1),
                ],
                0,
            ),
            Event::new("empty", at(0), vec![], 3),
        ];
        events.dropped_count = 2;
        let mut links = SpanLinks::default();
        links.links = vec![
            Link::with_context(context(7, 8, true, false, "")),
            Link::new(
                context(9, 10, false, true, "vendor=a,other=b"),
                vec![KeyValue::new("link.attr", true)],
                1,
            ),
        ];
        links.dropped_count = 5;
        let span = |scope: &InstrumentationScope, name: &'static str| SpanData {
            span_context: context(
                0x0af7651916cd43dd8448eb211c80319c,
                0xb7ad6b7169203331,
                true,
                false,
                "",
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: at(1_700_000_000_000_000_000),
            end_time: at(1_700_000_000_000_100_000),
            attributes: vec![],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope.clone(),
        };
        let mut full = span(&vfps, "vfps.api.v1.PseudonymService/Create");
        full.span_context = context(1, 2, true, false, "vendor=1");
        full.parent_span_id = SpanId::from(3);
        full.parent_span_is_remote = true;
        full.span_kind = SpanKind::Server;
        full.attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("empty", ""),
            KeyValue::new("zero", 0),
            KeyValue::new("negative", -42),
            KeyValue::new("false", false),
            KeyValue::new("pi", 3.25),
            KeyValue::new("nothing", 0.0),
            KeyValue::new(
                "strings",
                Value::Array(Array::String(vec!["a".into(), "".into()])),
            ),
            KeyValue::new("ints", Value::Array(Array::I64(vec![0, 1, -1]))),
            KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
            KeyValue::new("floats", Value::Array(Array::F64(vec![0.5]))),
            KeyValue::new("none", Value::Array(Array::I64(vec![]))),
        ];
        full.dropped_attributes_count = 4;
        full.events = events;
        full.links = links;
        full.status = Status::error("went wrong");
        let mut ok = span(&other, "in another scope");
        ok.status = Status::Ok;
        ok.span_kind = SpanKind::Client;
        let mut unsampled = span(&vfps, "");
        unsampled.span_context = context(5, 6, false, false, "");
        unsampled.span_kind = SpanKind::Consumer;
        let mut producer = span(&other, "producer");
        producer.span_kind = SpanKind::Producer;
        vec![full, ok, unsampled, span(&vfps, "plain"), producer]
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_service_name("vfps-test")
            .with_attribute(KeyValue::new("service.version", "1"))
            .with_schema_url(
                Vec::<KeyValue>::new(),
                "https://opentelemetry.io/schemas/1.26.0",
            )
            .build()
    }

    /// What the OpenTelemetry proto crate's own conversion makes of a batch.
    fn reference(batch: Vec<SpanData>, resource: &Resource) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                batch,
                &ResourceAttributesWithSchema::from(resource),
            ),
        }
    }

    #[tokio::test]
    async fn the_encoding_is_the_proto_crates_conversion_byte_for_meaning() {
        let mut exporter = Exporter::new(&Tracing::default()).unwrap();
        let resource = resource();
        exporter.set_resource(&resource);
        for batch in [batch(), vec![], batch()[..1].to_vec()] {
            let ours = encode(&batch, &exporter.resource, &exporter.resource_schema);
            let decoded = ExportTraceServiceRequest::decode(ours.as_slice()).unwrap();
            assert_eq!(decoded, reference(batch.clone(), &resource));
            // And prost writes the reference to the same length (field order aside).
            assert_eq!(ours.len(), reference(batch, &resource).encoded_len());
        }
    }

    #[test]
    fn outside_a_runtime_the_exporter_is_an_error_not_a_panic() {
        let e = Exporter::new(&Tracing::default()).unwrap_err();
        assert!(e.to_string().contains("inside the Tokio runtime"), "{e}");
    }

    /// A request's `authorization` header and the request.
    type Received = (Option<String>, ExportTraceServiceRequest);

    /// A collector that answers `codes` in turn (then OK) and keeps what it got.
    #[derive(Clone, Default)]
    struct Flaky {
        codes: Arc<Mutex<Vec<Code>>>,
        got: Arc<Mutex<Vec<Received>>>,
    }

    #[tonic::async_trait]
    impl TraceService for Flaky {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let auth = request
                .metadata()
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned());
            self.got.lock().unwrap().push((auth, request.into_inner()));
            let next = {
                let mut codes = self.codes.lock().unwrap();
                (!codes.is_empty()).then(|| codes.remove(0))
            };
            match next {
                Some(code) => Err(tonic::Status::new(code, "token s3cret rejected")),
                None => Ok(tonic::Response::new(ExportTraceServiceResponse::default())),
            }
        }
    }

    async fn serve(collector: Flaky) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(collector))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{addr}")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exports_carry_the_headers_and_retry_only_transient_codes() {
        let collector = Flaky::default();
        let mut settings = Tracing {
            otlp_endpoint: serve(collector.clone()).await,
            otlp_timeout: Duration::from_secs(5),
            ..Tracing::default()
        };
        settings.otlp_headers =
            crate::config::Headers::parse("authorization=Bearer%20abc").unwrap();
        let mut exporter = Exporter::new(&settings).unwrap();
        // One instance: a resource's attributes come in its map's order.
        let resource = resource();
        exporter.set_resource(&resource);

        // Unavailable, then Aborted: retried, the third attempt lands.
        *collector.codes.lock().unwrap() = vec![Code::Unavailable, Code::Aborted];
        exporter.export(batch()).await.unwrap();
        {
            let got = collector.got.lock().unwrap();
            assert_eq!(got.len(), 3);
            for (auth, request) in got.iter() {
                assert_eq!(auth.as_deref(), Some("Bearer abc"));
                assert_eq!(*request, reference(batch(), &resource));
            }
        }

        // A code that is no transient failure is not retried; the error names
        // the code, not the collector's message.
        collector.got.lock().unwrap().clear();
        *collector.codes.lock().unwrap() = vec![Code::InvalidArgument];
        let e = exporter.export(batch()).await.unwrap_err().to_string();
        assert_eq!(collector.got.lock().unwrap().len(), 1);
        assert!(
            e.contains("InvalidArgument") && !e.contains("s3cret"),
            "{e}"
        );

        // Transient for longer than the timeout: given up when it ends.
        settings.otlp_timeout = Duration::from_millis(400);
        let exporter = Exporter::new(&settings).unwrap();
        collector.got.lock().unwrap().clear();
        *collector.codes.lock().unwrap() = vec![Code::Unavailable; 100];
        let started = Instant::now();
        assert!(exporter.export(batch()).await.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let attempts = collector.got.lock().unwrap().len();
        assert!((2..=4).contains(&attempts), "{attempts} attempts in 400 ms");
    }
}
