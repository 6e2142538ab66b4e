//! Ended admin UI sessions. A session lives in its sealed cookie, so nothing
//! on the server knew it had ended: a cookie captured before its sign-out
//! still signed its holder in. A row here ends the sessions under one key —
//! a single session's (its sign-out) or a user's (an admin ending all of
//! them) — issued before `ended_at`; it is kept until every session it could
//! end has expired.
//!
//! An end is a write like a namespace delete: committed through the
//! synchronous standby and announced to every replica (the coherence name
//! [`ended_name`] on the namespace-deletion channel), so a replica that
//! cached "not ended" for the key stops serving that answer; the caller waits
//! the coherence's settle delay before it acknowledges (see `coherence`).

use std::time::SystemTime;

use async_trait::async_trait;
use vfps_core::Error;

/// The coherence name under which an end of `key` is announced.
pub fn ended_name(key: &[u8; 32]) -> String {
    format!("ui-sessions:{}", hex::encode(key))
}

/// The ended sessions, in both stores.
#[async_trait]
pub trait SessionEnds: Send + Sync {
    /// Ends the sessions under `key` issued before `ended_at` (a later end
    /// of the same key keeps the later time), remembered until `keep_until`;
    /// rows past their `keep_until` go. Durable and announced before it
    /// returns.
    async fn end_sessions(
        &self,
        key: &[u8; 32],
        ended_at: SystemTime,
        keep_until: SystemTime,
    ) -> Result<(), Error>;

    /// When the sessions under each of `keys` were last ended, for those
    /// keys that were.
    async fn sessions_ended(&self, keys: &[[u8; 32]])
        -> Result<Vec<([u8; 32], SystemTime)>, Error>;
}

/// A key column's bytes as a key; `None` if it is not 32 bytes long.
pub(crate) fn key_of(raw: &[u8]) -> Option<[u8; 32]> {
    <[u8; 32]>::try_from(raw).ok()
}
