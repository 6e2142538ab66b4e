//! [`KeyStore`] on SQLite.

use async_trait::async_trait;
use rusqlite::params;
use vfps_core::{now_micros, to_micros, Error, NamespaceUid};

use super::{sql_err, SqliteStore};
use crate::keys::{KeyStore, StoredKeys};

#[async_trait]
impl KeyStore for SqliteStore {
    async fn namespace_keys(&self, uid: NamespaceUid) -> Result<Vec<StoredKeys>, Error> {
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(
                    "SELECT version, data_key, index_key, wrapped_by FROM namespace_keys \
                     WHERE namespace_uid = ?1 ORDER BY version DESC",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![uid.0], |r| {
                    Ok(StoredKeys {
                        uid,
                        version: r.get(0)?,
                        data: r.get(1)?,
                        index: r.get(2)?,
                        wrapped_by: r.get(3)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
        })
        .await
    }

    async fn put_namespace_keys(&self, keys: &StoredKeys) -> Result<bool, Error> {
        let keys = keys.clone();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "INSERT INTO namespace_keys \
                     (namespace_uid, version, data_key, index_key, wrapped_by, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                    params![
                        keys.uid.0,
                        keys.version,
                        keys.data,
                        keys.index,
                        keys.wrapped_by,
                        to_micros(now_micros())
                    ],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }
}
