//! The jobs table on SQLite: one writer, so each call is atomic; times are this
//! process's clock (the file is this process's alone).

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use vfps_core::{from_micros, to_micros, Error};

use super::{sql_err, SqliteStore};
use crate::jobs::{
    decode_state, Claim, Deleted, Finish, JobRecord, JobState, JobStore, Progress, JOB_COLUMNS,
};

fn now() -> i64 {
    to_micros(SystemTime::now())
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn job_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<JobRecord, Error>> {
    let state: String = r.get(4)?;
    let time = |i: usize| -> rusqlite::Result<Option<SystemTime>> {
        Ok(r.get::<_, Option<i64>>(i)?.map(from_micros))
    };
    let record = JobRecord {
        id: r.get(0)?,
        created_by: r.get(1)?,
        created_at: from_micros(r.get(2)?),
        updated_at: from_micros(r.get(3)?),
        state: JobState::Queued,
        spec: r.get(5)?,
        plan: r.get(6)?,
        input_bytes: r.get(7)?,
        epoch: r.get(8)?,
        runner: r.get(9)?,
        lease_until: time(10)?,
        progress_at: time(11)?,
        checkpoint: r.get(12)?,
        rows_done: r.get(13)?,
        bytes_done: r.get(14)?,
        error: r.get(15)?,
        takeovers: r.get(16)?,
        started_at: time(17)?,
        finished_at: time(18)?,
    };
    Ok(decode_state(&state).map(|state| JobRecord { state, ..record }))
}

const UNFINISHED: &str = "('awaiting_upload', 'queued', 'running')";
const FINISHED: &str = "('completed', 'failed', 'cancelled')";

#[async_trait]
impl JobStore for SqliteStore {
    async fn insert_job(&self, job: &JobRecord) -> Result<(), Error> {
        let j = job.clone();
        self.with_writer(move |c| {
            let n = c
                .execute(
                    &format!(
                        "INSERT INTO csv_jobs ({JOB_COLUMNS}) VALUES \
                         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19) \
                         ON CONFLICT DO NOTHING"
                    ),
                    params![
                        j.id,
                        j.created_by,
                        to_micros(j.created_at),
                        to_micros(j.updated_at),
                        j.state.name(),
                        j.spec,
                        j.plan,
                        j.input_bytes,
                        j.epoch,
                        j.runner,
                        j.lease_until.map(to_micros),
                        j.progress_at.map(to_micros),
                        j.checkpoint,
                        j.rows_done,
                        j.bytes_done,
                        j.error,
                        j.takeovers,
                        j.started_at.map(to_micros),
                        j.finished_at.map(to_micros),
                    ],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(Error::already_exists(format!("job {} exists", j.id)));
            }
            Ok(())
        })
        .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let id = id.to_owned();
        self.with_reader(move |c| {
            c.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM csv_jobs WHERE id = ?1"),
                [id],
                job_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn list_jobs(&self, created_by: Option<&str>) -> Result<Vec<JobRecord>, Error> {
        let created_by = created_by.map(str::to_owned);
        self.with_reader(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {JOB_COLUMNS} FROM csv_jobs WHERE ?1 IS NULL OR created_by = ?1 \
                     ORDER BY created_at DESC, id"
                ))
                .map_err(sql_err)?;
            let rows = st.query_map([created_by], job_from_row).map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)?).collect()
        })
        .await
    }

    async fn queue_job(&self, id: &str, input_bytes: i64, plan: &str) -> Result<bool, Error> {
        let (id, plan) = (id.to_owned(), plan.to_owned());
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE csv_jobs SET state = 'queued', input_bytes = ?2, plan = ?3, \
                     updated_at = ?4 WHERE id = ?1 AND state = 'awaiting_upload'",
                    params![id, input_bytes, plan, now()],
                )
                .map_err(sql_err)?;
            Ok(n > 0)
        })
        .await
    }

    async fn claim_job(&self, claim: Claim<'_>) -> Result<Option<JobRecord>, Error> {
        let runner = claim.runner.to_owned();
        let (lease, stalled) = (micros(claim.lease), micros(claim.stalled));
        self.with_writer(move |c| {
            let now = now();
            c.query_row(
                &format!(
                    "UPDATE csv_jobs SET state = 'running', epoch = epoch + 1, runner = ?1, \
                         lease_until = ?2 + ?3, progress_at = ?2, updated_at = ?2, \
                         started_at = coalesce(started_at, ?2) \
                     WHERE id = (SELECT id FROM csv_jobs WHERE state = 'queued' \
                         OR (state = 'running' AND (lease_until < ?2 OR progress_at < ?2 - ?4)) \
                         ORDER BY created_at LIMIT 1) \
                     RETURNING {JOB_COLUMNS}"
                ),
                params![runner, now, lease, stalled],
                job_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn checkpoint_job(
        &self,
        id: &str,
        epoch: i64,
        progress: &Progress,
        lease: Duration,
    ) -> Result<bool, Error> {
        let (id, p) = (id.to_owned(), progress.clone());
        let lease = micros(lease);
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE csv_jobs SET checkpoint = ?3, \
                         progress_at = CASE WHEN ?4 > rows_done OR ?5 > bytes_done THEN ?6 \
                                            ELSE progress_at END, \
                         rows_done = ?4, bytes_done = ?5, lease_until = ?6 + ?7, updated_at = ?6, \
                         takeovers = CASE WHEN ?8 IS NULL THEN takeovers \
                                          ELSE json_insert(takeovers, '$[#]', json(?8)) END \
                     WHERE id = ?1 AND epoch = ?2 AND state = 'running'",
                    params![
                        id,
                        epoch,
                        p.checkpoint,
                        p.rows_done,
                        p.bytes_done,
                        now(),
                        lease,
                        p.takeover
                    ],
                )
                .map_err(sql_err)?;
            Ok(n > 0)
        })
        .await
    }

    async fn renew_job_lease(&self, id: &str, epoch: i64, lease: Duration) -> Result<bool, Error> {
        let id = id.to_owned();
        let lease = micros(lease);
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE csv_jobs SET lease_until = ?3 + ?4 \
                     WHERE id = ?1 AND epoch = ?2 AND state = 'running'",
                    params![id, epoch, now(), lease],
                )
                .map_err(sql_err)?;
            Ok(n > 0)
        })
        .await
    }

    async fn finish_job(
        &self,
        id: &str,
        epoch: i64,
        finish: Finish<'_>,
        progress: &Progress,
    ) -> Result<bool, Error> {
        let (id, p) = (id.to_owned(), progress.clone());
        let (state, error) = match finish {
            Finish::Completed => (JobState::Completed, None),
            Finish::Failed(why) => (JobState::Failed, Some(why.to_owned())),
        };
        self.with_writer(move |c| {
            let n = c
                .execute(
                    "UPDATE csv_jobs SET state = ?3, error = ?4, checkpoint = ?5, rows_done = ?6, \
                         bytes_done = ?7, lease_until = NULL, updated_at = ?8, finished_at = ?8, \
                         takeovers = CASE WHEN ?9 IS NULL THEN takeovers \
                                          ELSE json_insert(takeovers, '$[#]', json(?9)) END \
                     WHERE id = ?1 AND epoch = ?2 AND state = 'running'",
                    params![
                        id,
                        epoch,
                        state.name(),
                        error,
                        p.checkpoint,
                        p.rows_done,
                        p.bytes_done,
                        now(),
                        p.takeover
                    ],
                )
                .map_err(sql_err)?;
            Ok(n > 0)
        })
        .await
    }

    async fn cancel_job(&self, id: &str) -> Result<Option<JobRecord>, Error> {
        let id = id.to_owned();
        self.with_writer(move |c| {
            c.execute(
                &format!(
                    "UPDATE csv_jobs SET state = 'cancelled', lease_until = NULL, updated_at = ?2, \
                     finished_at = ?2 WHERE id = ?1 AND state IN {UNFINISHED}"
                ),
                params![id, now()],
            )
            .map_err(sql_err)?;
            c.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM csv_jobs WHERE id = ?1"),
                [id],
                job_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn delete_job(&self, id: &str) -> Result<Deleted, Error> {
        let id = id.to_owned();
        self.with_writer(move |c| {
            let state: Option<String> = c
                .query_row("SELECT state FROM csv_jobs WHERE id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql_err)?;
            let Some(state) = state else {
                return Ok(Deleted::NotFound);
            };
            let state = decode_state(&state)?;
            if !state.is_finished() {
                return Ok(Deleted::Unfinished(state));
            }
            c.execute("DELETE FROM csv_jobs WHERE id = ?1", [&id])
                .map_err(sql_err)?;
            Ok(Deleted::Deleted)
        })
        .await
    }

    async fn delete_finished_jobs(&self, created_by: Option<&str>) -> Result<Vec<String>, Error> {
        let created_by = created_by.map(str::to_owned);
        self.with_writer(move |c| {
            let mut st = c
                .prepare(&format!(
                    "DELETE FROM csv_jobs WHERE state IN {FINISHED} \
                     AND (?1 IS NULL OR created_by = ?1) RETURNING id"
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map([created_by], |r| r.get::<_, String>(0))
                .map_err(sql_err)?;
            rows.map(|r| r.map_err(sql_err)).collect()
        })
        .await
    }
}
