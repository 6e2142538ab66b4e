//! `vfps jobs …`: a client of `CsvJobService`. `submit` creates a job,
//! uploads the file (presigned to S3, or through vfps), starts it and, with
//! `--wait`, shows its progress (rows, rows/s, ETA) and downloads the output.

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use futures::StreamExt;
use tonic::{metadata::MetadataValue, transport::Channel, Request};
use vfps_proto::v1::{
    self as pb, csv_job_service_client::CsvJobServiceClient, CsvColumnMapping, CsvJobState,
};

#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// The gRPC address of vfps.
    #[arg(long, env = "VFPS_ADDRESS", default_value = "http://127.0.0.1:8081")]
    pub address: String,
    /// The HTTP address of vfps, for files that go through it.
    #[arg(
        long,
        env = "VFPS_HTTP_ADDRESS",
        default_value = "http://127.0.0.1:8080"
    )]
    pub http_address: String,
    /// A bearer token (an OIDC access token or a vfps access token).
    #[arg(long, env = "VFPS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum JobsAction {
    /// Pseudonymize (or de-pseudonymize) a CSV file.
    Submit {
        file: PathBuf,
        /// A mapping: NAME=NAMESPACE replaces column NAME (a header name or a
        /// 0-based index) in place; NAME=NAMESPACE:NEW appends column NEW. Repeatable.
        #[arg(long = "column", value_name = "NAME=NAMESPACE[:NEW]", required = true)]
        columns: Vec<String>,
        /// Pseudonyms become originals (needs reverse-lookup).
        #[arg(long)]
        depseudonymize: bool,
        #[arg(long, default_value = ",")]
        delimiter: String,
        /// utf-8, utf-16, utf-16BE, iso-8859-1 or windows-1252.
        #[arg(long, default_value = "utf-8")]
        encoding: String,
        /// The file has no header row (columns by index).
        #[arg(long)]
        no_header: bool,
        /// Wait for the job, showing its progress.
        #[arg(long)]
        wait: bool,
        /// With --wait: where to save the output (default: beside the input).
        #[arg(long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        connection: Connection,
    },
    /// List your jobs (an admin's: everyone's).
    List {
        #[command(flatten)]
        connection: Connection,
    },
    /// Show one job as JSON.
    Status {
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Cancel a job.
    Cancel {
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Download a completed job's output.
    Download {
        id: String,
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        connection: Connection,
    },
}

/// A mapping argument: `NAME=NAMESPACE` or `NAME=NAMESPACE:NEW`.
pub fn parse_column(raw: &str) -> Result<CsvColumnMapping, String> {
    let (source, rest) = raw.split_once('=').ok_or_else(|| {
        format!("--column {raw:?}: expected NAME=NAMESPACE or NAME=NAMESPACE:NEW")
    })?;
    let (namespace, target) = match rest.split_once(':') {
        Some((ns, new)) => (ns, Some(new.to_owned())),
        None => (rest, None),
    };
    if source.is_empty() || namespace.is_empty() || target.as_deref() == Some("") {
        return Err(format!(
            "--column {raw:?}: expected NAME=NAMESPACE or NAME=NAMESPACE:NEW"
        ));
    }
    Ok(CsvColumnMapping {
        source_column: source.to_owned(),
        namespace: namespace.to_owned(),
        target_column: target,
    })
}

struct Client {
    grpc: CsvJobServiceClient<Channel>,
    http: reqwest::Client,
    connection: Connection,
}

impl Connection {
    /// A gRPC channel to vfps (TLS for an `https://` address).
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let mut endpoint = Channel::from_shared(self.address.clone())
            .with_context(|| format!("--address {:?} is not a URL", self.address))?;
        if self.address.starts_with("https://") {
            endpoint = endpoint
                .tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots())?;
        }
        endpoint
            .connect()
            .await
            .with_context(|| format!("cannot reach vfps at {}", self.address))
    }

    /// `message` as a call with a deadline and the token, if there is one.
    pub fn request<T>(&self, message: T) -> anyhow::Result<Request<T>> {
        let mut r = Request::new(message);
        r.set_timeout(Duration::from_secs(30));
        if let Some(t) = &self.token {
            let value = MetadataValue::try_from(format!("Bearer {t}"))
                .context("the token is not printable")?;
            r.metadata_mut().insert("authorization", value);
        }
        Ok(r)
    }
}

