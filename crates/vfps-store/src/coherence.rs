//! When may a replica trust what it cached about a namespace?
//!
//! Namespaces and their pseudonyms never change, so caches of them can only go
//! stale one way: the namespace is deleted (and perhaps created again with other
//! settings), possibly through another replica. The rule that keeps every cache
//! correct across replicas:
//!
//! - A delete announces itself in its own transaction (PostgreSQL `NOTIFY`), and
//!   every replica's monitor connection `LISTEN`s. A cached entry read before a
//!   deletion of its namespace was seen here is stale.
//! - A replica trusts its caches only for a short lease after a round trip on the
//!   monitor connection: a notification committed before that round trip started
//!   has been delivered by the time it completes. A replica that cannot renew (its
//!   monitor lost the database) stops trusting at once and, on reconnecting, every
//!   entry read before it listened again is stale.
//! - The deleting replica waits one lease after its commit before acknowledging.
//!   By then every replica has either seen the deletion or stopped trusting its
//!   caches, so no cache anywhere serves the namespace after the delete's
//!   acknowledgement.
//!
//! A single process (SQLite) trusts its caches always and records its own deletes.

use std::{
    collections::HashMap,
    sync::RwLock,
    time::{Duration, Instant},
};

/// More deletions remembered than this: forget them all and treat everything
/// cached before as stale (correct, and bounded).
const MAX_REMEMBERED_DELETIONS: usize = 10_000;

#[derive(Debug)]
struct State {
    /// Until when cached entries may be used; `None` = not now.
    trusted_until: Option<Instant>,
    /// When each deleted namespace's deletion was seen here.
    deleted: HashMap<String, Instant>,
    /// Everything read before this instant is stale.
    floor: Instant,
}

#[derive(Debug)]
pub struct Coherence {
    /// `None`: one process, always trusted. `Some(lease)`: renewed by a monitor.
    lease: Option<Duration>,
    /// Read by every cache hit, written on renewals and deletions: readers
    /// never wait for each other.
    state: RwLock<State>,
}

impl Coherence {
    /// For a store no other process writes to.
    pub fn local() -> Self {
        Self::new(None)
    }

    /// For a store shared by replicas: trusted for `lease` after each renewal.
    pub fn leased(lease: Duration) -> Self {
        Self::new(Some(lease))
    }

    fn new(lease: Option<Duration>) -> Self {
        Self {
            lease,
            state: RwLock::new(State {
                trusted_until: None,
                deleted: HashMap::new(),
                floor: Instant::now(),
            }),
        }
    }

    /// How long a delete waits after its commit before it is acknowledged.
    pub fn settle_delay(&self) -> Duration {
        self.lease.unwrap_or_default()
    }

    /// May an entry of `namespace`, read from the store no earlier than
    /// `read_started`, be served now?
    pub fn fresh(&self, namespace: &str, read_started: Instant) -> bool {
        let Ok(s) = self.state.read() else {
            return false;
        };
        let trusted = match self.lease {
            None => true,
            Some(_) => s.trusted_until.is_some_and(|t| Instant::now() < t),
        };
        trusted
            && read_started >= s.floor
            && s.deleted.get(namespace).is_none_or(|at| read_started > *at)
    }

    /// `namespace` was deleted (by this process, or seen through a notification).
    pub fn deleted(&self, namespace: &str) {
        if let Ok(mut s) = self.state.write() {
            let now = Instant::now();
            if s.deleted.len() >= MAX_REMEMBERED_DELETIONS {
                s.deleted.clear();
                s.floor = now;
            }
            s.deleted.insert(namespace.to_owned(), now);
        }
    }

    /// A monitor round trip that started at `started` completed: every deletion
    /// committed before then has been seen.
    pub fn renew(&self, started: Instant) {
        if let (Some(lease), Ok(mut s)) = (self.lease, self.state.write()) {
            let until = started + lease;
            if s.trusted_until.is_none_or(|t| t < until) {
                s.trusted_until = Some(until);
            }
        }
    }

    /// The monitor lost its connection: deletions may go unseen from now on.
    pub fn revoke(&self) {
        if let Ok(mut s) = self.state.write() {
            s.trusted_until = None;
        }
    }

    /// The monitor listens again from `listening_since`: deletions before it may
    /// have been missed, so everything read earlier is stale.
    pub fn relisten(&self, listening_since: Instant) {
        if let Ok(mut s) = self.state.write() {
            s.floor = s.floor.max(listening_since);
            s.deleted.retain(|_, at| *at >= listening_since);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_store_trusts_everything_read_after_the_last_deletion() {
        let c = Coherence::local();
        let before = Instant::now();
        assert!(c.fresh("n", before));
        c.deleted("n");
        assert!(!c.fresh("n", before), "read before the deletion");
        assert!(c.fresh("other", before));
        assert!(c.fresh("n", Instant::now()));
        assert_eq!(c.settle_delay(), Duration::ZERO);
    }

    #[test]
    fn a_shared_store_trusts_only_within_a_renewed_lease() {
        let c = Coherence::leased(Duration::from_millis(40));
        let read = Instant::now();
        assert!(!c.fresh("n", read), "never renewed");
        c.renew(Instant::now());
        assert!(c.fresh("n", read));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!c.fresh("n", read), "the lease lapsed");
        c.renew(Instant::now());
        assert!(c.fresh("n", read));
        c.revoke();
        assert!(!c.fresh("n", read), "revoked");
        let listening = Instant::now();
        c.relisten(listening);
        c.renew(Instant::now());
        assert!(!c.fresh("n", read), "read before listening again");
        assert!(c.fresh("n", Instant::now()));
        assert_eq!(c.settle_delay(), Duration::from_millis(40));
    }

    #[test]
    fn too_many_deletions_make_everything_older_stale() {
        let c = Coherence::local();
        let read = Instant::now();
        for i in 0..MAX_REMEMBERED_DELETIONS + 1 {
            c.deleted(&format!("n{i}"));
        }
        assert!(!c.fresh("unrelated", read));
        assert!(c.state.read().unwrap().deleted.len() <= MAX_REMEMBERED_DELETIONS);
    }
}
