//! [`KeyStore`] on PostgreSQL.

use async_trait::async_trait;
use vfps_core::{Error, NamespaceName, NamespaceUid};

use super::{classify, PgStore};
use tokio_postgres::types::ToSql;

use crate::keys::{
    version_bytes, KeyStore, PlainRow, Rekeyed, Resealed, SealedRow, SealedStore, SealedTable,
    StoredKeys, Which,
};

#[async_trait]
impl KeyStore for PgStore {
    async fn namespace_keys(&self, uid: NamespaceUid) -> Result<Vec<StoredKeys>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                "SELECT version, data_key, index_key, wrapped_by FROM namespace_keys \
                 WHERE namespace_uid = $1 ORDER BY version DESC",
                &[&uid.0],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                let version: i32 = r.try_get(0).map_err(|e| classify(&e))?;
                Ok(StoredKeys {
                    uid,
                    version: u32::try_from(version)
                        .map_err(|_| Error::internal("a namespace key of a negative version"))?,
                    data: r.try_get(1).map_err(|e| classify(&e))?,
                    index: r.try_get(2).map_err(|e| classify(&e))?,
                    wrapped_by: r.try_get(3).map_err(|e| classify(&e))?,
                })
            })
            .collect()
    }

    async fn put_namespace_keys(&self, keys: &StoredKeys) -> Result<bool, Error> {
        let version = i32::try_from(keys.version)
            .map_err(|_| Error::invalid_argument("a key version beyond 2^31"))?;
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                "INSERT INTO namespace_keys (namespace_uid, version, data_key, index_key, wrapped_by) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&keys.uid.0, &version, &keys.data, &keys.index, &keys.wrapped_by],
            ))
            .await?;
        lease.finish();
        Ok(n == 1)
    }

    async fn rewrap_namespace_keys(
        &self,
        keys: &StoredKeys,
        old_wrapped_by: &str,
    ) -> Result<bool, Error> {
        let version = i32::try_from(keys.version)
            .map_err(|_| Error::invalid_argument("a key version beyond 2^31"))?;
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                "UPDATE namespace_keys SET data_key = $3, index_key = $4, wrapped_by = $5 \
                 WHERE namespace_uid = $1 AND version = $2 AND wrapped_by = $6",
                &[
                    &keys.uid.0,
                    &version,
                    &keys.data,
                    &keys.index,
                    &keys.wrapped_by,
                    &old_wrapped_by,
                ],
            ))
            .await?;
        lease.finish();
        Ok(n == 1)
    }
}

