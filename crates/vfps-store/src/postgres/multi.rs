//! Multi-pseudonym namespaces on PostgreSQL (see `crate::multi`).

use std::time::SystemTime;

use async_trait::async_trait;
use vfps_core::{Error, NamespaceName, OriginalValue, PageCursor, Pseudonym, PseudonymPage};

use super::{pseudonym_from_row, PgStore, DURABLE};
use crate::{
    multi::{in_input_order, Known, Multi},
    page_from_rows,
};

/// The columns of a row as `pseudonym_from_row` reads them.
const COLUMNS: &str =
    "namespace, original_value, pseudonym_value, created_at, last_updated_at, original_sealed";

#[async_trait]
impl Multi for PgStore {
    async fn add_pseudonyms(
        &self,
        namespace: &NamespaceName,
        known: Known,
        original: &OriginalValue,
        pseudonyms: &[String],
        sealed: &[Vec<u8>],
        created_at: SystemTime,
    ) -> Result<Vec<Pseudonym>, Error> {
        let is_sealed = !sealed.is_empty();
        let sealed: Vec<Option<&[u8]>> = (0..pseudonyms.len())
            .map(|i| sealed.get(i).map(Vec::as_slice))
            .collect();
        let (lease, steps) = self.lease().await?;
        // The namespace row is locked FOR KEY SHARE, as by the upsert: a
        // namespace delete waits for this commit and removes these rows too,
        // or this finds the namespace gone; rows of the form the namespace
        // no longer keeps (sealed or plain) are refused, as by the upsert. Sorted, so concurrent inserts
        // lock index entries in one order.
        let rows = steps
            .run(lease.client().query(
                &format!(
                    "WITH live AS MATERIALIZED (
                        SELECT name, originals_sealed, originals_moving, originals_index_version
                        FROM namespaces
                        WHERE name = $1 AND uid = $2 AND multi_pseudonym FOR KEY SHARE)
                    INSERT INTO multi_pseudonyms
                        (namespace, pseudonym_value, original_value, created_at, last_updated_at,
                         original_sealed)
                    SELECT live.name, p.value, $3, $5, $5, p.sealed
                    FROM live, unnest($4::text[], $6::bytea[]) AS p(value, sealed)
                    WHERE live.originals_sealed = $7 AND live.originals_moving = $8
                        AND (NOT live.originals_sealed
                            OR starts_with($3, '~k' || live.originals_index_version || '.'))
                    ORDER BY p.value
                    ON CONFLICT DO NOTHING
                    RETURNING {COLUMNS}"
                ),
                &[
                    &namespace.as_str(),
                    &known.uid.0,
                    &original.as_str(),
                    &pseudonyms,
                    &created_at,
                    &sealed,
                    &is_sealed,
                    &known.moving,
                ],
            ))
            .await?;
        lease.finish();
        let rows = rows
            .iter()
            .map(pseudonym_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(in_input_order(pseudonyms, rows))
    }

    async fn pseudonyms_of(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        limit: u32,
    ) -> Result<Vec<Pseudonym>, Error> {
        let (mut lease, steps) = self.lease().await?;
        // Rows committed on the primary alone (their wait for the standby
        // cancelled) must not be answered: the read ends in a commit that
        // waits for the standby past them.
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        steps.run(tx.execute(DURABLE, &[])).await?;
        let rows = steps
            .run(tx.query(
                &format!(
                    "SELECT {COLUMNS} FROM multi_pseudonyms
                     WHERE namespace = $1 AND original_value = $2
                     ORDER BY created_at, pseudonym_value LIMIT $3"
                ),
                &[&namespace.as_str(), &original.as_str(), &i64::from(limit)],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        rows.iter().map(pseudonym_from_row).collect()
    }

    async fn list_multi_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error> {
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        let limit = i64::from(page_size) + 1;
        let ns = namespace.as_str();
        let (bound, args) = super::page_args(&ns, &limit, after);
        let rows = steps
            .run(c.query(
                &format!(
                    "SELECT {COLUMNS} FROM multi_pseudonyms WHERE namespace = $1 {bound}
                     ORDER BY pseudonym_value DESC LIMIT $2"
                ),
                &args,
            ))
            .await?;
        let items = rows
            .iter()
            .map(pseudonym_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let total = if include_total_size {
            let row = steps
                .run(c.query_one(
                    "SELECT count(*) FROM multi_pseudonyms WHERE namespace = $1",
                    &[&namespace.as_str()],
                ))
                .await?;
            Some(row.try_get::<_, i64>(0).map_err(|e| super::classify(&e))?)
        } else {
            None
        };
        lease.finish();
        Ok(page_from_rows(items, page_size, total))
    }
}