impl Client {
    async fn connect(connection: Connection) -> anyhow::Result<Self> {
        Ok(Self {
            grpc: CsvJobServiceClient::new(connection.channel().await?),
            http: reqwest::Client::new(),
            connection,
        })
    }

    fn request<T>(&self, message: T) -> anyhow::Result<Request<T>> {
        self.connection.request(message)
    }

    /// A transfer address as a full URL, with the API's credentials when
    /// it is vfps's own.
    fn transfer(
        &self,
        method: reqwest::Method,
        address: &pb::CsvJobTransferAddress,
    ) -> reqwest::RequestBuilder {
        if address.through_vfps {
            let base = self.connection.http_address.trim_end_matches('/');
            let r = self.http.request(method, format!("{base}{}", address.url));
            match &self.connection.token {
                Some(t) => r.bearer_auth(t),
                None => r,
            }
        } else {
            self.http.request(method, &address.url)
        }
    }

    async fn get(&mut self, id: &str) -> anyhow::Result<pb::CsvJob> {
        let r = self.request(pb::CsvJobServiceGetRequest { id: id.into() })?;
        let job = self.grpc.get(r).await.map_err(status)?.into_inner().job;
        job.context("the answer holds no job")
    }

    async fn download(&mut self, id: &str, output: &Path) -> anyhow::Result<u64> {
        let r = self.request(pb::CsvJobServiceGetDownloadAddressRequest { id: id.into() })?;
        let address = self
            .grpc
            .get_download_address(r)
            .await
            .map_err(status)?
            .into_inner()
            .download
            .context("the answer holds no address")?;
        let response = self
            .transfer(reqwest::Method::GET, &address)
            .send()
            .await
            .map_err(without_url)
            .context("cannot download the output")?;
        if !response.status().is_success() {
            bail!("the download was refused: {}", response.status());
        }
        let partial = output.with_extension("partial");
        let mut file = tokio::fs::File::create(&partial)
            .await
            .with_context(|| format!("cannot write {}", partial.display()))?;
        let mut stream = response.bytes_stream();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(without_url)
                .context("the download broke off")?;
            size += chunk.len() as u64;
            tokio::io::AsyncWriteExt::write_all(&mut file, &chunk).await?;
        }
        tokio::io::AsyncWriteExt::flush(&mut file).await?;
        drop(file);
        tokio::fs::rename(&partial, output).await?;
        Ok(size)
    }
}

/// What a refused transfer's answer says, and nothing more: S3's `Code` and
/// `Message` (its `SignatureDoesNotMatch` answer also echoes the canonical
/// request, session token included), else the answer's first 300 characters.
fn refusal(text: &str) -> String {
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))?;
        Some(text[start..start + end].to_owned())
    };
    match element("Code") {
        Some(code) => format!("{code}: {}", element("Message").unwrap_or_default()),
        None => text.chars().take(300).collect(),
    }
}

/// A transfer's error without its address: a presigned URL carries a
/// signature (and with temporary credentials `X-Amz-Security-Token`), which
/// is never printed.
fn without_url(e: reqwest::Error) -> reqwest::Error {
    e.without_url()
}

fn status(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", s.code(), s.message())
}

fn state(job: &pb::CsvJob) -> CsvJobState {
    CsvJobState::try_from(job.state).unwrap_or(CsvJobState::Unspecified)
}

fn json(job: &pb::CsvJob) -> String {
    serde_json::to_string_pretty(job).unwrap_or_default()
}

