//! Ending admin UI sessions on every replica at once. A session is all in its
//! sealed cookie, valid until it expires; to end one before that — its
//! sign-out, or an admin ending a user's sessions — the store records the end
//! (`vfps_store::sessions`) and every replica asks it before it takes a
//! session. Each replica caches the answer per key, served only while the
//! store's coherence says no end of that key was announced since it was read
//! (as cached namespaces are), so after an end is acknowledged no replica
//! takes a session it ended.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use ring::digest;
use vfps_core::Error;
use vfps_store::{sessions::ended_name, Store};

use super::session::Session;
use crate::cache::TtlCache;

/// How long an answer is kept (the coherence may drop it sooner).
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most keys whose answer a replica keeps.
const CACHE_ENTRIES: usize = 10_000;

/// The key of one session's end: it is never the session's nonce itself
/// (which the CSRF tokens derive from).
pub fn session_key(session: &Session) -> [u8; 32] {
    hash(b"vfps ui session\0", session.nonce.as_bytes())
}

/// The key of the end of every session of a user (a typed subject).
pub fn subject_key(subject: &str) -> [u8; 32] {
    hash(b"vfps ui subject\0", subject.as_bytes())
}

fn hash(domain: &[u8], value: &[u8]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    ctx.update(domain);
    ctx.update(value);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

pub struct EndedSessions {
    store: Arc<dyn Store>,
    /// Per key, when its sessions were last ended (`None`: never), and when
    /// that was read.
    known: TtlCache<[u8; 32], Option<SystemTime>>,
}

impl EndedSessions {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            known: TtlCache::new(CACHE_TTL, CACHE_ENTRIES),
        }
    }

    /// Whether `session` was ended: by its own sign-out (whenever: no
    /// replica's clock is asked), or by an end of its user's sessions after
    /// it began (by the clocks of the replica that began it and the one that
    /// ended them). A read the database failed is retried until `deadline`.
    pub async fn ended(&self, session: &Session, deadline: Instant) -> Result<bool, Error> {
        let own = session_key(session);
        let mut keys = vec![own];
        if let Some(subject) = &session.subject {
            keys.push(subject_key(subject));
        }
        let mut ends = Vec::with_capacity(keys.len());
        let mut unknown = Vec::new();
        for key in keys {
            match self.known.get(&key) {
                Some((end, read_at))
                    if self.store.coherence().fresh(&ended_name(&key), read_at) =>
                {
                    ends.push((key, end))
                }
                _ => unknown.push(key),
            }
        }
        if !unknown.is_empty() {
            let read_at = Instant::now();
            let found = super::retry_transient(deadline, "session ends", || {
                self.store.sessions_ended(&unknown)
            })
            .await?;
            for key in unknown {
                let end = found.iter().find(|(k, _)| *k == key).map(|(_, at)| *at);
                self.known.insert(key, end, read_at);
                ends.push((key, end));
            }
        }
        let began = session.issued_at();
        Ok(ends.into_iter().any(|(key, end)| match end {
            Some(_) if key == own => true,
            Some(at) => began <= at,
            None => false,
        }))
    }

    /// Ends the sessions under `key` that began until now, for good on every
    /// replica once this returns; `keep_until`: when every such session has
    /// expired.
    pub async fn end(&self, key: &[u8; 32], keep_until: SystemTime) -> Result<(), Error> {
        self.store
            .end_sessions(key, SystemTime::now(), keep_until)
            .await?;
        // Every other replica has seen it, or stopped trusting its answers.
        tokio::time::sleep(self.store.coherence().settle_delay()).await;
        Ok(())
    }
}
