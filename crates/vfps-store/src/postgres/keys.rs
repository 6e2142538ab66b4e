//! [`KeyStore`] on PostgreSQL.

use async_trait::async_trait;
use vfps_core::{Error, NamespaceUid};

use super::{classify, PgStore};
use crate::keys::{KeyStore, StoredKeys};

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
}
