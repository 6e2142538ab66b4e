//! Migrations: which are pending, and applying them under an advisory lock.

use vfps_core::Error;

use super::{adopt, pool::Steps, PgStore};
use crate::migrate;

/// Arbitrary but fixed: the advisory lock every `vfps migrate` takes.
const MIGRATION_LOCK_ID: i64 = 0x0076_6670_736d_6967; // "vfpsmig"

impl PgStore {
    /// Versions this binary has that the database has not applied yet (without
    /// changing anything); a changed checksum is an error.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, Error> {
        let (lease, steps) = self.lease().await?;
        let applied = steps.run(applied_migrations(lease.client())).await?;
        lease.finish();
        pending_migrations(&applied)
    }

    /// Applies pending migrations under an advisory lock (concurrent runs wait).
    /// A failure closes the session, which releases the lock and rolls back.
    pub async fn migrate(&self) -> Result<migrate::Report, Error> {
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        steps
            .run(c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_ID]))
            .await?;
        if let Some(schema) = self.options.first_schema() {
            // `Search Path` names where the tables live; the owner creates it.
            steps
                .run(c.batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS \"{}\"",
                    schema.replace('"', "\"\"")
                )))
                .await?;
        }
        steps
            .run(c.batch_execute(
                "CREATE TABLE IF NOT EXISTS vfps_schema_migrations (
                    version bigint PRIMARY KEY,
                    name text NOT NULL,
                    checksum text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now())",
            ))
            .await?;
        let rows = steps
            .run(c.query("SELECT version, checksum FROM vfps_schema_migrations", &[]))
            .await?;
        let mut applied: std::collections::HashMap<i64, String> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let mut report = migrate::Report::default();
        if !applied.contains_key(&1) && steps.run(adopt::is_upstream(c)).await? {
            let long = Steps::new(
                &lease,
                adopt::TIMEOUT.max(self.options.command_timeout),
                self.reachability.clone(),
                self.refused_commits.clone(),
            );
            adopt::adopt(c, &long).await?;
            tracing::info!("adopted the tables of upstream vfps (as migrations 1 and 2)");
            report.adopted_upstream = true;
            applied = steps
                .run(c.query("SELECT version, checksum FROM vfps_schema_migrations", &[]))
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
        }
        for m in migrate::POSTGRES {
            if let Some(sum) = applied.get(&m.version) {
                migrate::verify_checksum(m, sum)?;
                report.already_applied.push(m.version);
                continue;
            }
            let sql = format!(
                "BEGIN;\n{}\nINSERT INTO vfps_schema_migrations (version, name, checksum) VALUES ({}, '{}', '{}');\nCOMMIT;",
                m.sql,
                m.version,
                m.name,
                m.checksum()
            );
            steps.run(c.batch_execute(&sql)).await?;
            tracing::info!(version = m.version, name = m.name, "applied migration");
            report.applied.push(m.version);
        }
        steps
            .run(c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_ID]))
            .await?;
        lease.finish();
        Ok(report)
    }
}

/// The migrations applied to the database: version → checksum (none before
/// the first migration created the table).
pub(super) async fn applied_migrations(
    c: &tokio_postgres::Client,
) -> Result<std::collections::HashMap<i64, String>, tokio_postgres::Error> {
    let exists: bool = c
        .query_one(
            "SELECT to_regclass('vfps_schema_migrations') IS NOT NULL",
            &[],
        )
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(Default::default());
    }
    c.query("SELECT version, checksum FROM vfps_schema_migrations", &[])
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// This binary's migrations missing from `applied`; a changed checksum is an
/// error.
pub(super) fn pending_migrations(
    applied: &std::collections::HashMap<i64, String>,
) -> Result<Vec<i64>, Error> {
    let mut pending = Vec::new();
    for m in migrate::POSTGRES {
        match applied.get(&m.version) {
            Some(sum) => migrate::verify_checksum(m, sum)?,
            None => pending.push(m.version),
        }
    }
    Ok(pending)
}
