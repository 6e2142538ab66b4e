//! A vfps client built to measure, not to hide: every call has one deadline that
//! covers all its attempts, only `UNAVAILABLE` is retried (with exponential
//! backoff and jitter, preferring another endpoint), and every call ends in one of
//! three [`Outcome`]s — `Ok`, `Fail` (it definitely did not happen) or
//! `Indeterminate` (it may have happened).
//!
//! # Layout
//! - [`endpoints`]: a fixed list or `dns:///host:port` re-resolved periodically;
//!   one channel per endpoint, round-robin, skipping failing endpoints.
//! - [`retry`]: the retry policy.
//! - [`Client`]: the typed calls; [`jobs`]: those of CSV jobs.

use std::time::Duration;

use tokio::time::Instant;
use tonic::{Code, Status};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, Namespace, NamespaceServiceCreateRequest,
    NamespaceServiceDeleteRequest, NamespaceServiceGetRequest, Pseudonym,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest, PseudonymServiceListRequest,
    PseudonymServiceListResponse,
};

pub mod endpoints;
pub mod jobs;
pub mod retry;

pub use endpoints::{EndpointError, Endpoints};
pub use retry::RetryPolicy;

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    Ok(T),
    /// The server definitely did not perform the call.
    Fail(Code),
    /// The call may have been performed: the deadline expired, the connection was
    /// lost after the request was sent, or the last attempt was answered
    /// `UNAVAILABLE`/`INTERNAL`/`UNKNOWN` by a server that may have committed it.
    Indeterminate(Code),
}

impl<T> Outcome<T> {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }
    /// The status code the call ended with (`Ok` for success).
    pub fn code(&self) -> Code {
        match self {
            Outcome::Ok(_) => Code::Ok,
            Outcome::Fail(c) | Outcome::Indeterminate(c) => *c,
        }
    }
}

/// Whether a failed attempt may have reached the server and taken effect.
///
/// A status the server sent (no client-side cause) with `UNAVAILABLE`, `INTERNAL`
/// or `UNKNOWN` may follow a commit. A client-side transport failure is definite
/// only when the connection was never established, or when the request was
/// still queued when its connection closed ([`never_sent`]).
pub fn may_have_happened(status: &Status) -> bool {
    if never_sent(status) {
        return false;
    }
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => true,
        Code::Unavailable | Code::Unknown | Code::Internal => !never_connected(status),
        _ => false,
    }
}

/// True when hyper cancelled the request because its connection closed before
/// the request was written (a server's graceful shutdown): tonic reports
/// `CANCELLED`, but nothing reached the server — it is `UNAVAILABLE`.
fn never_sent(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// The status the caller sees for an attempt's failure: a request its closing
/// connection never sent is `UNAVAILABLE` (and retried elsewhere); so is a
/// connection that broke during the call, which tonic reports as `UNKNOWN`
/// with the transport error as its source (gRPC's convention, and grpc-go's,
/// is `UNAVAILABLE`). An `UNKNOWN` the server sent has no such source and stays.
fn transport_status(status: Status) -> Status {
    if status.code() == Code::Cancelled && never_sent(&status) {
        Status::unavailable(format!(
            "connection closed before the request was sent: {}",
            status.message()
        ))
    } else if status.code() == Code::Unknown && std::error::Error::source(&status).is_some() {
        Status::unavailable(format!(
            "the connection failed during the call: {}",
            status.message()
        ))
    } else {
        status
    }
}

/// True when the status was caused by a connection that was never established.
fn never_connected(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::NotFound
            );
        }
        source = e.source();
    }
    false
}

/// When a call must be over, across all its attempts. From a [`Duration`] it
/// counts from now; from an [`Instant`] — a call's intended send time plus its
/// deadline — dispatch lag cannot lengthen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until(pub Instant);

impl From<Duration> for Until {
    fn from(d: Duration) -> Self {
        Self(Instant::now() + d)
    }
}

impl From<Instant> for Until {
    fn from(at: Instant) -> Self {
        Self(at)
    }
}

/// The typed client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    endpoints: Endpoints,
    policy: RetryPolicy,
    /// `authorization: Bearer …` sent with every call, if any.
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

/// A bearer token that cannot be sent in a header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the bearer token is not printable ASCII")]
pub struct BadToken;

impl Client {
    pub fn new(endpoints: Endpoints, policy: RetryPolicy) -> Self {
        Self {
            endpoints,
            policy,
            authorization: None,
        }
    }

    /// The same client sending `token` as its bearer token (`None`: no
    /// credentials at all).
    pub fn with_bearer(&self, token: Option<&str>) -> Result<Self, BadToken> {
        let authorization = token
            .map(|t| format!("Bearer {}", t.trim()).parse().map_err(|_| BadToken))
            .transpose()?;
        Ok(Self {
            authorization,
            ..self.clone()
        })
    }

