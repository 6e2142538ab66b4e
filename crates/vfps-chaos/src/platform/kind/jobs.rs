//! The service's CSV jobs on kind, as its database holds them. The driver
//! runs outside the cluster with no route to vfps's API, so it asks the
//! database primary (`psql` inside its pod, as the gray faults' probes do):
//! the `csv_jobs` rows are what `CsvJobService/List` answers from — state,
//! lease holder, fencing epoch and last checkpoint — and no value of a file
//! is stored there.

use anyhow::{bail, Context};

use super::{Kube, Runner, NAMESPACE};
use crate::nemesis::RunningJob;

/// vfps's database (`bootstrap.initdb.database` in cnpg-cluster.yaml).
pub const APP_DATABASE: &str = "vfps";

/// One line per job, newest first (as the API lists them):
/// `id|running|runner|epoch|rows|bytes done|input bytes`.
pub const JOBS_SQL: &str = "SELECT id, state = 'running', coalesce(runner, ''), epoch, rows_done, \
     bytes_done, coalesce(input_bytes, 0) FROM csv_jobs ORDER BY created_at DESC, id";

/// The jobs `psql -At` printed for [`JOBS_SQL`]; a line of another shape is
/// an error, never a job skipped.
pub fn jobs_of(out: &str) -> anyhow::Result<Vec<RunningJob>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            let [id, running, runner, epoch, rows, done, total] = f[..] else {
                bail!("a csv_jobs row of {} fields, not 7: {line:?}", f.len());
            };
            let number = |what: &str, v: &str| {
                v.parse::<i64>()
                    .with_context(|| format!("{what} {v:?} of job {id} is not a number"))
            };
            let running = match running {
                "t" => true,
                "f" => false,
                other => bail!("job {id}: running {other:?} is neither t nor f"),
            };
            if id.is_empty() {
                bail!("a csv_jobs row without an id: {line:?}");
            }
            Ok(RunningJob {
                id: id.to_owned(),
                running,
                runner: runner.to_owned(),
                epoch: number("epoch", epoch)?,
                rows: number("rows", rows)?,
                bytes_done: number("bytes done", done)?,
                bytes_total: number("input bytes", total)?,
            })
        })
        .collect()
}

impl<R: Runner> Kube<R> {
    /// The jobs as the primary holds them now (a standby may lag behind a
    /// takeover it has not replayed yet).
    pub async fn db_jobs(&self) -> anyhow::Result<Vec<RunningJob>> {
        jobs_of(&self.psql_on_primary(JOBS_SQL, "the jobs").await?)
    }

    /// `sql` in vfps's database on the primary, as `psql -At` prints it
    /// (`what` names the reading in the error when there is no primary).
    pub(crate) async fn psql_on_primary(&self, sql: &str, what: &str) -> anyhow::Result<String> {
        let primary = self
            .primary_pod()
            .await?
            .with_context(|| format!("no database primary to read {what} from"))?;
        self.kubectl(&[
            "exec",
            "-n",
            NAMESPACE,
            &primary.name,
            "-c",
            "postgres",
            "--",
            "psql",
            "-U",
            "postgres",
            "-d",
            APP_DATABASE,
            "-At",
            "-c",
            sql,
        ])
        .await
    }
}
