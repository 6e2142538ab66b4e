//! Ended admin UI sessions on SQLite (see `crate::sessions`): this process's
//! alone, so its own coherence records each end.

use std::time::SystemTime;

use async_trait::async_trait;
use rusqlite::params;
use vfps_core::{from_micros, to_micros, Error};

use super::{sql_err, SqliteStore};
use crate::sessions::{ended_name, SessionEnds};

#[async_trait]
impl SessionEnds for SqliteStore {
    async fn end_sessions(
        &self,
        key: &[u8; 32],
        ended_at: SystemTime,
        keep_until: SystemTime,
    ) -> Result<(), Error> {
        let k = *key;
        self.with_writer(move |c| {
            c.execute(
                "INSERT INTO ui_session_ends (key, ended_at, keep_until) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (key) DO UPDATE SET \
                 ended_at = max(ended_at, excluded.ended_at), \
                 keep_until = max(keep_until, excluded.keep_until)",
                params![k.as_slice(), to_micros(ended_at), to_micros(keep_until)],
            )
            .map_err(sql_err)?;
            c.execute(
                "DELETE FROM ui_session_ends WHERE keep_until < ?1",
                params![to_micros(SystemTime::now())],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await?;
        self.coherence.deleted(&ended_name(key));
        Ok(())
    }

    async fn sessions_ended(
        &self,
        keys: &[[u8; 32]],
    ) -> Result<Vec<([u8; 32], SystemTime)>, Error> {
        let keys = keys.to_vec();
        self.with_reader(move |c| {
            let mut statement = c
                .prepare_cached("SELECT ended_at FROM ui_session_ends WHERE key = ?1")
                .map_err(sql_err)?;
            let mut found = Vec::new();
            for key in keys {
                let at: Option<i64> = statement
                    .query_row([key.as_slice()], |r| r.get(0))
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        other => Err(other),
                    })
                    .map_err(sql_err)?;
                if let Some(at) = at {
                    found.push((key, from_micros(at)));
                }
            }
            Ok(found)
        })
        .await
    }
}