    /// A request for one attempt: its deadline and the credentials set.
    fn request<T>(&self, message: T, remaining: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(remaining);
        if let Some(a) = &self.authorization {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// Runs `attempt` (given a channel and the time left) under the retry
    /// policy until `until`, which covers every attempt. Once any attempt may
    /// have reached a server and taken effect, the call can no longer end as
    /// `Fail`: a later definite refusal does not undo an earlier maybe.
    pub async fn call<T, F, Fut>(&self, until: impl Into<Until>, mut attempt: F) -> Outcome<T>
    where
        F: FnMut(tonic::transport::Channel, Duration) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let Until(until) = until.into();
        let mut avoid = None;
        let mut tries = 0u32;
        let mut sent = false;
        let ended = |code: Code, sent: bool| {
            if sent {
                Outcome::Indeterminate(code)
            } else {
                Outcome::Fail(code)
            }
        };
        loop {
            tries += 1;
            let remaining = until.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                // Nothing was ever sent when the deadline passed before the first
                // attempt (dispatch lag): definitely not performed.
                return ended(Code::DeadlineExceeded, sent);
            }
            let Some((index, channel)) = self.endpoints.pick(avoid) else {
                return ended(Code::Unavailable, sent);
            };
            let result = tokio::time::timeout(remaining, attempt(channel, remaining)).await;
            let status = match result {
                Ok(Ok(v)) => {
                    self.endpoints.report(index, true);
                    return Outcome::Ok(v);
                }
                // tonic reports its own expiry of the call's `grpc-timeout` as
                // CANCELLED; it is this client's deadline, as the timer above.
                Ok(Err(status))
                    if status.code() == Code::Cancelled
                        && status.message() == tonic::TimeoutExpired(()).to_string() =>
                {
                    return Outcome::Indeterminate(Code::DeadlineExceeded)
                }
                Ok(Err(status)) => status,
                Err(_) => return Outcome::Indeterminate(Code::DeadlineExceeded),
            };
            sent |= may_have_happened(&status);
            let status = transport_status(status);
            let unavailable = status.code() == Code::Unavailable;
            if unavailable {
                self.endpoints.report(index, false);
            }
            let backoff = self.policy.backoff(tries);
            let next_fits = Instant::now() + backoff < until;
            if !unavailable || tries >= self.policy.max_attempts || !next_fits {
                return ended(status.code(), sent);
            }
            tracing::debug!(attempt = tries, code = ?status.code(), "retrying UNAVAILABLE on another endpoint");
            avoid = Some(index);
            tokio::time::sleep(backoff).await;
        }
    }

    /// `PseudonymService/Create`.
    pub async fn create(
        &self,
        namespace: &str,
        original: &str,
        until: impl Into<Until>,
    ) -> Outcome<Pseudonym> {
        self.call(until, |channel, remaining| {
            let mut client = PseudonymServiceClient::new(channel);
            let request = self.request(
                PseudonymServiceCreateRequest {
                    namespace: namespace.to_owned(),
                    original_value: original.to_owned(),
                },
                remaining,
            );
            async move {
                client.create(request).await.and_then(|r| {
                    r.into_inner()
                        .pseudonym
                        .ok_or_else(|| Status::internal("empty response"))
                })
            }
        })
        .await
    }

    /// `PseudonymService/Get`.
    pub async fn get(
        &self,
        namespace: &str,
        pseudonym: &str,
        until: impl Into<Until>,
    ) -> Outcome<Pseudonym> {
        self.call(until, |channel, remaining| {
            let mut client = PseudonymServiceClient::new(channel);
            let request = self.request(
                PseudonymServiceGetRequest {
                    namespace: namespace.to_owned(),
                    pseudonym_value: pseudonym.to_owned(),
                },
                remaining,
            );
            async move {
                client.get(request).await.and_then(|r| {
                    r.into_inner()
                        .pseudonym
                        .ok_or_else(|| Status::internal("empty response"))
                })
            }
        })
        .await
    }

