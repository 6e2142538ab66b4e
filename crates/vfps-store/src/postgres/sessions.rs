//! Ended admin UI sessions on PostgreSQL (see `crate::sessions`).

use std::time::SystemTime;

use async_trait::async_trait;
use vfps_core::Error;

use super::{classify, monitor, PgStore, DURABLE};
use crate::sessions::{ended_name, key_of, SessionEnds};

#[async_trait]
impl SessionEnds for PgStore {
    async fn end_sessions(
        &self,
        key: &[u8; 32],
        ended_at: SystemTime,
        keep_until: SystemTime,
    ) -> Result<(), Error> {
        let name = ended_name(key);
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        steps.run(tx.execute(DURABLE, &[])).await?;
        steps
            .run(tx.execute(
                "INSERT INTO ui_session_ends (key, ended_at, keep_until) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO UPDATE SET \
                 ended_at = greatest(ui_session_ends.ended_at, excluded.ended_at), \
                 keep_until = greatest(ui_session_ends.keep_until, excluded.keep_until)",
                &[&key.as_slice(), &ended_at, &keep_until],
            ))
            .await?;
        steps
            .run(tx.execute("DELETE FROM ui_session_ends WHERE keep_until < now()", &[]))
            .await?;
        // Delivered at commit to every replica's monitor: what they cached
        // about this key is stale.
        steps
            .run(tx.execute("SELECT pg_notify($1, $2)", &[&monitor::CHANNEL, &name]))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        self.coherence.deleted(&name);
        Ok(())
    }

    async fn sessions_ended(
        &self,
        keys: &[[u8; 32]],
    ) -> Result<Vec<([u8; 32], SystemTime)>, Error> {
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                "SELECT key, ended_at FROM ui_session_ends WHERE key = ANY($1)",
                &[&keys],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                let raw: &[u8] = r.try_get(0).map_err(|e| classify(&e))?;
                let at: SystemTime = r.try_get(1).map_err(|e| classify(&e))?;
                let key = key_of(raw)
                    .ok_or_else(|| Error::internal("an ended session's key is not 32 bytes"))?;
                Ok((key, at))
            })
            .collect()
    }
}
