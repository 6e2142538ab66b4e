//! CSV jobs beside the load (P7): through the load window, jobs are submitted
//! one after another (`RESILIENCE_JOB_ROWS` rows each) and their progress is
//! polled; after settling, each is followed to its end, its output fetched and
//! de-pseudonymized by a second job, and some of its originals asked of the
//! API. The inputs are made from the run's seed: quoted fields with commas,
//! quotes and line breaks, both line endings, blank and placeholder cells,
//! subjects that repeat, and subjects the API saw first.

use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use tokio::time::Instant;
use vfps_client::{Client, Outcome};
use vfps_proto::v1::{
    CsvColumnMapping, CsvJob, CsvJobDirection, CsvJobServiceCreateRequest, CsvJobState,
    CsvJobTransferAddress,
};

use crate::checker::{
    jobs::{JobObservation, Sample, Takeover},
    Answer,
};

/// The HTTP port a job's files go through when the store is vfps's own folder.
const HTTP_PORT: u16 = 8080;
/// The pseudonymized column of every input.
const COLUMN: usize = 1;
/// How often a job's progress is read.
const POLL: Duration = Duration::from_millis(500);
/// Deadline of one call about a job.
const CALL: Duration = Duration::from_secs(10);
/// Originals the API creates before the first job (the job must answer theirs).
const API_FIRST: u64 = 20;
/// The pause between one job's end and the next one's start: jobs run
/// through the whole window without filling the database with their rows.
const GAP: Duration = Duration::from_secs(10);

/// The original of row `k` of job `index`: every third row repeats a subject
/// of an earlier row; the first rows of job 0 are the API's. Subjects are
/// sequential and zero-padded (in order as text too), so an output whose
/// pseudonyms follow them shows it (P10).
fn original(seed: u64, index: u32, k: u64) -> String {
    let subject = if k % 3 == 2 { k / 2 } else { k };
    format!("csv-{seed:x}-{index}-{subject:07}")
}

/// Job `index`'s input: a header, then `rows` rows of `row,name,note`.
pub fn input(seed: u64, index: u32, rows: u64) -> Vec<u8> {
    let mut out = b"row,name,note\r\n".to_vec();
    for k in 0..rows {
        let name = match k % 97 {
            41 => String::new(),
            83 => "NA".into(),
            _ if k % 7 == 3 => format!("\"{}\"", original(seed, index, k)),
            _ => original(seed, index, k),
        };
        let note = match k % 13 {
            5 => "\"a, \"\"quoted\"\"\nnote\"",
            9 => "",
            _ => "plain",
        };
        let end = if k % 5 == 4 { "\n" } else { "\r\n" };
        out.extend_from_slice(format!("{k},{name},{note}{end}").as_bytes());
    }
    out
}

