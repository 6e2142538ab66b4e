//! `TraceService/Export` that counts the spans of each request without
//! decoding them: it walks `ExportTraceServiceRequest` → `ResourceSpans` (field
//! 1) → `ScopeSpans` (field 2) → `Span` (field 2) and skips every other field.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::{bytes::Buf, Message};
use tonic::{
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::{http, Body, BoxFuture, Service, StdError},
    server::{Grpc, NamedService, UnaryService},
    Status,
};

/// The service: adds each request's spans to the count.
#[derive(Clone)]
pub(super) struct Counting(pub(super) Arc<AtomicU64>);

impl NamedService for Counting {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl<B> Service<http::Request<B>> for Counting
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let count = Arc::clone(&self.0);
        Box::pin(async move {
            if request.uri().path() != "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
            {
                return Ok(Status::unimplemented("only Export").into_http());
            }
            Ok(Grpc::new(SpanCount).unary(Export(count), request).await)
        })
    }
}

struct Export(Arc<AtomicU64>);

impl UnaryService<u64> for Export {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, Status>;

    fn call(&mut self, request: tonic::Request<u64>) -> Self::Future {
        self.0.fetch_add(request.into_inner(), Ordering::Relaxed);
        Box::pin(async { Ok(tonic::Response::new(ExportTraceServiceResponse::default())) })
    }
}

/// Decodes a request into its span count; encodes the (empty) answer.
#[derive(Clone, Copy)]
struct SpanCount;

impl Codec for SpanCount {
    type Encode = ExportTraceServiceResponse;
    type Decode = u64;
    type Encoder = SpanCount;
    type Decoder = SpanCount;
    fn encoder(&mut self) -> SpanCount {
        SpanCount
    }
    fn decoder(&mut self) -> SpanCount {
        SpanCount
    }
}

impl Encoder for SpanCount {
    type Item = ExportTraceServiceResponse;
    type Error = Status;
    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

impl Decoder for SpanCount {
    type Item = u64;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<u64>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        let mut spans = 0;
        let nested = each_field(&bytes, 1, |resource| {
            each_field(resource, 2, |scope| {
                each_field(scope, 2, |_| {
                    spans += 1;
                    Ok(())
                })
            })
        });
        nested.map_err(Status::invalid_argument)?;
        Ok(Some(spans))
    }
}

/// Calls `f` with the bytes of every length-delimited field `number` of the
/// message in `buf`, skipping every other field.
fn each_field(
    mut buf: &[u8],
    number: u64,
    mut f: impl FnMut(&[u8]) -> Result<(), &'static str>,
) -> Result<(), &'static str> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let len = match key & 7 {
            0 => {
                varint(&mut buf)?;
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&mut buf)?).map_err(|_| "field too long")?,
            5 => 4,
            _ => return Err("unknown wire type"),
        };
        if len > buf.len() {
            return Err("truncated field");
        }
        let (field, rest) = buf.split_at(len);
        if key >> 3 == number && key & 7 == 2 {
            f(field)?;
        }
        buf = rest;
    }
    Ok(())
}

fn varint(buf: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or("truncated varint")?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use opentelemetry_proto::tonic::{
        collector::trace::v1::ExportTraceServiceRequest,
        common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
        resource::v1::Resource,
        trace::v1::{span::Event, ResourceSpans, ScopeSpans, Span},
    };

    use super::*;

    fn count(bytes: &[u8]) -> Result<u64, &'static str> {
        let mut spans = 0;
        each_field(bytes, 1, |r| {
            each_field(r, 2, |s| {
                each_field(s, 2, |_| {
                    spans += 1;
                    Ok(())
                })
            })
        })?;
        Ok(spans)
    }

    #[test]
    fn spans_are_counted_across_resources_and_scopes_past_every_other_field() {
        let attribute = || KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(-300)),
            }),
            ..Default::default()
        };
        let span = |n: u8| Span {
            trace_id: vec![n; 16],
            span_id: vec![n; 8],
            name: "s".repeat(200),
            start_time_unix_nano: u64::MAX,
            attributes: vec![attribute(), attribute()],
            events: vec![Event {
                time_unix_nano: 7,
                name: "e".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let scope = |n: u8| ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "vfps".into(),
                ..Default::default()
            }),
            spans: (0..n).map(span).collect(),
            schema_url: "x".into(),
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![attribute()],
                        ..Default::default()
                    }),
                    scope_spans: vec![scope(3), scope(0), scope(4)],
                    schema_url: "y".into(),
                },
                ResourceSpans {
                    scope_spans: vec![scope(5)],
                    ..Default::default()
                },
            ],
        };
        let bytes = request.encode_to_vec();
        assert_eq!(count(&bytes), Ok(12));
        assert_eq!(count(&[]), Ok(0));
        assert_eq!(count(&bytes[..bytes.len() - 1]), Err("truncated field"));
        assert_eq!(count(&[0x0a, 0x80]), Err("truncated varint"));
        assert_eq!(count(&[0x0b]), Err("unknown wire type"));
    }
}
