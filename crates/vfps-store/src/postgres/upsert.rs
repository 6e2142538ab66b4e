//! Creates in batches: the upsert that answers each original's one pseudonym,
//! and the plain insert of rows known to be new.

use std::time::SystemTime;

use async_trait::async_trait;
use tokio_postgres::Row;
use vfps_core::Error;

use super::{pseudonym_from_row, statements::Prepared, PgStore};
use crate::{Candidate, Upsert, Upserted};

/// A batch of candidates as the parameters of [`Prepared::Upsert`] and
/// [`Prepared::InsertNew`]: namespaces, originals, pseudonyms, creation
/// times, namespace incarnations, sealed originals, moves known.
pub(super) struct CandidateColumns<'a> {
    namespaces: Vec<&'a str>,
    originals: Vec<&'a str>,
    pseudonyms: Vec<&'a str>,
    created: Vec<SystemTime>,
    uids: Vec<i64>,
    sealed: Vec<Option<&'a [u8]>>,
    moving: Vec<bool>,
}

impl<'a> CandidateColumns<'a> {
    pub(super) fn of(batch: &'a [Candidate]) -> Self {
        Self {
            namespaces: batch.iter().map(|c| c.namespace.as_str()).collect(),
            originals: batch.iter().map(|c| c.original.as_str()).collect(),
            pseudonyms: batch.iter().map(|c| c.pseudonym.as_str()).collect(),
            created: batch.iter().map(|c| c.created_at).collect(),
            uids: batch.iter().map(|c| c.namespace_uid.0).collect(),
            sealed: batch.iter().map(|c| c.sealed.as_deref()).collect(),
            moving: batch.iter().map(|c| c.moving).collect(),
        }
    }

    pub(super) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 7] {
        [
            &self.namespaces,
            &self.originals,
            &self.pseudonyms,
            &self.created,
            &self.uids,
            &self.sealed,
            &self.moving,
        ]
    }
}

#[async_trait]
impl Upsert for PgStore {
    async fn upsert_pseudonyms(&self, batch: &[Candidate]) -> Result<Vec<Upserted>, Error> {
        let columns = CandidateColumns::of(batch);
        let (mut lease, steps) = self.lease().await?;
        let upsert = steps
            .run(lease.conn_mut().prepared(Prepared::Upsert))
            .await?;
        let rows = steps
            .run(lease.client().query(&upsert, &columns.params()))
            .await?;
        // Answers by input position; keys borrow from the batch.
        let position: std::collections::HashMap<(&str, &str), usize> = batch
            .iter()
            .enumerate()
            .map(|(i, c)| ((c.namespace.as_str(), c.original.as_str()), i))
            .collect();
        let mut answers: Vec<Upserted> = vec![Upserted::Conflict; batch.len()];
        let place = |rows: &[Row], answers: &mut Vec<Upserted>| -> Result<(), Error> {
            for r in rows {
                let p = pseudonym_from_row(r)?;
                if let Some(&i) = position.get(&(p.namespace.as_str(), p.original_value.as_str())) {
                    answers[i] = Upserted::Stored(p);
                }
            }
            Ok(())
        };
        place(&rows, &mut answers)?;
        let missing: Vec<&Candidate> = batch
            .iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Upserted::Conflict))
            .map(|(c, _)| c)
            .collect();
        if !missing.is_empty() {
            let ns: Vec<&str> = missing.iter().map(|c| c.namespace.as_str()).collect();
            let orig: Vec<&str> = missing.iter().map(|c| c.original.as_str()).collect();
            // Existing originals (or none: namespace gone or replaced,
            // pseudonym taken).
            let existing = steps
                .run(lease.conn_mut().prepared(Prepared::Existing))
                .await?;
            let rows = steps
                .run(lease.client().query(&existing, &[&ns, &orig]))
                .await?;
            place(&rows, &mut answers)?;
        }
        lease.finish();
        Ok(answers)
    }

    async fn insert_new_pseudonyms(&self, batch: &[Candidate]) -> Result<bool, Error> {
        let columns = CandidateColumns::of(batch);
        let (mut lease, steps) = self.lease().await?;
        let insert = steps
            .run(lease.conn_mut().prepared(Prepared::InsertNew))
            .await?;
        // A taken key fails the statement whole; the session is fine after it
        // (no transaction was open but the statement's own).
        let inserted = steps
            .run(async {
                match lease.client().execute(&insert, &columns.params()).await {
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
        lease.finish();
        Ok(inserted == Some(batch.len() as u64))
    }
}
