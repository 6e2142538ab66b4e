//! What this process knows about reaching its database, from its own attempts.
//!
//! Readiness must be the replica's own state, not the shared database's: every
//! replica sees a failover at once, and a probe that asked the database would take
//! them all out of rotation together. So nothing here asks the database; the
//! store reports every attempt it makes (requests and the PostgreSQL monitor's
//! probes), and readiness reads the result.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

/// The database as this process last found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseHealth {
    /// No attempt has succeeded since start.
    NotYetReached,
    /// The last attempt succeeded.
    Reachable,
    /// Every attempt since `for_` ago failed; `why` is the latest cause.
    Unreachable { for_: Duration, why: String },
}

#[derive(Debug)]
enum State {
    NotYetReached,
    Reachable,
    Unreachable { since: Instant, why: String },
}

/// Updated by the store on every attempt; read by readiness and `/healthz`.
#[derive(Debug)]
pub struct Reachability {
    state: Mutex<State>,
    /// `state` is `Reachable`: every statement reports a success, and in steady
    /// state that costs one atomic load instead of a lock shared by all calls.
    reachable: AtomicBool,
    /// Since when, and why, the database has refused writes (a standby, a
    /// read-only database), as the PostgreSQL monitor found: reads that
    /// succeed meanwhile do not make it usable, only the monitor finding it
    /// writable again does.
    refusing_writes: Mutex<Option<(Instant, String)>>,
}

impl Default for Reachability {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::NotYetReached),
            reachable: AtomicBool::new(false),
            refusing_writes: Mutex::new(None),
        }
    }
}

impl Reachability {
    /// A database answered.
    pub fn reached(&self) {
        if self.reachable.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut s) = self.state.lock() {
            *s = State::Reachable;
            self.reachable.store(true, Ordering::Release);
        }
    }

    /// An attempt failed for a reason that says the database cannot be used from
    /// here (refused, lost, timed out, read-only). The outage counts from the first
    /// failure after a success.
    pub fn failed(&self, why: &str) {
        if let Ok(mut s) = self.state.lock() {
            self.reachable.store(false, Ordering::Release);
            match &mut *s {
                State::Unreachable { why: last, .. } => *last = why.to_owned(),
                // Never reached: the outage counts from the first failure too.
                State::NotYetReached | State::Reachable => {
                    *s = State::Unreachable {
                        since: Instant::now(),
                        why: why.to_owned(),
                    }
                }
            }
        }
    }

    /// The database accepts no writes (kept until [`Reachability::writable`]).
    pub fn refuses_writes(&self, why: &str) {
        if let Ok(mut r) = self.refusing_writes.lock() {
            match &mut *r {
                Some((_, last)) => *last = why.to_owned(),
                None => *r = Some((Instant::now(), why.to_owned())),
            }
        }
    }

    /// The database accepts writes.
    pub fn writable(&self) {
        if let Ok(mut r) = self.refusing_writes.lock() {
            *r = None;
        }
    }

    pub fn snapshot(&self) -> DatabaseHealth {
        if let Ok(Some((since, why))) = self.refusing_writes.lock().as_deref() {
            return DatabaseHealth::Unreachable {
                for_: since.elapsed(),
                why: why.clone(),
            };
        }
        match self.state.lock().as_deref() {
            Ok(State::Reachable) => DatabaseHealth::Reachable,
            Ok(State::Unreachable { since, why }) => DatabaseHealth::Unreachable {
                for_: since.elapsed(),
                why: why.clone(),
            },
            Ok(State::NotYetReached) | Err(_) => DatabaseHealth::NotYetReached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_counts_from_its_first_failure_and_ends_with_a_success() {
        let r = Reachability::default();
        assert_eq!(r.snapshot(), DatabaseHealth::NotYetReached);
        r.reached();
        assert_eq!(r.snapshot(), DatabaseHealth::Reachable);
        r.failed("refused");
        std::thread::sleep(Duration::from_millis(20));
        r.failed("timed out");
        let DatabaseHealth::Unreachable { for_, why } = r.snapshot() else {
            panic!("expected unreachable");
        };
        assert!(for_ >= Duration::from_millis(20), "{for_:?}");
        assert_eq!(why, "timed out");
        r.reached();
        assert_eq!(r.snapshot(), DatabaseHealth::Reachable);
    }

    /// A server that refuses writes stays unusable while reads succeed, until
    /// it is found writable.
    #[test]
    fn refused_writes_outlast_successful_reads() {
        let r = Reachability::default();
        r.reached();
        r.refuses_writes("a standby");
        std::thread::sleep(Duration::from_millis(20));
        r.reached();
        let DatabaseHealth::Unreachable { for_, why } = r.snapshot() else {
            panic!("a read made it usable");
        };
        assert!(for_ >= Duration::from_millis(20), "{for_:?}");
        assert_eq!(why, "a standby");
        r.writable();
        assert_eq!(r.snapshot(), DatabaseHealth::Reachable);
    }
}
