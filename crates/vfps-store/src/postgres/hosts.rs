//! What the pool knows of the servers: since when its connections are
//! distrusted ([`Distrust`]), and what each listed host did at its last
//! attempt ([`HostStates`]), so a new connection goes to the primary first.

use std::time::Duration;

/// Since when the pool's connections are distrusted: those opened before it
/// are closed instead of handed out. Set by the monitor when the database
/// stopped answering it or it had to reconnect (a paused, isolated or
/// demoted primary, a failover): a new connection goes to whichever server
/// is the primary now.
#[derive(Debug)]
pub struct Distrust {
    origin: std::time::Instant,
    /// Nanoseconds after `origin`; 0: nothing distrusted yet. Statements in
    /// flight watch it ([`Distrust::covers`]).
    until: tokio::sync::watch::Sender<u64>,
}

impl Default for Distrust {
    fn default() -> Self {
        Self {
            origin: std::time::Instant::now(),
            until: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Distrust {
    /// Every connection opened until now.
    pub fn until_now(&self) {
        let now = self.origin.elapsed().as_nanos().max(1) as u64;
        self.until.send_if_modified(|until| {
            let later = now > *until;
            if later {
                *until = now;
            }
            later
        });
    }

    pub(super) fn nanos(&self, created: std::time::Instant) -> u64 {
        created.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// Whether a connection opened at `created` is distrusted.
    pub fn distrusts(&self, created: std::time::Instant) -> bool {
        let until = *self.until.borrow();
        until != 0 && self.nanos(created) <= until
    }

    /// Completes once a connection opened at `created` is distrusted.
    pub async fn covers(&self, created: std::time::Instant) {
        let created = self.nanos(created);
        let mut until = self.until.subscribe();
        // The sender lives as long as `self`: `changed` cannot fail here.
        while until.wait_for(|u| *u != 0 && created <= *u).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What an attempt to connect to a host found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A connection of the kind asked for (writable, if read-write was).
    Usable,
    /// It answered but refused writes when read-write was asked (a standby).
    ReadOnly,
    /// It did not answer within `Timeout`, or refused the connection.
    Offline,
}

/// What each listed host did at its last attempt, and when; trusted for
/// `Host Recheck Seconds` (Npgsql's), then the host is tried as if unknown.
#[derive(Debug)]
pub struct HostStates {
    hosts: std::sync::Mutex<Vec<HostState>>,
    /// Bumped whenever a host becomes usable; attempts waiting on another
    /// host watch it.
    pub(super) found: tokio::sync::watch::Sender<u64>,
    recheck: Duration,
}

/// One host's entry in [`HostStates`].
#[derive(Debug, Clone, Copy, Default)]
struct HostState {
    /// What its last attempt found, and when.
    seen: Option<(Seen, std::time::Instant)>,
    /// When it last became usable (was not usable, as far as the states
    /// knew, and then was): a promotion, or a primary back.
    became_usable: Option<std::time::Instant>,
}

impl HostStates {
    pub fn new(hosts: usize, recheck: Duration) -> Self {
        Self {
            hosts: std::sync::Mutex::new(vec![HostState::default(); hosts]),
            found: tokio::sync::watch::Sender::new(0),
            recheck,
        }
    }

    /// A copy of every host's state (no lock is held past the copy).
    fn snapshot(&self) -> Vec<HostState> {
        self.hosts.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// The hosts in the order to try them: usable ones first, then unknown
    /// (or not seen for `recheck`), then read-only, then offline ones (still
    /// tried: a host that came back must be found); the listed order within
    /// each.
    pub fn order(&self, now: std::time::Instant) -> Vec<usize> {
        let hosts = self.snapshot();
        let rank = |h: &HostState| match h.seen {
            Some((seen, at)) if now.saturating_duration_since(at) < self.recheck => match seen {
                Seen::Usable => 0,
                Seen::ReadOnly => 2,
                Seen::Offline => 3,
            },
            _ => 1,
        };
        let mut order: Vec<usize> = (0..hosts.len()).collect();
        order.sort_by_key(|&i| rank(&hosts[i]));
        order
    }

    pub fn record(&self, host: usize, seen: Seen, at: std::time::Instant) {
        let became_usable = match self.hosts.lock() {
            Ok(mut hosts) => match hosts.get_mut(host) {
                Some(h) => {
                    let was_usable = matches!(h.seen, Some((Seen::Usable, before))
                        if at.saturating_duration_since(before) < self.recheck);
                    h.seen = Some((seen, at));
                    let became = seen == Seen::Usable && !was_usable;
                    if became {
                        h.became_usable = Some(at);
                    }
                    became
                }
                None => false,
            },
            Err(_) => false,
        };
        if became_usable {
            self.found.send_modify(|n| *n += 1);
        }
    }

    /// Whether `host` did not answer at its last attempt, within `recheck`.
    pub(super) fn offline(&self, host: usize, now: std::time::Instant) -> bool {
        matches!(self.snapshot().get(host), Some(HostState { seen: Some((Seen::Offline, at)), .. })
            if now.saturating_duration_since(*at) < self.recheck)
    }

    /// Whether a host other than `host` became usable at or after `since`.
    pub(super) fn usable_elsewhere_since(&self, host: usize, since: std::time::Instant) -> bool {
        self.snapshot()
            .iter()
            .enumerate()
            .any(|(i, h)| i != host && h.became_usable.is_some_and(|at| at >= since))
    }

    /// Resolves once a host other than `host` has become usable at or after
    /// `since` (found by another attempt); never otherwise.
    pub(super) async fn found_elsewhere(
        &self,
        found: &mut tokio::sync::watch::Receiver<u64>,
        host: usize,
        since: std::time::Instant,
    ) {
        loop {
            found.borrow_and_update();
            if self.usable_elsewhere_since(host, since) {
                return;
            }
            if found.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
