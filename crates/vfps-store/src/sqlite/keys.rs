//! [`KeyStore`] on SQLite.

use async_trait::async_trait;
use rusqlite::params;
use vfps_core::{now_micros, to_micros, Error, NamespaceName, NamespaceUid};

use super::{sql_err, SqliteStore};
use crate::keys::{
    version_bytes, version_of, KeyStore, PlainRow, Rekeyed, Resealed, SealedRow, SealedStore,
    SealedTable, StoredKeys, Which,
};

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

    async fn rewrap_namespace_keys(
        &self,
        keys: &StoredKeys,
        old_wrapped_by: &str,
    ) -> Result<bool, Error> {
        let (keys, old) = (keys.clone(), old_wrapped_by.to_owned());
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE namespace_keys SET data_key = ?3, index_key = ?4, wrapped_by = ?5 \
                     WHERE namespace_uid = ?1 AND version = ?2 AND wrapped_by = ?6",
                    params![
                        keys.uid.0,
                        keys.version,
                        keys.data,
                        keys.index,
                        keys.wrapped_by,
                        old
                    ],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }
}

#[async_trait]
impl SealedStore for SqliteStore {
    async fn sealed_rows(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        which: Which,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SealedRow>, Error> {
        use rusqlite::types::Value;
        let namespace = namespace.as_str().to_owned();
        let after = after.map(str::to_owned);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (condition, value) = match which {
            Which::All => ("?2 IS NULL", Value::Null),
            Which::NotSealedUnder(v) => (
                "substr(original_sealed, 2, 4) <> ?2",
                Value::Blob(version_bytes(v).to_vec()),
            ),
            Which::NotIndexedUnder(v) => (
                "substr(original_value, 1, length(?2)) <> ?2",
                Value::Text(Which::index_mark(v)),
            ),
        };
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT pseudonym_value, original_sealed, original_value FROM {} \
                     WHERE namespace = ?1 AND original_sealed IS NOT NULL AND {condition} \
                       AND (?3 IS NULL OR pseudonym_value > ?3) \
                     ORDER BY pseudonym_value LIMIT ?4",
                    table.name()
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![namespace, value, after, limit], |r| {
                    Ok(SealedRow {
                        pseudonym: r.get(0)?,
                        sealed: r.get(1)?,
                        value: r.get(2)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
        })
        .await
    }

    async fn reseal(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        rows: &[Resealed],
    ) -> Result<u64, Error> {
        let namespace = namespace.as_str().to_owned();
        let rows = rows.to_vec();
        self.with_writer(move |c| {
            let tx = c.transaction().map_err(sql_err)?;
            let mut n = 0;
            {
                let mut st = tx
                    .prepare_cached(&format!(
                        "UPDATE {} SET original_sealed = ?4 \
                         WHERE namespace = ?1 AND pseudonym_value = ?2 AND original_sealed = ?3",
                        table.name()
                    ))
                    .map_err(sql_err)?;
                for r in &rows {
                    n += st
                        .execute(params![namespace, r.pseudonym, r.old, r.new])
                        .map_err(sql_err)? as u64;
                }
            }
            tx.commit().map_err(sql_err)?;
            Ok(n)
        })
        .await
    }

    async fn plain_rows(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PlainRow>, Error> {
        let namespace = namespace.as_str().to_owned();
        let after = after.map(str::to_owned);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT pseudonym_value, original_value FROM {} \
                     WHERE namespace = ?1 AND original_sealed IS NULL \
                       AND (?2 IS NULL OR pseudonym_value > ?2) \
                     ORDER BY pseudonym_value LIMIT ?3",
                    table.name()
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![namespace, after, limit], |r| {
                    Ok(PlainRow {
                        pseudonym: r.get(0)?,
                        original: r.get(1)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
        })
        .await
    }

    async fn rekey(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        rows: &[Rekeyed],
    ) -> Result<u64, Error> {
        let namespace = namespace.as_str().to_owned();
        let rows = rows.to_vec();
        let unique = match table {
            SealedTable::Pseudonyms => {
                "AND NOT EXISTS (SELECT 1 FROM pseudonyms u \
                 WHERE u.namespace = ?1 AND u.original_value = ?5)"
            }
            SealedTable::Multi => "",
        };
        self.with_writer(move |c| {
            let tx = c.transaction().map_err(sql_err)?;
            let mut n = 0;
            {
                let mut st = tx
                    .prepare_cached(&format!(
                        "UPDATE {} SET original_value = ?5, original_sealed = ?6 \
                         WHERE namespace = ?1 AND pseudonym_value = ?2 AND original_value = ?3 \
                           AND original_sealed IS ?4 {unique}",
                        table.name()
                    ))
                    .map_err(sql_err)?;
                for r in &rows {
                    n += st
                        .execute(params![
                            namespace,
                            r.pseudonym,
                            r.old_value,
                            r.old_sealed,
                            r.new_value,
                            r.new_sealed
                        ])
                        .map_err(sql_err)? as u64;
                }
            }
            tx.commit().map_err(sql_err)?;
            Ok(n)
        })
        .await
    }

    async fn move_originals(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error> {
        let namespace = namespace.as_str().to_owned();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE namespaces SET originals_sealed = ?3, originals_moving = 1 \
                     WHERE name = ?1 AND uid = ?2 AND originals_moving_from_index IS NULL \
                       AND (originals_sealed <> ?3 OR originals_moving)",
                    params![namespace, uid.0, sealed],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn reindex_originals(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        version: u32,
    ) -> Result<bool, Error> {
        let namespace = namespace.as_str().to_owned();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE namespaces SET originals_moving = 1, \
                       originals_moving_from_index = originals_index_version, \
                       originals_index_version = ?3 \
                     WHERE name = ?1 AND uid = ?2 AND originals_sealed AND NOT originals_moving \
                       AND originals_index_version < ?3",
                    params![namespace, uid.0, version],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn moved(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error> {
        let namespace = namespace.as_str().to_owned();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE namespaces SET originals_moving = 0, originals_moving_from_index = NULL \
                     WHERE name = ?1 AND uid = ?2 AND originals_sealed = ?3 AND originals_moving",
                    params![namespace, uid.0, sealed],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn sealed_versions(&self, namespace: &NamespaceName) -> Result<Vec<(u32, u64)>, Error> {
        let namespace = namespace.as_str().to_owned();
        let counted = self
            .with_reader(move |c| {
                let mut st = c
                    .prepare_cached(
                        "SELECT v, sum(n) FROM ( \
                           SELECT substr(original_sealed, 2, 4) AS v, count(*) AS n \
                           FROM pseudonyms WHERE namespace = ?1 AND original_sealed IS NOT NULL GROUP BY 1 \
                           UNION ALL \
                           SELECT substr(original_sealed, 2, 4), count(*) \
                           FROM multi_pseudonyms WHERE namespace = ?1 AND original_sealed IS NOT NULL GROUP BY 1 \
                         ) GROUP BY v",
                    )
                    .map_err(sql_err)?;
                let rows = st
                    .query_map(params![namespace], |r| {
                        Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
                    })
                    .map_err(sql_err)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
            })
            .await?;
        let mut out = counted
            .into_iter()
            .map(|(v, n)| Ok((version_of(&v)?, u64::try_from(n).unwrap_or(0))))
            .collect::<Result<Vec<_>, Error>>()?;
        out.sort_unstable();
        Ok(out)
    }
}
