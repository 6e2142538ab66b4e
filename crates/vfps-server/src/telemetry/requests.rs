//! One server span per API call, gRPC or HTTP, in the caller's trace when the
//! call carries a W3C trace context (`traceparent`, `tracestate`).
//!
//! Installed only when tracing is on, and only around the API: health checks,
//! reflection and metrics are never traced. A span is named after what the code
//! defines — the gRPC method, the HTTP route template — never after the request's
//! path or query, which hold namespaces, pseudonyms and page tokens.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use axum::http::{Method, Request, Response};
use futures::future::Either;
use tracing::{field::Empty, Span};
use vfps_store::coalesce::{in_span, in_span_sync};

use super::SPANS_TARGET;

/// Every traced gRPC method: `(path, service, method)`.
const GRPC_METHODS: [(&str, &str, &str); 7] = [
    (
        "/vfps.api.v1.NamespaceService/Create",
        "vfps.api.v1.NamespaceService",
        "Create",
    ),
    (
        "/vfps.api.v1.NamespaceService/Get",
        "vfps.api.v1.NamespaceService",
        "Get",
    ),
    (
        "/vfps.api.v1.NamespaceService/GetAll",
        "vfps.api.v1.NamespaceService",
        "GetAll",
    ),
    (
        "/vfps.api.v1.NamespaceService/Delete",
        "vfps.api.v1.NamespaceService",
        "Delete",
    ),
    (
        "/vfps.api.v1.PseudonymService/Create",
        "vfps.api.v1.PseudonymService",
        "Create",
    ),
    (
        "/vfps.api.v1.PseudonymService/Get",
        "vfps.api.v1.PseudonymService",
        "Get",
    ),
    (
        "/vfps.api.v1.PseudonymService/List",
        "vfps.api.v1.PseudonymService",
        "List",
    ),
];

/// Which protocol a [`TraceLayer`] wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Grpc,
    Http,
}

/// Wraps a service in [`Traced`].
#[derive(Debug, Clone, Copy)]
pub struct TraceLayer {
    /// Decides which calls are traced and how their spans are named.
    transport: Transport,
}

impl TraceLayer {
    /// Around the tonic server: traces the `vfps.api.v1` methods only.
    pub fn grpc() -> Self {
        Self {
            transport: Transport::Grpc,
        }
    }

    /// Around axum routes (`Router::layer`, so the matched route is known).
    pub fn http() -> Self {
        Self {
            transport: Transport::Http,
        }
    }
}

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Traced<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Traced {
            inner,
            transport: self.transport,
        }
    }
}

/// Runs each call in a server span and records its status.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
    /// Decides which calls are traced and how their spans are named.
    transport: Transport,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> tower::Service<Request<B>> for Traced<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Boxed<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let span = match self.transport {
            Transport::Grpc => grpc_span(&request),
            Transport::Http => http_span(&request),
        };
        let Some(span) = span.filter(|s| !s.is_disabled()) else {
            return Either::Left(self.inner.call(request));
        };
        let transport = self.transport;
        // The span is the parent of the spans the call makes (not entered:
        // see `in_span`); it ends when the call's answer is ready.
        let response = in_span_sync(span.clone(), || self.inner.call(request));
        Either::Right(Box::pin(in_span(span.clone(), async move {
            let result = response.await;
            if let Ok(response) = &result {
                record_status(&span, transport, response);
            }
            result
        })))
    }
}

/// The caller's W3C trace context: the span's parent when it is valid (the
/// span layer reads these two fields; they are no attributes).
fn caller<B>(request: &Request<B>) -> (Option<&str>, Option<&str>) {
    let header = |name| request.headers().get(name).and_then(|v| v.to_str().ok());
    (header("traceparent"), header("tracestate"))
}

fn grpc_span<B>(request: &Request<B>) -> Option<Span> {
    let path = request.uri().path();
    let &(path, service, method) = GRPC_METHODS.iter().find(|(p, _, _)| *p == path)?;
    let (traceparent, tracestate) = caller(request);
    Some(tracing::info_span!(
        target: SPANS_TARGET,
        "grpc",
        traceparent,
        tracestate,
        otel.name = &path[1..],
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
    ))
}

fn http_span<B>(request: &Request<B>) -> Option<Span> {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()?
        .as_str();
    let method = known_method(request.method());
    let (traceparent, tracestate) = caller(request);
    Some(tracing::info_span!(
        target: SPANS_TARGET,
        "http",
        traceparent,
        tracestate,
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = Empty,
    ))
}

/// The method's name if it is a standard one; `_OTHER` (as the semantic
/// conventions say) for anything a client made up.
fn known_method(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "_OTHER",
    }
}

/// The status of a finished call on its span; server errors (and the gRPC
/// codes the semantic conventions count as such) mark the span failed.
fn record_status<R>(span: &Span, transport: Transport, response: &Response<R>) {
    match transport {
        Transport::Grpc => {
            // An error is answered trailers-only, its status in the headers; a
            // unary answer without one is OK (its status trails the message).
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0);
            span.record("rpc.grpc.status_code", code);
            // UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS.
            if matches!(code, 2 | 4 | 12 | 13 | 14 | 15) {
                span.record("otel.status_code", "ERROR");
            }
        }
        Transport::Http => {
            let status = response.status();
            span.record("http.response.status_code", status.as_u16());
            if status.is_server_error() {
                span.record("otel.status_code", "ERROR");
            }
        }
    }
}
