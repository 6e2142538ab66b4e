//! The jobs table on PostgreSQL. Each call is one statement (one transaction):
//! a conditional update is atomic with its condition, so a fenced runner's
//! write changes nothing. Every write commits through the synchronous standby
//! like any other, so an acknowledged checkpoint survives a failover.

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::Row;
use vfps_core::Error;

use super::{classify, PgStore};
use crate::jobs::{
    decode_state, Claim, Deleted, Finish, JobRecord, JobState, JobStore, Progress, JOB_COLUMNS,
};

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `JOB_COLUMNS`, each qualified by `alias`.
fn qualified(alias: &str) -> String {
    JOB_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn job_from_row(r: &Row) -> Result<JobRecord, Error> {
    let get_err = |e: tokio_postgres::Error| classify(&e);
    let state: String = r.try_get(4).map_err(get_err)?;
    Ok(JobRecord {
        id: r.try_get(0).map_err(get_err)?,
        created_by: r.try_get(1).map_err(get_err)?,
        created_at: r.try_get(2).map_err(get_err)?,
        updated_at: r.try_get(3).map_err(get_err)?,
        state: decode_state(&state)?,
        spec: r.try_get(5).map_err(get_err)?,
        plan: r.try_get(6).map_err(get_err)?,
        input_bytes: r.try_get(7).map_err(get_err)?,
        epoch: r.try_get(8).map_err(get_err)?,
        runner: r.try_get(9).map_err(get_err)?,
        lease_until: r.try_get(10).map_err(get_err)?,
        progress_at: r.try_get(11).map_err(get_err)?,
        checkpoint: r.try_get(12).map_err(get_err)?,
        rows_done: r.try_get(13).map_err(get_err)?,
        bytes_done: r.try_get(14).map_err(get_err)?,
        error: r.try_get(15).map_err(get_err)?,
        takeovers: r.try_get(16).map_err(get_err)?,
        started_at: r.try_get(17).map_err(get_err)?,
        finished_at: r.try_get(18).map_err(get_err)?,
    })
}

impl PgStore {
    /// Runs one statement and answers its rows.
    async fn job_query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps.run(lease.client().query(sql, params)).await?;
        lease.finish();
        Ok(rows)
    }

    /// Runs one statement and answers how many rows it changed.
    async fn job_execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, Error> {
        let (lease, steps) = self.lease().await?;
        let n = steps.run(lease.client().execute(sql, params)).await?;
        lease.finish();
        Ok(n)
    }
}

