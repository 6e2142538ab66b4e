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
use opentelemetry::{trace::SpanKind, KeyValue};
use vfps_store::trace::{in_span, in_span_sync, Span, Tracer};

use super::spans::Caller;

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

/// Wraps a service in [`Traced`], with the process's tracer (none before
/// [`super::init`] turned tracing on: then nothing is traced).
#[derive(Debug, Clone)]
pub struct TraceLayer {
    /// Decides which calls are traced and how their spans are named.
    transport: Transport,
    tracer: Option<Tracer>,
}

impl TraceLayer {
    /// Around the tonic server: traces the `vfps.api.v1` methods only.
    pub fn grpc() -> Self {
        Self {
            transport: Transport::Grpc,
            tracer: vfps_store::trace::global().cloned(),
        }
    }

    /// Around axum routes (`Router::layer`, so the matched route is known).
    pub fn http() -> Self {
        Self {
            transport: Transport::Http,
            tracer: vfps_store::trace::global().cloned(),
        }
    }
}

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Traced<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Traced {
            inner,
            transport: self.transport,
            tracer: self.tracer.clone(),
        }
    }
}

/// Runs each call in a server span and records its status.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
    /// Decides which calls are traced and how their spans are named.
    transport: Transport,
    tracer: Option<Tracer>,
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
        let span = self.tracer.as_ref().and_then(|t| match self.transport {
            Transport::Grpc => grpc_span(t, &request),
            Transport::Http => http_span(t, &request),
        });
        let Some(span) = span.filter(Span::is_recording) else {
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

/// The caller's W3C trace context, if the call carries a valid one.
fn caller<B>(request: &Request<B>) -> Option<opentelemetry::trace::SpanContext> {
    let header = |name| request.headers().get(name).and_then(|v| v.to_str().ok());
    Caller {
        traceparent: header("traceparent"),
        tracestate: header("tracestate"),
    }
    .context()
}

fn grpc_span<B>(tracer: &Tracer, request: &Request<B>) -> Option<Span> {
    let path = request.uri().path();
    let &(path, service, method) = GRPC_METHODS.iter().find(|(p, _, _)| *p == path)?;
    Some(
        tracer
            .root(&path[1..], SpanKind::Server, caller(request).as_ref())
            .with([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", service),
                KeyValue::new("rpc.method", method),
            ]),
    )
}

fn http_span<B>(tracer: &Tracer, request: &Request<B>) -> Option<Span> {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()?
        .as_str();
    let method = known_method(request.method());
    let span = tracer.root("http", SpanKind::Server, caller(request).as_ref());
    if span.is_recording() {
        span.rename(format!("{method} {route}"));
        span.set_all([
            KeyValue::new("http.request.method", method),
            KeyValue::new("http.route", route.to_owned()),
        ]);
    }
    Some(span)
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
            span.set("rpc.grpc.status_code", code);
            // UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS.
            if matches!(code, 2 | 4 | 12 | 13 | 14 | 15) {
                span.fail();
            }
        }
        Transport::Http => {
            let status = response.status();
            span.set("http.response.status_code", i64::from(status.as_u16()));
            if status.is_server_error() {
                span.fail();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::Status;
    use tower::ServiceExt;
    use vfps_store::trace::{Kept, RootSampler};

    use super::*;

    /// Calls `path` on a gRPC server that answers `grpc-status: status`,
    /// makes a span of its own under whatever parent it finds and says in
    /// `x-traced` whether it found one.
    async fn call(
        tracer: Option<&Tracer>,
        path: &str,
        traceparent: Option<&str>,
        status: u16,
    ) -> bool {
        let inner = tower::service_fn(move |_: Request<()>| {
            let parent = vfps_store::trace::parent();
            let store = parent.child("store", SpanKind::Internal);
            async move {
                drop(store);
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .header("grpc-status", status.to_string())
                        .header("x-traced", parent.is_recording().to_string())
                        .body(())
                        .unwrap(),
                )
            }
        });
        let layer = TraceLayer {
            transport: Transport::Grpc,
            tracer: tracer.cloned(),
        };
        let mut request = Request::builder().uri(path);
        if let Some(tp) = traceparent {
            request = request.header("traceparent", tp);
        }
        let response = tower::Layer::layer(&layer, inner)
            .oneshot(request.body(()).unwrap())
            .await
            .unwrap();
        response.headers()["x-traced"] == "true"
    }

    const CREATE: &str = "/vfps.api.v1.PseudonymService/Create";

    #[tokio::test]
    async fn an_api_call_is_a_server_span_with_its_status_over_the_spans_of_its_work() {
        let kept = Kept::default();
        let tracer = Tracer::new(RootSampler::AlwaysOff, kept.clone());
        // The caller's decision counts over the root sampler's (off).
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert!(call(Some(&tracer), CREATE, Some(tp), 14).await);
        assert!(!call(Some(&tracer), CREATE, None, 14).await);
        assert!(!call(Some(&tracer), "/grpc.health.v1.Health/Check", Some(tp), 0).await);
        let spans = kept.spans();
        let [store, server] = &spans[..] else {
            panic!("the traced call's two spans: {spans:#?}")
        };
        assert_eq!(server.name, "vfps.api.v1.PseudonymService/Create");
        assert_eq!(server.kind, SpanKind::Server);
        assert_eq!(server.status, Status::error(""));
        let attribute = |k: &str| {
            server
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attribute("rpc.grpc.status_code").as_deref(), Some("14"));
        assert_eq!(attribute("rpc.method").as_deref(), Some("Create"));
        assert_eq!(
            format!("{:032x}", server.context.trace_id()),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(store.parent, server.context.span_id());
    }

    #[tokio::test]
    async fn an_ok_call_is_no_failed_span_and_without_a_tracer_nothing_is_traced() {
        let kept = Kept::default();
        let tracer = Tracer::new(RootSampler::AlwaysOn, kept.clone());
        assert!(call(Some(&tracer), CREATE, None, 0).await);
        let spans = kept.spans();
        assert_eq!(spans.len(), 2, "{spans:#?}");
        assert_eq!(spans[1].status, Status::Unset);
        assert!(!call(None, CREATE, None, 0).await);
    }
}