pub async fn run(action: JobsAction) -> anyhow::Result<()> {
    match action {
        JobsAction::Submit {
            file,
            columns,
            depseudonymize,
            delimiter,
            encoding,
            no_header,
            wait,
            output,
            connection,
        } => {
            let mappings = columns
                .iter()
                .map(|c| parse_column(c))
                .collect::<Result<Vec<_>, _>>()
                .map_err(anyhow::Error::msg)?;
            let size = tokio::fs::metadata(&file)
                .await
                .with_context(|| format!("cannot read {}", file.display()))?
                .len();
            let mut client = Client::connect(connection).await?;
            let request = pb::CsvJobServiceCreateRequest {
                direction: if depseudonymize {
                    pb::CsvJobDirection::Depseudonymize
                } else {
                    pb::CsvJobDirection::Pseudonymize
                } as i32,
                column_mappings: mappings,
                delimiter,
                encoding,
                has_header_row: !no_header,
                original_file_name: file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            let created = client
                .grpc
                .create(client.request(request)?)
                .await
                .map_err(status)?
                .into_inner();
            let job = created.job.context("the answer holds no job")?;
            let upload = created
                .upload
                .context("the answer holds no upload address")?;
            eprintln!("job {} created; uploading {size} bytes", job.id);
            let opened = tokio::fs::File::open(&file).await?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(opened));
            let response = client
                .transfer(reqwest::Method::PUT, &upload)
                .header(reqwest::header::CONTENT_LENGTH, size)
                .header(reqwest::header::CONTENT_TYPE, "text/csv")
                .body(body)
                .send()
                .await
                .map_err(without_url)
                .context("the upload failed")?;
            if !response.status().is_success() {
                let code = response.status();
                let text = response.text().await.unwrap_or_default();
                bail!("the upload was refused ({code}): {}", refusal(&text));
            }
            let r = client.request(pb::CsvJobServiceStartRequest { id: job.id.clone() })?;
            client.grpc.start(r).await.map_err(status)?;
            if !wait {
                println!("{}", job.id);
                return Ok(());
            }
            let finished = follow(&mut client, &job.id).await?;
            match state(&finished) {
                CsvJobState::Completed => {
                    let output = output.unwrap_or_else(|| default_output(&file, depseudonymize));
                    let bytes = client.download(&job.id, &output).await?;
                    eprintln!(
                        "done: {} rows ({} malformed, {} missing values{}) → {} ({bytes} bytes)",
                        finished.rows_processed,
                        finished.malformed_row_count,
                        finished.missing_value_count,
                        if depseudonymize {
                            format!(", {} unknown pseudonyms", finished.unknown_pseudonym_count)
                        } else {
                            String::new()
                        },
                        output.display()
                    );
                    Ok(())
                }
                CsvJobState::Cancelled => bail!("job {} was cancelled", job.id),
                _ => bail!("job {} failed: {}", job.id, finished.error_message),
            }
        }
        JobsAction::List { connection } => {
            let mut client = Client::connect(connection).await?;
            let r = client.request(pb::CsvJobServiceListRequest {})?;
            let jobs = client.grpc.list(r).await.map_err(status)?.into_inner().jobs;
            for j in jobs {
                println!(
                    "{}  {:<16} {:>10} rows  {}",
                    j.id,
                    state(&j).as_str_name().trim_start_matches("CSV_JOB_STATE_"),
                    j.rows_processed,
                    j.original_file_name
                );
            }
            Ok(())
        }
        JobsAction::Status { id, connection } => {
            let mut client = Client::connect(connection).await?;
            println!("{}", json(&client.get(&id).await?));
            Ok(())
        }
        JobsAction::Cancel { id, connection } => {
            let mut client = Client::connect(connection).await?;
            let r = client.request(pb::CsvJobServiceCancelRequest { id: id.clone() })?;
            let job = client
                .grpc
                .cancel(r)
                .await
                .map_err(status)?
                .into_inner()
                .job;
            let shown = job.as_ref().map(state).unwrap_or(CsvJobState::Unspecified);
            eprintln!("job {id}: {}", shown.as_str_name());
            Ok(())
        }
        JobsAction::Download {
            id,
            output,
            connection,
        } => {
            let mut client = Client::connect(connection).await?;
            let bytes = client.download(&id, &output).await?;
            eprintln!("{} ({bytes} bytes)", output.display());
            Ok(())
        }
    }
}

fn default_output(input: &Path, depseudonymize: bool) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let suffix = if depseudonymize {
        "de-pseudonymized"
    } else {
        "pseudonymized"
    };
    input.with_file_name(format!("{stem}-{suffix}.csv"))
}

