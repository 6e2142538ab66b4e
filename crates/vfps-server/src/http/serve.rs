//! Serving a router on a listener: axum's `serve` with the HTTP/2 settings
//! the gRPC port has (axum's own takes hyper's defaults and has no knob).

use std::{future::Future, pin::pin};

use axum::{serve::Listener, Router};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};

/// Streams a client may open and cancel before the server has taken them up,
/// per connection, before the server drops the connection (HTTP/2's rapid
/// reset defence; h2's default is 20). A server that stalled for a moment (a
/// pause, a frozen node) comes back to every stream its callers cancelled at
/// their deadlines meanwhile: with 20, it dropped the connection and failed
/// the calls still waiting on it with RESOURCE_EXHAUSTED. Such streams cost
/// memory only (they are never served), a few hundred bytes each.
pub(crate) const MAX_PENDING_RESET_STREAMS: usize = 4096;

/// Serves `router` on every connection `listener` accepts (HTTP/1.1 and
/// HTTP/2, h2c included) until `stop` completes; then stops accepting, asks
/// each open connection to finish (HTTP/1.1: after its current request;
/// HTTP/2: GOAWAY, then its open streams) and returns when all have.
pub async fn serve<L: Listener>(mut listener: L, router: Router, stop: impl Future<Output = ()>) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_pending_accept_reset_streams(Some(MAX_PENDING_RESET_STREAMS));
    let connections = GracefulShutdown::new();
    let mut stop = pin!(stop);
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = &mut stop => break,
        };
        let connection = builder
            .serve_connection_with_upgrades(
                TokioIo::new(io),
                TowerToHyperService::new(router.clone()),
            )
            .into_owned();
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
}
