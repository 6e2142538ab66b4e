//! Retrying a runner's transient failures (the object store or the database
//! unreachable for a while) until they pass or the runner is told to stop.
//!
//! A job has no deadline: it waits out an outage. What bounds the wait is the
//! runner's stop token — cancelled when its lease is lost (another runner may
//! hold the job now) or the process shuts down.

use std::{future::Future, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::storage::StorageError;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Something that may be worth trying again.
pub trait Transient {
    fn is_transient(&self) -> bool;
    /// The error that says the runner stopped while waiting.
    fn stopped(what: &str) -> Self;
}

impl Transient for StorageError {
    fn is_transient(&self) -> bool {
        StorageError::is_transient(self)
    }
    fn stopped(what: &str) -> Self {
        StorageError::Unavailable(format!("the runner stopped while trying to {what}"))
    }
}

impl Transient for vfps_core::Error {
    fn is_transient(&self) -> bool {
        vfps_core::Error::is_transient(self)
    }
    fn stopped(what: &str) -> Self {
        vfps_core::Error::unavailable(format!("the runner stopped while trying to {what}"))
    }
}

/// Retries under a runner's stop token.
#[derive(Debug, Clone)]
pub struct Persist {
    stop: CancellationToken,
}

impl Persist {
    pub fn new(stop: CancellationToken) -> Self {
        Self { stop }
    }

    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Runs `op` until it succeeds, fails for good, or the runner stops.
    pub async fn run<T, E, F, Fut>(&self, what: &str, mut op: F) -> Result<T, E>
    where
        E: Transient + std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0u32;
        loop {
            if self.stop.is_cancelled() {
                return Err(E::stopped(what));
            }
            let attempt = tokio::select! {
                r = op() => r,
                _ = self.stop.cancelled() => return Err(E::stopped(what)),
            };
            match attempt {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() => {
                    attempts += 1;
                    if attempts == 1 || attempts.is_multiple_of(20) {
                        tracing::warn!(attempts, error = %e, "a CSV job cannot {what} yet; retrying");
                    }
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.stop.cancelled() => return Err(E::stopped(what)),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn transient_failures_are_retried_and_others_are_not() {
        let persist = Persist::new(CancellationToken::new());
        let calls = AtomicU32::new(0);
        let r: Result<u32, StorageError> = persist
            .run("test", || async {
                match calls.fetch_add(1, Ordering::Relaxed) {
                    0 | 1 => Err(StorageError::Unavailable("down".into())),
                    n => Ok(n),
                }
            })
            .await;
        assert_eq!(r, Ok(2));
        let r: Result<(), StorageError> = persist
            .run("test", || async { Err(StorageError::Refused("no".into())) })
            .await;
        assert_eq!(r, Err(StorageError::Refused("no".into())));
    }

    #[tokio::test]
    async fn a_stopped_runner_stops_waiting() {
        let stop = CancellationToken::new();
        let persist = Persist::new(stop.clone());
        let waiting = tokio::spawn(async move {
            persist
                .run("test", || async {
                    Err::<(), _>(StorageError::Unavailable("down".into()))
                })
                .await
        });
        stop.cancel();
        let r = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(StorageError::Unavailable(m)) if m.contains("stopped")));
    }
}