#[async_trait]
impl SealedStore for PgStore {
    async fn sealed_rows(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        which: Which,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SealedRow>, Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (condition, value): (&str, Box<dyn ToSql + Sync + Send>) = match which {
            Which::All => ("$2::text IS NULL", Box::new(None::<String>)),
            Which::NotSealedUnder(v) => (
                "substring(original_sealed from 2 for 4) <> $2",
                Box::new(version_bytes(v).to_vec()),
            ),
            Which::NotIndexedUnder(v) => (
                "NOT starts_with(original_value, $2)",
                Box::new(Which::index_mark(v)),
            ),
        };
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                &format!(
                    "SELECT pseudonym_value, original_sealed, original_value FROM {} \
                     WHERE namespace = $1 AND original_sealed IS NOT NULL AND {condition} \
                       AND ($3::text IS NULL OR pseudonym_value > $3) \
                     ORDER BY pseudonym_value LIMIT $4",
                    table.name()
                ),
                &[&namespace.as_str(), value.as_ref(), &after, &limit],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                Ok(SealedRow {
                    pseudonym: r.try_get(0).map_err(|e| classify(&e))?,
                    sealed: r.try_get(1).map_err(|e| classify(&e))?,
                    value: r.try_get(2).map_err(|e| classify(&e))?,
                })
            })
            .collect()
    }

    async fn reseal(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        rows: &[Resealed],
    ) -> Result<u64, Error> {
        let pseudonyms: Vec<&str> = rows.iter().map(|r| r.pseudonym.as_str()).collect();
        let old: Vec<&[u8]> = rows.iter().map(|r| r.old.as_slice()).collect();
        let new: Vec<&[u8]> = rows.iter().map(|r| r.new.as_slice()).collect();
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                &format!(
                    "UPDATE {} AS t SET original_sealed = r.new \
                     FROM unnest($2::text[], $3::bytea[], $4::bytea[]) AS r(pseudonym, old, new) \
                     WHERE t.namespace = $1 AND t.pseudonym_value = r.pseudonym \
                       AND t.original_sealed = r.old",
                    table.name()
                ),
                &[&namespace.as_str(), &pseudonyms, &old, &new],
            ))
            .await?;
        lease.finish();
        Ok(n)
    }

    async fn plain_rows(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PlainRow>, Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                &format!(
                    "SELECT pseudonym_value, original_value FROM {} \
                     WHERE namespace = $1 AND original_sealed IS NULL \
                       AND ($2::text IS NULL OR pseudonym_value > $2) \
                     ORDER BY pseudonym_value LIMIT $3",
                    table.name()
                ),
                &[&namespace.as_str(), &after, &limit],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                Ok(PlainRow {
                    pseudonym: r.try_get(0).map_err(|e| classify(&e))?,
                    original: r.try_get(1).map_err(|e| classify(&e))?,
                })
            })
            .collect()
    }

    async fn rekey(
        &self,
        namespace: &NamespaceName,
        table: SealedTable,
        rows: &[Rekeyed],
    ) -> Result<u64, Error> {
        let pseudonyms: Vec<&str> = rows.iter().map(|r| r.pseudonym.as_str()).collect();
        let old_value: Vec<&str> = rows.iter().map(|r| r.old_value.as_str()).collect();
        let old_sealed: Vec<Option<&[u8]>> = rows.iter().map(|r| r.old_sealed.as_deref()).collect();
        let new_value: Vec<&str> = rows.iter().map(|r| r.new_value.as_str()).collect();
        let new_sealed: Vec<Option<&[u8]>> = rows.iter().map(|r| r.new_sealed.as_deref()).collect();
        // In `pseudonyms` one row an original: a new form already taken is
        // left alone (the fence keeps that from happening).
        let unique = match table {
            SealedTable::Pseudonyms => {
                "AND NOT EXISTS (SELECT 1 FROM pseudonyms u \
                 WHERE u.namespace = $1 AND u.original_value = r.new_value)"
            }
            SealedTable::Multi => "",
        };
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                &format!(
                    "UPDATE {} AS t SET original_value = r.new_value, original_sealed = r.new_sealed \
                     FROM unnest($2::text[], $3::text[], $4::bytea[], $5::text[], $6::bytea[]) \
                       AS r(pseudonym, old_value, old_sealed, new_value, new_sealed) \
                     WHERE t.namespace = $1 AND t.pseudonym_value = r.pseudonym \
                       AND t.original_value = r.old_value \
                       AND t.original_sealed IS NOT DISTINCT FROM r.old_sealed {unique}",
                    table.name()
                ),
                &[
                    &namespace.as_str(),
                    &pseudonyms,
                    &old_value,
                    &old_sealed,
                    &new_value,
                    &new_sealed,
                ],
            ))
            .await?;
        lease.finish();
        Ok(n)
    }

    async fn move_originals(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error> {
        // One statement: the row taken FOR UPDATE (which waits for every
        // insert holding it FOR KEY SHARE, and makes every later one read
        // the new form), then changed.
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                "WITH locked AS MATERIALIZED ( \
                   SELECT name FROM namespaces WHERE name = $1 AND uid = $2 FOR UPDATE) \
                 UPDATE namespaces n SET originals_sealed = $3, originals_moving = true \
                 FROM locked WHERE n.name = locked.name \
                   AND n.originals_moving_from_index IS NULL \
                   AND (n.originals_sealed <> $3 OR n.originals_moving)",
                &[&namespace.as_str(), &uid.0, &sealed],
            ))
            .await?;
        lease.finish();
        Ok(n == 1)
    }

    async fn reindex_originals(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        version: u32,
    ) -> Result<bool, Error> {
        let version = i32::try_from(version)
            .map_err(|_| Error::invalid_argument("a key version beyond 2^31"))?;
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                "WITH locked AS MATERIALIZED ( \
                   SELECT name FROM namespaces WHERE name = $1 AND uid = $2 FOR UPDATE) \
                 UPDATE namespaces n SET originals_moving = true, \
                   originals_moving_from_index = n.originals_index_version, \
                   originals_index_version = $3 \
                 FROM locked WHERE n.name = locked.name \
                   AND n.originals_sealed AND NOT n.originals_moving \
                   AND n.originals_index_version < $3",
                &[&namespace.as_str(), &uid.0, &version],
            ))
            .await?;
        lease.finish();
        Ok(n == 1)
    }

    async fn moved(
        &self,
        namespace: &NamespaceName,
        uid: NamespaceUid,
        sealed: bool,
    ) -> Result<bool, Error> {
        let (lease, steps) = self.lease().await?;
        let n = steps
            .run(lease.client().execute(
                "WITH locked AS MATERIALIZED ( \
                   SELECT name FROM namespaces WHERE name = $1 AND uid = $2 FOR UPDATE) \
                 UPDATE namespaces n SET originals_moving = false, \
                   originals_moving_from_index = NULL \
                 FROM locked WHERE n.name = locked.name \
                   AND n.originals_sealed = $3 AND n.originals_moving",
                &[&namespace.as_str(), &uid.0, &sealed],
            ))
            .await?;
        lease.finish();
        Ok(n == 1)
    }

    async fn sealed_versions(&self, namespace: &NamespaceName) -> Result<Vec<(u32, u64)>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                "SELECT v, sum(n)::int8 FROM ( \
                   SELECT substring(original_sealed from 2 for 4) AS v, count(*) AS n \
                   FROM pseudonyms WHERE namespace = $1 AND original_sealed IS NOT NULL GROUP BY 1 \
                   UNION ALL \
                   SELECT substring(original_sealed from 2 for 4), count(*) \
                   FROM multi_pseudonyms WHERE namespace = $1 AND original_sealed IS NOT NULL GROUP BY 1 \
                 ) AS c GROUP BY v",
                &[&namespace.as_str()],
            ))
            .await?;
        lease.finish();
        let mut out = rows
            .iter()
            .map(|r| {
                let v: Vec<u8> = r.try_get(0).map_err(|e| classify(&e))?;
                let n: i64 = r.try_get(1).map_err(|e| classify(&e))?;
                Ok((crate::keys::version_of(&v)?, u64::try_from(n).unwrap_or(0)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        out.sort_unstable();
        Ok(out)
    }
}
