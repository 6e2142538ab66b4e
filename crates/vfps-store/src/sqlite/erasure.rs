//! Erasure on SQLite (see `crate::erasure`): this process's alone, so its
//! own coherence records each erasure.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use vfps_core::{now_micros, to_micros, Error, NamespaceName, OriginalValue, Pseudonym};

use super::{pseudonym_from_row, sql_err, SqliteStore, PSEUDONYM_COLUMNS};
use crate::{
    erasure::{tombstone, Erase, Erasure},
    Candidate,
};

#[async_trait]
impl Erase for SqliteStore {
    async fn find_pseudonym(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
    ) -> Result<Option<Pseudonym>, Error> {
        let (ns, o) = (namespace.as_str().to_owned(), original.as_str().to_owned());
        self.with_reader(move |c| {
            c.query_row(
                &format!(
                    "SELECT {PSEUDONYM_COLUMNS} FROM pseudonyms WHERE namespace = ?1 AND original_value = ?2"
                ),
                [ns, o],
                pseudonym_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn insert_together(&self, batch: &[Candidate]) -> Result<bool, Error> {
        let batch = batch.to_vec();
        self.with_writer(move |c| {
            let tx = c.transaction().map_err(sql_err)?;
            for candidate in &batch {
                let live: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM namespaces \
                         WHERE name = ?1 AND uid = ?2 AND multi_pseudonym = 0)",
                        params![candidate.namespace.as_str(), candidate.namespace_uid.0],
                        |r| r.get(0),
                    )
                    .map_err(sql_err)?;
                let inserted = live
                    && tx
                        .execute(
                            "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, \
                             created_at, last_updated_at, original_sealed) \
                             VALUES (?1, ?2, ?3, ?4, ?4, ?5) ON CONFLICT DO NOTHING",
                            params![
                                candidate.namespace.as_str(),
                                candidate.original.as_str(),
                                candidate.pseudonym,
                                to_micros(candidate.created_at),
                                candidate.sealed
                            ],
                        )
                        .map_err(sql_err)?
                        == 1;
                if !inserted {
                    // Dropped unfinished: rolled back, nothing stored.
                    return Ok(false);
                }
            }
            tx.commit().map_err(sql_err)?;
            Ok(true)
        })
        .await
    }

    async fn erase(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        how: Erasure,
    ) -> Result<Option<String>, Error> {
        let (ns, o) = (namespace.as_str().to_owned(), original.as_str().to_owned());
        let erased = self
            .with_writer(move |c| {
                let sql = match how {
                    Erasure::Delete => {
                        "DELETE FROM pseudonyms WHERE namespace = ?1 AND original_value = ?2 \
                         RETURNING pseudonym_value"
                    }
                    Erasure::Anonymize => {
                        "UPDATE pseudonyms SET original_value = ?3, original_sealed = NULL, \
                         last_updated_at = ?4 \
                         WHERE namespace = ?1 AND original_value = ?2 RETURNING pseudonym_value"
                    }
                };
                let tx = c.transaction().map_err(sql_err)?;
                let row: Option<String> = {
                    let mut statement = tx.prepare(sql).map_err(sql_err)?;
                    let row = match how {
                        Erasure::Delete => statement.query_row(params![ns, o], |r| r.get(0)),
                        Erasure::Anonymize => statement
                            .query_row(params![ns, o, tombstone(), to_micros(now_micros())], |r| {
                                r.get(0)
                            }),
                    };
                    row.optional().map_err(sql_err)?
                };
                let erased = match row {
                    Some(p) => Some(p),
                    None => erase_multi(&tx, &ns, &o, how)?,
                };
                tx.commit().map_err(sql_err)?;
                Ok(erased)
            })
            .await?;
        if erased.is_some() {
            self.coherence.deleted(namespace.as_str());
        }
        Ok(erased)
    }
}

/// Erases every pseudonym of `original` in a multi-pseudonym namespace (see
/// `crate::multi`), each anonymized one with a marker of its own so that its
/// pseudonyms are not linked to each other either; answers one of them.
fn erase_multi(
    tx: &rusqlite::Transaction<'_>,
    ns: &str,
    original: &str,
    how: Erasure,
) -> Result<Option<String>, Error> {
    let mut values: Vec<String> = {
        let mut st = tx
            .prepare(
                "SELECT pseudonym_value FROM multi_pseudonyms \
                 WHERE namespace = ?1 AND original_value = ?2",
            )
            .map_err(sql_err)?;
        let rows = st
            .query_map(params![ns, original], |r| r.get(0))
            .map_err(sql_err)?;
        rows.collect::<Result<_, _>>().map_err(sql_err)?
    };
    values.sort();
    for p in &values {
        match how {
            Erasure::Delete => tx.execute(
                "DELETE FROM multi_pseudonyms WHERE namespace = ?1 AND pseudonym_value = ?2",
                params![ns, p],
            ),
            Erasure::Anonymize => tx.execute(
                "UPDATE multi_pseudonyms SET original_value = ?3, original_sealed = NULL, \
                 last_updated_at = ?4 \
                 WHERE namespace = ?1 AND pseudonym_value = ?2",
                params![ns, p, tombstone(), to_micros(now_micros())],
            ),
        }
        .map_err(sql_err)?;
    }
    Ok(values.into_iter().next())
}
