//! Erasure on PostgreSQL (see `crate::erasure`).

use async_trait::async_trait;
use vfps_core::{Error, NamespaceName, OriginalValue, Pseudonym};

use super::{
    classify, monitor, pseudonym_from_row, statements::INSERT_NEW, CandidateColumns, PgStore,
    DURABLE, PSEUDONYM_COLUMNS,
};
use crate::{
    erasure::{tombstone, Erase, Erasure, UnsafeErasure},
    Candidate,
};

#[async_trait]
impl Erase for PgStore {
    async fn find_pseudonym(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
    ) -> Result<Option<Pseudonym>, Error> {
        let (mut lease, steps) = self.lease().await?;
        // A row committed on the primary alone (its wait for the standby
        // cancelled) must not be answered: the read ends in a commit that
        // waits for the standby past it.
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        steps.run(tx.execute(DURABLE, &[])).await?;
        let row = steps
            .run(tx.query_opt(
                &format!(
                    "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms \
                     WHERE namespace = $1 AND original_value = $2"
                ),
                &[&namespace.as_str(), &original.as_str()],
            ))
            .await?;
        steps.run(tx.commit()).await?;
        lease.finish();
        row.as_ref().map(pseudonym_from_row).transpose()
    }

    async fn insert_together(&self, batch: &[Candidate]) -> Result<bool, Error> {
        let columns = CandidateColumns::of(batch);
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // A taken key fails the statement (and so the transaction) whole; a
        // row of a namespace gone is skipped, which the count shows: then
        // nothing is committed either.
        let inserted = steps
            .run(async {
                match tx.execute(INSERT_NEW, &columns.params()).await {
                    Ok(n) => Ok(Some(n)),
                    Err(e)
                        if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        let all = inserted == Some(batch.len() as u64);
        if all {
            steps.run(tx.commit()).await?;
        } else {
            steps.run(tx.rollback()).await?;
        }
        lease.finish();
        Ok(all)
    }

    async fn erase(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        how: Erasure,
    ) -> Result<Option<String>, Error> {
        let (mut lease, steps) = self.lease().await?;
        let tx = steps.run(lease.conn_mut().client.transaction()).await?;
        // "Nothing to erase" must not rest on a single-copy commit either.
        steps.run(tx.execute(DURABLE, &[])).await?;
        let UnsafeErasure {
            unannounced,
            before_standby,
        } = self.unsafe_erasure;
        if before_standby {
            steps
                .run(tx.execute("SET LOCAL synchronous_commit = local", &[]))
                .await?;
        }
        let row = match how {
            Erasure::Delete => {
                steps
                    .run(tx.query_opt(
                        "DELETE FROM pseudonyms WHERE namespace = $1 AND original_value = $2 \
                         RETURNING pseudonym_value",
                        &[&namespace.as_str(), &original.as_str()],
                    ))
                    .await?
            }
            Erasure::Anonymize => {
                let tombstone = tombstone();
                steps
                    .run(tx.query_opt(
                        "UPDATE pseudonyms SET original_value = $3, original_sealed = NULL, \
                         last_updated_at = now() \
                         WHERE namespace = $1 AND original_value = $2 \
                         RETURNING pseudonym_value",
                        &[&namespace.as_str(), &original.as_str(), &tombstone],
                    ))
                    .await?
            }
        };
        let mut erased: Option<String> = row
            .map(|r| r.try_get(0).map_err(|e| classify(&e)))
            .transpose()?;
        if erased.is_none() {
            // A multi-pseudonym namespace's entries: every pseudonym of the
            // original, each anonymized one with a marker of its own, so
            // that its pseudonyms are not linked to each other either.
            let rows = match how {
                Erasure::Delete => {
                    steps
                        .run(tx.query(
                            "DELETE FROM multi_pseudonyms \
                             WHERE namespace = $1 AND original_value = $2 \
                             RETURNING pseudonym_value",
                            &[&namespace.as_str(), &original.as_str()],
                        ))
                        .await?
                }
                Erasure::Anonymize => {
                    let marker = vfps_core::anonymized_original("");
                    steps
                        .run(tx.query(
                            "UPDATE multi_pseudonyms \
                             SET original_value = $3 || gen_random_uuid()::text, \
                                 original_sealed = NULL, last_updated_at = now() \
                             WHERE namespace = $1 AND original_value = $2 \
                             RETURNING pseudonym_value",
                            &[&namespace.as_str(), &original.as_str(), &marker],
                        ))
                        .await?
                }
            };
            erased = rows
                .first()
                .map(|r| r.try_get(0).map_err(|e| classify(&e)))
                .transpose()?;
        }
        if erased.is_some() && !unannounced {
            // Delivered at commit to every replica's monitor: its caches of
            // the namespace go stale.
            steps
                .run(tx.execute(
                    "SELECT pg_notify($1, $2)",
                    &[&monitor::CHANNEL, &namespace.as_str()],
                ))
                .await?;
        }
        steps.run(tx.commit()).await?;
        lease.finish();
        if erased.is_some() && !unannounced {
            self.coherence.deleted(namespace.as_str());
        }
        Ok(erased)
    }
}