/// The originals of job `index` whose pseudonyms are asked of the API.
fn asked(seed: u64, index: u32, rows: u64) -> Vec<String> {
    (0..rows)
        .filter(|k| *k < API_FIRST || k % 101 == 0)
        .filter(|k| !matches!(k % 97, 41 | 83))
        .map(|k| original(seed, index, k))
        .collect()
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn state_name(job: &CsvJob) -> String {
    CsvJobState::try_from(job.state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("CSV_JOB_STATE_")
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

fn finished(job: &CsvJob) -> bool {
    matches!(
        CsvJobState::try_from(job.state),
        Ok(CsvJobState::Completed | CsvJobState::Failed | CsvJobState::Cancelled)
    )
}

fn takeovers(job: &CsvJob) -> Vec<Takeover> {
    job.takeovers
        .iter()
        .map(|t| Takeover {
            at_micros: t
                .at
                .as_ref()
                .map_or(0, |a| a.seconds * 1_000_000 + i64::from(a.nanos) / 1000),
            epoch: t.epoch,
            runner: t.runner.clone(),
            checkpointed_rows: t.checkpointed_rows,
            resumed_rows: t.resumed_rows,
        })
        .collect()
}

/// A job submitted during the load, with the progress seen then.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub id: String,
    pub index: u32,
    pub samples: Vec<Sample>,
}

/// The job side of a run.
#[derive(Clone)]
pub struct Jobs {
    client: Client,
    http: reqwest::Client,
    /// vfps's HTTP addresses (`http://host:8080`), one per replica.
    http_bases: Vec<String>,
    namespace: String,
    seed: u64,
    rows: u64,
}

impl Jobs {
    /// `client` carries the run's credentials; `http` lists vfps's HTTP
    /// addresses (default: each gRPC endpoint's host on port 8080).
    pub fn new(
        client: Client,
        http: Option<&str>,
        namespace: &str,
        seed: u64,
        rows: u64,
    ) -> anyhow::Result<Self> {
        let http_bases = match http {
            Some(list) => list
                .split(',')
                .map(|a| a.trim().trim_end_matches('/'))
                .filter(|a| !a.is_empty())
                .map(|a| match a.contains("://") {
                    true => a.to_owned(),
                    false => format!("http://{a}"),
                })
                .collect(),
            None => client
                .endpoints()
                .uris()
                .into_iter()
                .map(|u| match u.rsplit_once(':') {
                    Some((host, _)) => format!("{host}:{HTTP_PORT}"),
                    None => format!("{u}:{HTTP_PORT}"),
                })
                .collect(),
        };
        Ok(Self {
            client,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(60))
                .build()?,
            http_bases,
            namespace: namespace.to_owned(),
            seed,
            rows,
        })
    }

    /// Through the load window: the API's own originals first, then jobs one
    /// after another until `until`; the last may still run.
    pub async fn during(&self, until: Instant) -> Vec<Submitted> {
        for original in asked(self.seed, 0, self.rows.min(API_FIRST)) {
            let _ = self.client.create(&self.namespace, &original, CALL).await;
        }
        let mut submitted = Vec::new();
        let mut index = 0;
        while Instant::now() + Duration::from_secs(5) < until {
            let data = input(self.seed, index, self.rows);
            let id = match self
                .submit(CsvJobDirection::Pseudonymize, data, until)
                .await
            {
                Ok(id) => id,
                Err(e) => {
                    eprintln!("jobs: job {index} was not accepted: {e:#}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut job = Submitted {
                id,
                index,
                samples: Vec::new(),
            };
            let end = self.follow(&job.id, &mut job.samples, until).await;
            eprintln!(
                "jobs: job {index} {}",
                end.as_ref().map_or("still running".into(), state_name)
            );
            submitted.push(job);
            index += 1;
            tokio::time::sleep_until((Instant::now() + GAP).min(until)).await;
        }
        submitted
    }

    /// Creates, uploads and starts a job: its id.
    async fn submit(
        &self,
        direction: CsvJobDirection,
        data: Vec<u8>,
        until: Instant,
    ) -> anyhow::Result<String> {
        let request = CsvJobServiceCreateRequest {
            direction: direction as i32,
            column_mappings: vec![CsvColumnMapping {
                source_column: "name".into(),
                namespace: self.namespace.clone(),
                target_column: None,
            }],
            delimiter: ",".into(),
            encoding: "utf-8".into(),
            has_header_row: true,
            original_file_name: "vfps-chaos.csv".into(),
        };
        let created = retry(until, || self.client.create_job(request.clone(), CALL)).await?;
        let job = created.job.context("no job in the answer")?;
        let upload = created.upload.context("no upload address in the answer")?;
        self.put(&upload, data, until).await?;
        retry(until, || self.client.start_job(&job.id, CALL)).await?;
        Ok(job.id)
    }

    /// One pseudonymizing job of `data` (header `row,name`), followed to its
    /// end by `until`: its output.
    pub async fn run_once(&self, data: Vec<u8>, until: Instant) -> anyhow::Result<Vec<u8>> {
        let id = self
            .submit(CsvJobDirection::Pseudonymize, data, until)
            .await?;
        let mut samples = Vec::new();
        match self.follow(&id, &mut samples, until).await {
            Some(end) if state_name(&end) == "completed" => self.output(&id, until).await,
            Some(end) => bail!("job {id} ended {}: {}", state_name(&end), end.error_message),
            None => bail!("job {id} had not ended in time"),
        }
    }

    /// Polls a job until it ends or `until`: its last state if it ended.
    async fn follow(&self, id: &str, samples: &mut Vec<Sample>, until: Instant) -> Option<CsvJob> {
        while Instant::now() < until {
            if let Outcome::Ok(job) = self.client.get_job(id, CALL).await {
                samples.push(Sample {
                    at_micros: micros(SystemTime::now()),
                    epoch: job.epoch,
                    rows: job.rows_processed,
                    runner: job.runner.clone(),
                });
                if finished(&job) {
                    return Some(job);
                }
            }
            tokio::time::sleep(POLL).await;
        }
        None
    }

    /// Where a transfer goes: a presigned URL as is, vfps's own path on
    /// each replica's HTTP port in turn.
    fn targets(&self, address: &CsvJobTransferAddress) -> Vec<(String, bool)> {
        if address.through_vfps {
            self.http_bases
                .iter()
                .map(|b| (format!("{b}{}", address.url), true))
                .collect()
        } else {
            vec![(address.url.clone(), false)]
        }
    }

    fn request(&self, method: reqwest::Method, url: &str, ours: bool) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match (ours, self.client.bearer_header()) {
            (true, Some(auth)) => r.header("authorization", auth),
            _ => r,
        }
    }

    async fn put(
        &self,
        address: &CsvJobTransferAddress,
        data: Vec<u8>,
        until: Instant,
    ) -> anyhow::Result<()> {
        self.transfer(address, Some(data), until).await.map(drop)
    }

    async fn fetch(
        &self,
        address: &CsvJobTransferAddress,
        until: Instant,
    ) -> anyhow::Result<Vec<u8>> {
        self.transfer(address, None, until).await
    }

    /// An upload (`body`) or a download, tried on each target in turn until
    /// it goes through, is refused, or `until`: what came back.
    async fn transfer(
        &self,
        address: &CsvJobTransferAddress,
        body: Option<Vec<u8>>,
        until: Instant,
    ) -> anyhow::Result<Vec<u8>> {
        let (method, what) = match body {
            Some(_) => (reqwest::Method::PUT, "upload"),
            None => (reqwest::Method::GET, "download"),
        };
        let targets = self.targets(address);
        let mut last = String::new();
        for attempt in 0.. {
            if Instant::now() >= until {
                break;
            }
            let (url, ours) = &targets[attempt % targets.len()];
            let mut request = self.request(method.clone(), url, *ours);
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            match request.send().await {
                Ok(r) if r.status().is_success() => match r.bytes().await {
                    Ok(b) => return Ok(b.to_vec()),
                    Err(e) => last = e.to_string(),
                },
                Ok(r) if r.status().is_client_error() && body.is_some() => {
                    bail!("the {what} was refused: {}", r.status())
                }
                Ok(r) => last = r.status().to_string(),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("the {what} did not go through before the deadline: {last}")
    }

    /// A completed job's output.
    async fn output(&self, id: &str, until: Instant) -> anyhow::Result<Vec<u8>> {
        let address = retry(until, || self.client.job_download_address(id, CALL)).await?;
        self.fetch(&address, until).await
    }

    /// After settling: every job followed to its end (by `until`), its output
    /// fetched and de-pseudonymized, its asked originals created through the API.
    pub async fn verify(&self, submitted: Vec<Submitted>, until: Instant) -> Vec<JobObservation> {
        let mut observed = Vec::new();
        for mut job in submitted {
            let input = input(self.seed, job.index, self.rows);
            let mut o = JobObservation {
                id: job.id.clone(),
                index: job.index,
                column: COLUMN,
                ..Default::default()
            };
            let end = self.follow(&job.id, &mut job.samples, until).await;
            o.samples = job.samples;
            let Some(end) = end else {
                o.undecided.push(format!(
                    "job {} had not ended by the verification deadline",
                    job.id
                ));
                o.input = input;
                observed.push(o);
                continue;
            };
            o.state = state_name(&end);
            o.error = end.error_message.clone();
            o.takeovers = takeovers(&end);
            if o.state == "completed" {
                match self.output(&job.id, until).await {
                    Ok(output) => {
                        self.restore(&mut o, &output, until).await;
                        o.output = Some(output);
                    }
                    Err(e) => o.undecided.push(format!("job {}: {e:#}", job.id)),
                }
                for original in asked(self.seed, job.index, self.rows) {
                    let answer = match self.client.create(&self.namespace, &original, CALL).await {
                        Outcome::Ok(p) => Answer::Value(p.pseudonym_value),
                        Outcome::Fail(c) | Outcome::Indeterminate(c) => {
                            Answer::Error(format!("{c:?}"))
                        }
                    };
                    o.api.push((original, answer));
                }
            }
            o.input = input;
            eprintln!(
                "jobs: verified job {} ({}, {} takeovers)",
                o.index,
                o.state,
                o.takeovers.len()
            );
            observed.push(o);
        }
        observed
    }

    /// De-pseudonymizes `output` with a job of its own.
    async fn restore(&self, o: &mut JobObservation, output: &[u8], until: Instant) {
        let id = match self
            .submit(CsvJobDirection::Depseudonymize, output.to_vec(), until)
            .await
        {
            Ok(id) => id,
            Err(e) => {
                o.undecided
                    .push(format!("the de-pseudonymizing job was not accepted: {e:#}"));
                return;
            }
        };
        let mut samples = Vec::new();
        match self.follow(&id, &mut samples, until).await {
            Some(end) if state_name(&end) == "completed" => match self.output(&id, until).await {
                Ok(restored) => o.restored = Some(restored),
                Err(e) => o.undecided.push(format!("job {id}: {e:#}")),
            },
            Some(end) => {
                o.restore_failed = Some(format!("{}: {}", state_name(&end), end.error_message))
            }
            None => o.undecided.push(format!(
                "the de-pseudonymizing job {id} had not ended in time"
            )),
        }
    }
}

/// A call retried (it is idempotent or harmless to repeat) until `until`.
async fn retry<T, F, Fut>(until: Instant, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Outcome<T>>,
{
    loop {
        match call().await {
            Outcome::Ok(v) => return Ok(v),
            Outcome::Fail(c) | Outcome::Indeterminate(c)
                if matches!(
                    c,
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Internal
                        | tonic::Code::Unknown
                        | tonic::Code::Aborted
                ) && Instant::now() + Duration::from_secs(1) < until =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Outcome::Fail(c) | Outcome::Indeterminate(c) => bail!("answered {c:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::jobs::check;

    /// P10 reads a job's originals and pseudonyms row for row: an output
    /// whose pseudonyms follow the originals is ordered (tau 1), one whose
    /// pseudonyms do not is not.
    #[test]
    fn a_jobs_order_is_read_from_its_rows() {
        use crate::checker::privacy::{Order, OrderKind};
        let data = input(3, 0, 300);
        let text = String::from_utf8(data.clone()).unwrap();
        let ordered = JobObservation {
            column: COLUMN,
            input: data.clone(),
            output: Some(text.replace("csv-3-0-", "P-").into_bytes()),
            ..Default::default()
        };
        let pairs = crate::checker::jobs::pairs(&ordered);
        assert_eq!(pairs.len(), 300 - 3 - 3, "placeholders left out");
        let subjects = pairs
            .iter()
            .map(|(o, _)| o)
            .collect::<std::collections::HashSet<_>>()
            .len() as i64;
        let order = Order::of_originals(OrderKind::Job, "j".into(), pairs);
        assert_eq!(order.n as i64, subjects, "each subject once");
        assert_eq!(order.s, subjects * (subjects - 1) / 2);
        // Reversed pseudonyms: tau -1.
        let reversed: String = text
            .split_inclusive('\n')
            .map(|line| match line.find("csv-3-0-") {
                Some(at) => {
                    let subject: u64 = line[at + 8..at + 15].parse().unwrap();
                    line.replace(&line[at..at + 15], &format!("P-{:07}", 9_999_999 - subject))
                }
                None => line.to_owned(),
            })
            .collect();
        let o = JobObservation {
            output: Some(reversed.into_bytes()),
            ..ordered
        };
        let order =
            Order::of_originals(OrderKind::Job, "j".into(), crate::checker::jobs::pairs(&o));
        assert_eq!(order.s, -(subjects * (subjects - 1) / 2));
    }

    #[test]
    fn inputs_are_reproducible_and_hold_every_case() {
        let a = input(7, 0, 200);
        assert_eq!(a, input(7, 0, 200));
        assert_ne!(a, input(7, 1, 200));
        let text = String::from_utf8(a).unwrap();
        assert!(text.contains("\r\n") && text.contains("3,\"csv-7-0-0000003\""));
        assert!(text.contains("\"a, \"\"quoted\"\"\nnote\""));
        assert!(text.contains(",NA,") && text.contains("41,,"));
        // Row 2 repeats row 1's subject.
        assert!(text.contains("2,csv-7-0-0000001,"));
        assert_eq!(asked(7, 0, 200).len(), 20 + 1);
    }

    /// The checker reads the inputs the workload writes: a faithful
    /// pseudonymization of one passes, one with a row dropped fails.
    #[test]
    fn the_checker_reads_the_workloads_inputs() {
        let data = input(3, 0, 300);
        let text = String::from_utf8(data.clone()).unwrap();
        let output = text.replace("csv-3-0-", "P-");
        let mut o = JobObservation {
            id: "j".into(),
            column: COLUMN,
            state: "completed".into(),
            input: data.clone(),
            output: Some(output.clone().into_bytes()),
            restored: Some(data.clone()),
            api: vec![("csv-3-0-0000005".into(), Answer::Value("P-0000005".into()))],
            ..Default::default()
        };
        let v = check(std::slice::from_ref(&o));
        assert!(v.passed(), "{v:#?}");
        let dropped: Vec<&str> = output.split_inclusive('\n').collect();
        o.output = Some(
            dropped[..10]
                .iter()
                .chain(&dropped[11..])
                .copied()
                .collect::<String>()
                .into_bytes(),
        );
        assert!(!check(&[o]).passed());
    }
}