/// Polls the job until it ends, drawing a progress line on stderr.
async fn follow(client: &mut Client, id: &str) -> anyhow::Result<pb::CsvJob> {
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_line = Instant::now();
    loop {
        let job = match client.get(id).await {
            Ok(job) => job,
            // A replica restarting, a failover: the job goes on; so does this.
            Err(e) => {
                eprintln!("\nwaiting for vfps: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let line = progress_line(&job, started.elapsed());
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!("{line}");
            last_line = Instant::now();
        }
        if matches!(
            state(&job),
            CsvJobState::Completed | CsvJobState::Failed | CsvJobState::Cancelled
        ) {
            if tty {
                eprintln!();
            }
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `[#####.....] 42% 120000 rows 31000 rows/s ETA 12s`.
pub fn progress_line(job: &pb::CsvJob, elapsed: Duration) -> String {
    let fraction = if job.total_bytes > 0 {
        (job.bytes_processed as f64 / job.total_bytes as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let filled = (fraction * 20.0).round() as usize;
    let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(20 - filled));
    let eta = if fraction > 0.0 && fraction < 1.0 {
        let total = elapsed.as_secs_f64() / fraction;
        format!("ETA {:.0}s", (total - elapsed.as_secs_f64()).max(0.0))
    } else {
        "ETA -".into()
    };
    format!(
        "{bar} {:>3.0}% {} rows {:.0} rows/s {eta} {}",
        fraction * 100.0,
        job.rows_processed,
        job.rows_per_second,
        state(job)
            .as_str_name()
            .trim_start_matches("CSV_JOB_STATE_")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_parse_in_place_or_appended_and_bad_ones_are_named() {
        let m = parse_column("name=research").unwrap();
        assert_eq!(
            (m.source_column.as_str(), m.namespace.as_str()),
            ("name", "research")
        );
        assert_eq!(m.target_column, None);
        let m = parse_column("3=research:pid").unwrap();
        assert_eq!(m.target_column.as_deref(), Some("pid"));
        for bad in ["name", "=ns", "name=", "name=ns:"] {
            assert!(parse_column(bad).unwrap_err().contains(bad), "{bad}");
        }
    }

    #[test]
    fn progress_shows_rows_rate_and_eta() {
        let job = pb::CsvJob {
            total_bytes: 1000,
            bytes_processed: 250,
            rows_processed: 5000,
            rows_per_second: 1000.0,
            state: CsvJobState::Running as i32,
            ..Default::default()
        };
        let line = progress_line(&job, Duration::from_secs(10));
        assert_eq!(
            line,
            "[#####...............]  25% 5000 rows 1000 rows/s ETA 30s RUNNING"
        );
    }

    /// A transfer that fails before an answer printed its presigned URL,
    /// signature and session token included.
    #[tokio::test]
    async fn a_failed_transfer_names_no_presigned_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!(
            "http://127.0.0.1:{port}/bucket/csv-jobs/x/output.csv?X-Amz-Credential=AKIA%2F&\
             X-Amz-Security-Token=SESSIONTOKEN&X-Amz-Signature=SIGNATURE"
        );
        let raw = reqwest::get(&url).await.unwrap_err();
        // What the CLI printed before: the URL and its secrets.
        assert!(format!("{raw}").contains("SIGNATURE"));
        let told = format!(
            "{:#}",
            anyhow::Result::<()>::Err(without_url(raw).into())
                .context("cannot download the output")
                .unwrap_err()
        );
        for secret in ["SIGNATURE", "SESSIONTOKEN", "X-Amz", "AKIA"] {
            assert!(!told.contains(secret), "{secret} in {told}");
        }
        assert!(told.starts_with("cannot download the output: "), "{told}");
    }

    #[test]
    fn a_refused_upload_says_s3s_code_and_message_and_nothing_it_echoed() {
        let answer = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
            <Message>The request signature we calculated does not match</Message>\
            <CanonicalRequest>PUT /b/k X-Amz-Security-Token=SESSIONTOKEN</CanonicalRequest></Error>";
        let told = refusal(answer);
        assert_eq!(
            told,
            "SignatureDoesNotMatch: The request signature we calculated does not match"
        );
        assert_eq!(refusal("plain words"), "plain words");
    }
}