    /// `PseudonymService/List`: one page.
    pub async fn list(
        &self,
        request: PseudonymServiceListRequest,
        until: impl Into<Until>,
    ) -> Outcome<PseudonymServiceListResponse> {
        self.call(until, |channel, remaining| {
            let mut client = PseudonymServiceClient::new(channel);
            let r = self.request(request.clone(), remaining);
            async move { client.list(r).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// `NamespaceService/Get`.
    pub async fn get_namespace(&self, name: &str, until: impl Into<Until>) -> Outcome<Namespace> {
        self.call(until, |channel, remaining| {
            let mut client = NamespaceServiceClient::new(channel);
            let r = self.request(
                NamespaceServiceGetRequest {
                    name: name.to_owned(),
                },
                remaining,
            );
            async move {
                client.get(r).await.and_then(|r| {
                    r.into_inner()
                        .namespace
                        .ok_or_else(|| Status::internal("empty response"))
                })
            }
        })
        .await
    }

    /// `NamespaceService/Create`, as the server answers it (`ALREADY_EXISTS`
    /// included).
    pub async fn create_namespace(
        &self,
        request: NamespaceServiceCreateRequest,
        until: impl Into<Until>,
    ) -> Outcome<()> {
        self.call(until, |channel, remaining| {
            let mut client = NamespaceServiceClient::new(channel);
            let r = self.request(request.clone(), remaining);
            async move { client.create(r).await.map(|_| ()) }
        })
        .await
    }

    /// `NamespaceService/Delete`.
    pub async fn delete_namespace(&self, name: &str, until: impl Into<Until>) -> Outcome<()> {
        self.call(until, |channel, remaining| {
            let mut client = NamespaceServiceClient::new(channel);
            let r = self.request(
                NamespaceServiceDeleteRequest {
                    name: name.to_owned(),
                },
                remaining,
            );
            async move { client.delete(r).await.map(|_| ()) }
        })
        .await
    }

    /// `NamespaceService/Create`, treating `ALREADY_EXISTS` as success.
    pub async fn ensure_namespace(
        &self,
        request: NamespaceServiceCreateRequest,
        until: impl Into<Until>,
    ) -> Outcome<()> {
        self.call(until, |channel, remaining| {
            let mut client = NamespaceServiceClient::new(channel);
            let r = self.request(request.clone(), remaining);
            async move {
                match client.create(r).await {
                    Ok(_) => Ok(()),
                    Err(s) if s.code() == Code::AlreadyExists => Ok(()),
                    Err(s) => Err(s),
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_transport_failure_tonic_calls_unknown_is_unavailable_but_a_servers_unknown_stays() {
        // A replica killed mid-call: tonic reports the broken connection as
        // UNKNOWN with the transport error as its source.
        let broken = Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        assert_eq!(broken.code(), Code::Unknown);
        let seen = transport_status(broken);
        assert_eq!(seen.code(), Code::Unavailable, "{seen:?}");
        assert!(may_have_happened(&seen), "the server may have done it");
        // An UNKNOWN the server itself sent (no transport source) is kept.
        assert_eq!(
            transport_status(Status::unknown("server said so")).code(),
            Code::Unknown
        );
    }
    use super::*;

    /// Accepts connections, reads what arrives for 200 ms (the request), then
    /// drops them: an attempt that reached a server and was cut off (it may
    /// have been performed).
    async fn resetting_endpoint() -> String {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = tokio::time::timeout(Duration::from_millis(200), async {
                        while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                    })
                    .await;
                });
            }
        });
        format!("http://{addr}")
    }

    /// A port nothing listens on: a connection that is refused (never performed).
    fn refusing_endpoint() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    }

    #[tokio::test]
    async fn a_refused_retry_does_not_undo_an_attempt_that_may_have_happened() {
        let spec = format!("{},{}", resetting_endpoint().await, refusing_endpoint());
        let client = Client::new(
            Endpoints::parse(&spec).await.unwrap(),
            RetryPolicy {
                max_attempts: 2,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(10),
                multiplier: 1,
            },
        );
        let outcome = client.create("n", "o", Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, Outcome::Indeterminate(_)),
            "reset, then refused: {outcome:?}"
        );
        let refused = Client::new(
            Endpoints::parse(&refusing_endpoint()).await.unwrap(),
            RetryPolicy::default(),
        );
        let outcome = refused.create("n", "o", Duration::from_millis(500)).await;
        assert!(
            matches!(outcome, Outcome::Fail(_)),
            "never reached a server: {outcome:?}"
        );
    }

    /// A server shutting down gracefully (a rolling restart): the connection
    /// is held open by a stream that never ends while the server stops taking
    /// new ones, then the next call is made. hyper cancels a request that was
    /// still queued when the connection closed: it was never sent. The client
    /// must move on (UNAVAILABLE, retried elsewhere) and know the call was not
    /// performed. Before the fix it ended as an indeterminate CANCELLED — an
    /// innocent caller failed by a rollout (the local chaos run's P5 finding).
    #[tokio::test]
    async fn a_request_a_closing_connection_never_sent_is_unavailable_not_cancelled() {
        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_reporter, health) = tonic_health::server::health_reporter();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );
        let endpoints = Endpoints::parse(&format!("http://{addr}")).await.unwrap();
        let client = Client::new(
            endpoints.clone(),
            RetryPolicy {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(10),
                multiplier: 1,
            },
        );
        let (_, channel) = endpoints.pick(None).unwrap();
        let mut watch = HealthClient::new(channel)
            .watch(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        let _ = watch.message().await;
        stop.send(()).unwrap();
        let mut first_failure = None;
        for _ in 0..40 {
            let outcome = client
                .call(Duration::from_secs(2), |channel, _| async move {
                    HealthClient::new(channel)
                        .check(HealthCheckRequest::default())
                        .await
                        .map(|_| ())
                })
                .await;
            if outcome != Outcome::Ok(()) {
                first_failure = Some(outcome);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(first_failure, Some(Outcome::Fail(Code::Unavailable)));
    }

    #[tokio::test]
    async fn a_deadline_counts_from_the_intended_send_time() {
        let client = Client::new(
            Endpoints::parse(&resetting_endpoint().await).await.unwrap(),
            RetryPolicy::default(),
        );
        // Intended long enough ago that its deadline has passed: never sent.
        let intended = Instant::now() - Duration::from_secs(10);
        let outcome = client
            .create("n", "o", Until(intended + Duration::from_secs(5)))
            .await;
        assert_eq!(outcome, Outcome::Fail(Code::DeadlineExceeded));
    }
}
