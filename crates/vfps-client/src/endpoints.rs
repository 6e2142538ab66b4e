//! Replica endpoints: one gRPC channel per endpoint (never one HTTP/2 connection
//! for everything), picked round-robin, skipping endpoints that just failed.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, RwLock,
    },
    time::{Duration, Instant},
};

use tonic::transport::{Channel, Endpoint};

/// How long an endpoint that answered `UNAVAILABLE` is skipped.
const COOL_OFF: Duration = Duration::from_secs(1);
/// How often `dns:///` targets are re-resolved.
const RESOLVE_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("no endpoints given")]
    Empty,
    #[error("invalid endpoint {0:?}: {1}")]
    Invalid(String, String),
}

struct Replica {
    uri: String,
    channel: Channel,
    /// When it last failed; skipped for [`COOL_OFF`] after.
    failed_at: Option<Instant>,
}

#[derive(Clone)]
pub struct Endpoints {
    replicas: Arc<RwLock<Vec<Replica>>>,
    next: Arc<AtomicUsize>,
}

fn channel(uri: &str) -> Result<Channel, EndpointError> {
    let endpoint = Endpoint::from_shared(uri.to_owned())
        .map_err(|e| EndpointError::Invalid(uri.to_owned(), e.to_string()))?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(3))
        .keep_alive_while_idle(true);
    Ok(endpoint.connect_lazy())
}

impl Endpoints {
    /// Parses `http://a:8081,http://b:8081` or `dns:///host:port`.
    pub async fn parse(spec: &str) -> Result<Self, EndpointError> {
        let spec = spec.trim();
        if let Some(target) = spec.strip_prefix("dns:///") {
            let target = target.to_owned();
            let e = Self::from_uris(&resolve(&target).await?)?;
            let replicas = Arc::downgrade(&e.replicas);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RESOLVE_EVERY).await;
                    let Some(replicas) = replicas.upgrade() else {
                        return;
                    };
                    match resolve(&target).await {
                        Ok(uris) => refresh(&replicas, &uris),
                        Err(e) => {
                            tracing::warn!(error = %e, "re-resolving endpoints failed; keeping the old set")
                        }
                    }
                }
            });
            return Ok(e);
        }
        let uris: Vec<String> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.contains("://") {
                    s.to_owned()
                } else {
                    format!("http://{s}")
                }
            })
            .collect();
        Self::from_uris(&uris)
    }

    /// The replicas one by one, each as its own endpoint set (to ask every
    /// replica the same question).
    pub fn each(&self) -> Result<Vec<Endpoints>, EndpointError> {
        self.uris()
            .into_iter()
            .map(|u| Self::from_uris(std::slice::from_ref(&u)))
            .collect()
    }

    fn from_uris(uris: &[String]) -> Result<Self, EndpointError> {
        if uris.is_empty() {
            return Err(EndpointError::Empty);
        }
        let replicas = uris
            .iter()
            .map(|u| {
                Ok(Replica {
                    uri: u.clone(),
                    channel: channel(u)?,
                    failed_at: None,
                })
            })
            .collect::<Result<Vec<_>, EndpointError>>()?;
        Ok(Self {
            replicas: Arc::new(RwLock::new(replicas)),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub fn uris(&self) -> Vec<String> {
        self.replicas
            .read()
            .map(|r| r.iter().map(|x| x.uri.clone()).collect())
            .unwrap_or_default()
    }

    /// The next endpoint round-robin, skipping recently failed ones and `avoid`
    /// (the one that just failed) when there is another choice.
    pub fn pick(&self, avoid: Option<usize>) -> Option<(usize, Channel)> {
        let replicas = self.replicas.read().ok()?;
        let n = replicas.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let healthy = |i: usize| {
            replicas[i]
                .failed_at
                .is_none_or(|t| t.elapsed() >= COOL_OFF)
        };
        let candidates = (0..n).map(|k| (start + k) % n);
        let choice = candidates
            .clone()
            .find(|&i| healthy(i) && Some(i) != avoid)
            .or_else(|| candidates.clone().find(|&i| Some(i) != avoid))
            .unwrap_or(start % n);
        Some((choice, replicas[choice].channel.clone()))
    }

    /// Records whether a call through endpoint `index` reached a serving replica.
    pub fn report(&self, index: usize, ok: bool) {
        if let Ok(mut replicas) = self.replicas.write() {
            if let Some(r) = replicas.get_mut(index) {
                r.failed_at = if ok { None } else { Some(Instant::now()) };
            }
        }
    }
}

async fn resolve(target: &str) -> Result<Vec<String>, EndpointError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target)
        .await
        .map_err(|e| EndpointError::Invalid(format!("dns:///{target}"), e.to_string()))?
        .collect();
    let mut uris: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    uris.sort();
    uris.dedup();
    if uris.is_empty() {
        return Err(EndpointError::Invalid(
            format!("dns:///{target}"),
            "no addresses".into(),
        ));
    }
    Ok(uris)
}

/// Replaces the replica set, keeping the channels of endpoints that remain.
fn refresh(replicas: &RwLock<Vec<Replica>>, uris: &[String]) {
    let Ok(mut current) = replicas.write() else {
        return;
    };
    if current.iter().map(|r| &r.uri).eq(uris.iter()) {
        return;
    }
    let mut next = Vec::with_capacity(uris.len());
    for u in uris {
        if let Some(pos) = current.iter().position(|r| &r.uri == u) {
            next.push(current.swap_remove(pos));
        } else if let Ok(ch) = channel(u) {
            next.push(Replica {
                uri: u.clone(),
                channel: ch,
                failed_at: None,
            });
        }
    }
    tracing::info!(endpoints = next.len(), "endpoint set changed");
    *current = next;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_robin_skips_failed_and_avoided_endpoints() {
        let e = Endpoints::parse("http://127.0.0.1:1, 127.0.0.1:2 ,http://127.0.0.1:3")
            .await
            .unwrap();
        assert_eq!(
            e.uris(),
            [
                "http://127.0.0.1:1",
                "http://127.0.0.1:2",
                "http://127.0.0.1:3"
            ]
        );
        let picks: Vec<usize> = (0..6).map(|_| e.pick(None).unwrap().0).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        e.report(1, false);
        let picks: Vec<usize> = (0..4).map(|_| e.pick(None).unwrap().0).collect();
        assert!(
            !picks.contains(&1),
            "a failed endpoint is skipped: {picks:?}"
        );
        let (i, _) = e.pick(Some(0)).unwrap();
        assert_ne!(i, 0);
    }

    #[tokio::test]
    async fn dns_targets_resolve_every_address() {
        let e = Endpoints::parse("dns:///localhost:8081").await.unwrap();
        assert!(e.uris().iter().all(|u| u.ends_with(":8081")));
        assert!(Endpoints::parse("").await.is_err());
    }
}