#[async_trait]
impl JobStore for PgStore {
    async fn insert_job(&self, j: &JobRecord) -> Result<(), Error> {
        let n = self
            .job_execute(
                &format!(
                    "INSERT INTO csv_jobs ({JOB_COLUMNS}) VALUES \
                     ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19) \
                     ON CONFLICT DO NOTHING"
                ),
                &[
                    &j.id,
                    &j.created_by,
                    &j.created_at,
                    &j.updated_at,
                    &j.state.name(),
                    &j.spec,
                    &j.plan,
                    &j.input_bytes,
                    &j.epoch,
                    &j.runner,
                    &j.lease_until,
                    &j.progress_at,
                    &j.checkpoint,
                    &j.rows_done,
                    &j.bytes_done,
                    &j.error,
                    &j.takeovers,
                    &j.started_at,
                    &j.finished_at,
                ],
            )
            .await?;
        if n == 0 {
            return Err(Error::already_exists(format!("job {} exists", j.id)));
        }
        Ok(())
    }

    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let rows = self
            .job_query(
                &format!("SELECT {JOB_COLUMNS} FROM csv_jobs WHERE id = $1"),
                &[&id],
            )
            .await?;
        rows.first().map(job_from_row).transpose()
    }

    async fn list_jobs(&self, created_by: Option<&str>) -> Result<Vec<JobRecord>, Error> {
        let rows = self
            .job_query(
                &format!(
                    "SELECT {JOB_COLUMNS} FROM csv_jobs WHERE $1::text IS NULL OR created_by = $1 \
                     ORDER BY created_at DESC, id"
                ),
                &[&created_by],
            )
            .await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn queue_job(&self, id: &str, input_bytes: i64, plan: &str) -> Result<bool, Error> {
        let n = self
            .job_execute(
                "UPDATE csv_jobs SET state = 'queued', input_bytes = $2, plan = $3, \
                 updated_at = now() WHERE id = $1 AND state = 'awaiting_upload'",
                &[&id, &input_bytes, &plan],
            )
            .await?;
        Ok(n > 0)
    }

    async fn claim_job(&self, claim: Claim<'_>) -> Result<Option<JobRecord>, Error> {
        let rows = self
            .job_query(
                &format!(
                    "UPDATE csv_jobs j SET state = 'running', epoch = j.epoch + 1, runner = $1, \
                         lease_until = now() + make_interval(secs => $2), progress_at = now(), \
                         updated_at = now(), started_at = coalesce(j.started_at, now()) \
                     FROM (SELECT id FROM csv_jobs \
                           WHERE state = 'queued' OR (state = 'running' AND (lease_until < now() \
                                 OR progress_at < now() - make_interval(secs => $3))) \
                           ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) c \
                     WHERE j.id = c.id RETURNING {}",
                    qualified("j")
                ),
                &[&claim.runner, &secs(claim.lease), &secs(claim.stalled)],
            )
            .await?;
        rows.first().map(job_from_row).transpose()
    }

    async fn checkpoint_job(
        &self,
        id: &str,
        epoch: i64,
        p: &Progress,
        lease: Duration,
    ) -> Result<bool, Error> {
        let n = self
            .job_execute(
                "UPDATE csv_jobs SET checkpoint = $3, \
                     progress_at = CASE WHEN $4 > rows_done OR $5 > bytes_done THEN now() \
                                        ELSE progress_at END, \
                     rows_done = $4, bytes_done = $5, \
                     lease_until = now() + make_interval(secs => $6), updated_at = now(), \
                     takeovers = CASE WHEN $7::text IS NULL THEN takeovers \
                         ELSE (takeovers::jsonb || jsonb_build_array($7::jsonb))::text END \
                 WHERE id = $1 AND epoch = $2 AND state = 'running'",
                &[
                    &id,
                    &epoch,
                    &p.checkpoint,
                    &p.rows_done,
                    &p.bytes_done,
                    &secs(lease),
                    &p.takeover,
                ],
            )
            .await?;
        Ok(n > 0)
    }

    async fn renew_job_lease(&self, id: &str, epoch: i64, lease: Duration) -> Result<bool, Error> {
        let n = self
            .job_execute(
                "UPDATE csv_jobs SET lease_until = now() + make_interval(secs => $3) \
                 WHERE id = $1 AND epoch = $2 AND state = 'running'",
                &[&id, &epoch, &secs(lease)],
            )
            .await?;
        Ok(n > 0)
    }

    async fn finish_job(
        &self,
        id: &str,
        epoch: i64,
        finish: Finish<'_>,
        p: &Progress,
    ) -> Result<bool, Error> {
        let (state, error) = match finish {
            Finish::Completed => (JobState::Completed, None),
            Finish::Failed(why) => (JobState::Failed, Some(why)),
        };
        let n = self
            .job_execute(
                "UPDATE csv_jobs SET state = $3, error = $4, checkpoint = $5, rows_done = $6, \
                     bytes_done = $7, lease_until = NULL, updated_at = now(), finished_at = now(), \
                     takeovers = CASE WHEN $8::text IS NULL THEN takeovers \
                         ELSE (takeovers::jsonb || jsonb_build_array($8::jsonb))::text END \
                 WHERE id = $1 AND epoch = $2 AND state = 'running'",
                &[
                    &id,
                    &epoch,
                    &state.name(),
                    &error,
                    &p.checkpoint,
                    &p.rows_done,
                    &p.bytes_done,
                    &p.takeover,
                ],
            )
            .await?;
        Ok(n > 0)
    }

    async fn cancel_job(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let rows = self
            .job_query(
                &format!(
                    "WITH c AS (UPDATE csv_jobs SET state = 'cancelled', lease_until = NULL, \
                         updated_at = now(), finished_at = now() \
                     WHERE id = $1 AND state IN ('awaiting_upload', 'queued', 'running') \
                     RETURNING {JOB_COLUMNS}) \
                     SELECT {JOB_COLUMNS} FROM c \
                     UNION ALL SELECT {JOB_COLUMNS} FROM csv_jobs \
                       WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM c)"
                ),
                &[&id],
            )
            .await?;
        rows.first().map(job_from_row).transpose()
    }

    async fn delete_job(&self, id: &str) -> Result<Deleted, Error> {
        let rows = self
            .job_query(
                "WITH d AS (DELETE FROM csv_jobs \
                     WHERE id = $1 AND state IN ('completed', 'failed', 'cancelled') RETURNING id) \
                 SELECT (SELECT count(*) FROM d), (SELECT state FROM csv_jobs WHERE id = $1)",
                &[&id],
            )
            .await?;
        let row = rows.first().ok_or_else(|| Error::internal("no answer"))?;
        let deleted: i64 = row.try_get(0).map_err(|e| classify(&e))?;
        let state: Option<String> = row.try_get(1).map_err(|e| classify(&e))?;
        // The CTE's delete is not visible to the statement's own SELECT.
        Ok(match (deleted, state) {
            (1.., _) => Deleted::Deleted,
            (_, None) => Deleted::NotFound,
            (_, Some(s)) => Deleted::Unfinished(decode_state(&s)?),
        })
    }

    async fn delete_finished_jobs(&self, created_by: Option<&str>) -> Result<Vec<String>, Error> {
        let rows = self
            .job_query(
                "DELETE FROM csv_jobs WHERE state IN ('completed', 'failed', 'cancelled') \
                 AND ($1::text IS NULL OR created_by = $1) RETURNING id",
                &[&created_by],
            )
            .await?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(|e| classify(&e)))
            .collect()
    }
}
