//! Multi-pseudonym namespaces on SQLite (see `crate::multi`).

use std::time::SystemTime;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use vfps_core::{
    to_micros, Error, NamespaceName, OriginalValue, PageCursor, Pseudonym, PseudonymPage,
};

use super::{pseudonym_from_row, sql_err, SqliteStore};
use crate::{
    multi::{in_input_order, Known, Multi},
    page_from_rows,
};

/// The columns of a row as `pseudonym_from_row` reads them.
const COLUMNS: &str =
    "namespace, original_value, pseudonym_value, created_at, last_updated_at, original_sealed";

#[async_trait]
impl Multi for SqliteStore {
    async fn add_pseudonyms(
        &self,
        namespace: &NamespaceName,
        known: Known,
        original: &OriginalValue,
        pseudonyms: &[String],
        sealed: &[Vec<u8>],
        created_at: SystemTime,
    ) -> Result<Vec<Pseudonym>, Error> {
        let (ns, o) = (namespace.as_str().to_owned(), original.as_str().to_owned());
        let is_sealed = !sealed.is_empty();
        let asked = pseudonyms.to_vec();
        let sealed: Vec<Option<Vec<u8>>> = (0..pseudonyms.len())
            .map(|i| sealed.get(i).cloned())
            .collect();
        let created = to_micros(created_at);
        let rows = self
            .with_writer(move |c| {
                let tx = c
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(sql_err)?;
                let live: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM namespaces \
                         WHERE name = ?1 AND uid = ?2 AND multi_pseudonym = 1 \
                           AND originals_sealed = ?3 AND originals_moving = ?4 \
                           AND (originals_sealed = 0 OR substr(?5, 1, length(originals_index_version) + 3) \
                               = '~k' || originals_index_version || '.'))",
                        params![ns, known.uid.0, is_sealed, known.moving, o],
                        |r| r.get(0),
                    )
                    .map_err(sql_err)?;
                let mut stored = Vec::new();
                if live {
                    let mut insert = tx
                        .prepare_cached(&format!(
                            "INSERT INTO multi_pseudonyms \
                             (namespace, pseudonym_value, original_value, created_at, last_updated_at, \
                              original_sealed) \
                             VALUES (?1, ?2, ?3, ?4, ?4, ?5) ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
                        ))
                        .map_err(sql_err)?;
                    for (p, s) in asked.iter().zip(&sealed) {
                        if let Some(row) = insert
                            .query_row(params![ns, p, o, created, s], pseudonym_from_row)
                            .optional()
                            .map_err(sql_err)?
                        {
                            stored.push(row?);
                        }
                    }
                }
                tx.commit().map_err(sql_err)?;
                Ok(stored)
            })
            .await?;
        Ok(in_input_order(pseudonyms, rows))
    }

    async fn pseudonyms_of(
        &self,
        namespace: &NamespaceName,
        original: &OriginalValue,
        limit: u32,
    ) -> Result<Vec<Pseudonym>, Error> {
        let (ns, o) = (namespace.as_str().to_owned(), original.as_str().to_owned());
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM multi_pseudonyms \
                     WHERE namespace = ?1 AND original_value = ?2 \
                     ORDER BY created_at, pseudonym_value LIMIT ?3"
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![ns, o, limit], pseudonym_from_row)
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)?).collect()
        })
        .await
    }

    async fn list_multi_pseudonyms(
        &self,
        namespace: &NamespaceName,
        page_size: u32,
        after: Option<&PageCursor>,
        include_total_size: bool,
    ) -> Result<PseudonymPage, Error> {
        let ns = namespace.as_str().to_owned();
        let after = after.cloned();
        self.with_reader(move |c| {
            let limit = i64::from(page_size) + 1;
            let pseudonym = after.map(|cur| cur.pseudonym_value);
            let (bound, args) = super::page_args(&ns, &limit, pseudonym.as_ref());
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM multi_pseudonyms WHERE namespace = ?1 {bound}
                     ORDER BY pseudonym_value DESC LIMIT ?2"
                ))
                .map_err(sql_err)?;
            let items = st
                .query_map(args.as_slice(), pseudonym_from_row)
                .map_err(sql_err)?
                .map(|r| r.map_err(sql_err)?)
                .collect::<Result<Vec<_>, Error>>()?;
            let total = if include_total_size {
                Some(
                    c.query_row(
                        "SELECT count(*) FROM multi_pseudonyms WHERE namespace = ?1",
                        [&ns],
                        |r| r.get::<_, i64>(0),
                    )
                    .map_err(sql_err)?,
                )
            } else {
                None
            };
            Ok(page_from_rows(items, page_size, total))
        })
        .await
    }
}
