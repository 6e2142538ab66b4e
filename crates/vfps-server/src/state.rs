//! State shared by every transport: the service, metrics and the replica's health.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use crate::{metrics::Metrics, service::Service};

/// How long a readiness verdict is reused, so probes do not hammer the database.
const READINESS_CACHE: Duration = Duration::from_millis(500);
/// How long a readiness check may wait for the database.
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    pub metrics: Metrics,
    pub health: Arc<Health>,
    /// Cap on any call's deadline, and the deadline of calls that set none.
    pub max_call_deadline: Duration,
}

/// The replica's own view of whether it should receive traffic.
#[derive(Default)]
pub struct Health {
    /// Set on SIGTERM: the replica is leaving and must not be sent new work.
    draining: AtomicBool,
    /// Set once the configured initial namespaces exist.
    initialised: AtomicBool,
    /// Last database check: when, and whether a writable database answered.
    last_check: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Health {
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
    pub fn mark_initialised(&self) {
        self.initialised.store(true, Ordering::SeqCst);
    }
}

impl AppState {
    /// The instant by which a call must be answered. A small margin is kept so an
    /// `UNAVAILABLE` reaches the caller before its own deadline fires.
    pub fn deadline(&self, asked: Option<Duration>) -> Instant {
        let d = asked.map_or(self.max_call_deadline, |a| a.min(self.max_call_deadline));
        let margin = (d / 10).min(Duration::from_millis(100));
        Instant::now() + d.saturating_sub(margin)
    }

    /// Ready = not draining, initialised, and a writable database answers.
    pub async fn readiness(&self) -> Result<(), String> {
        if self.health.is_draining() {
            return Err("shutting down".into());
        }
        if !self.health.initialised.load(Ordering::SeqCst) {
            return Err("initial namespaces are not created yet".into());
        }
        if let Ok(last) = self.health.last_check.lock() {
            if let Some((at, verdict)) = last.as_ref() {
                if at.elapsed() < READINESS_CACHE {
                    return verdict.clone();
                }
            }
        }
        let verdict =
            match tokio::time::timeout(READINESS_TIMEOUT, self.service.store().check_writable())
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err("the database did not answer in time".into()),
            };
        if let Ok(mut last) = self.health.last_check.lock() {
            *last = Some((Instant::now(), verdict.clone()));
        }
        verdict
    }
}
