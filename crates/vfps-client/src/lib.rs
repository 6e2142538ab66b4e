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
//! - [`Client`]: the typed calls.

use std::time::Duration;

use tonic::{Code, Status};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest, Pseudonym,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};

pub mod endpoints;
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
/// only when the connection was never established.
pub fn may_have_happened(status: &Status) -> bool {
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => true,
        Code::Unavailable | Code::Unknown | Code::Internal => !never_connected(status),
        _ => false,
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

/// The typed client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    endpoints: Endpoints,
    policy: RetryPolicy,
}

impl Client {
    pub fn new(endpoints: Endpoints, policy: RetryPolicy) -> Self {
        Self { endpoints, policy }
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// Runs `attempt` under the retry policy until `deadline` (covering every attempt).
    async fn call<T, F, Fut>(&self, deadline: Duration, mut attempt: F) -> Outcome<T>
    where
        F: FnMut(tonic::transport::Channel, Duration) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let until = tokio::time::Instant::now() + deadline;
        let mut avoid = None;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let remaining = until.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Outcome::Indeterminate(Code::DeadlineExceeded);
            }
            let Some((index, channel)) = self.endpoints.pick(avoid) else {
                return Outcome::Fail(Code::Unavailable);
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
            let unavailable = status.code() == Code::Unavailable;
            if unavailable {
                self.endpoints.report(index, false);
            }
            let happened = may_have_happened(&status);
            let backoff = self.policy.backoff(tries);
            let next_fits = tokio::time::Instant::now() + backoff < until;
            if !unavailable || tries >= self.policy.max_attempts || !next_fits {
                return if happened {
                    Outcome::Indeterminate(status.code())
                } else {
                    Outcome::Fail(status.code())
                };
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
        deadline: Duration,
    ) -> Outcome<Pseudonym> {
        self.call(deadline, |channel, remaining| {
            let mut client = PseudonymServiceClient::new(channel);
            let mut request = tonic::Request::new(PseudonymServiceCreateRequest {
                namespace: namespace.to_owned(),
                original_value: original.to_owned(),
            });
            request.set_timeout(remaining);
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
        deadline: Duration,
    ) -> Outcome<Pseudonym> {
        self.call(deadline, |channel, remaining| {
            let mut client = PseudonymServiceClient::new(channel);
            let mut request = tonic::Request::new(PseudonymServiceGetRequest {
                namespace: namespace.to_owned(),
                pseudonym_value: pseudonym.to_owned(),
            });
            request.set_timeout(remaining);
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

    /// `NamespaceService/Create`, treating `ALREADY_EXISTS` as success.
    pub async fn ensure_namespace(
        &self,
        request: NamespaceServiceCreateRequest,
        deadline: Duration,
    ) -> Outcome<()> {
        self.call(deadline, |channel, remaining| {
            let mut client = NamespaceServiceClient::new(channel);
            let mut r = tonic::Request::new(request.clone());
            r.set_timeout(remaining);
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
