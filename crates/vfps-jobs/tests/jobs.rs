//! CSV jobs end to end on both stores with the folder store, on PostgreSQL
//! with an S3 bucket (a Garage node; ignored unless run), and on PostgreSQL
//! with the double that answers as AWS S3 does under SSE-KMS: the
//! output's bytes, resumption after a runner dies anywhere, racing runners, cancel,
//! a namespace deleted mid-job, and every error answered at start.

#![allow(clippy::unwrap_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use vfps_core::{
    now_micros, ErrorKind, GenerationMethod, Namespace, NamespaceName, NamespaceSettings,
    NamespaceUid, OriginalValue, PseudonymValue,
};
use vfps_jobs::{
    checkpoint::Takeover,
    runner::{self, Context, NoPressure, Outcome, RunnerSettings, Unobserved},
    service::{Jobs, ServiceSettings},
    spec::{Direction, RawSpec},
    storage::{
        folder::Folder,
        input_key, output_key,
        s3::{CredentialSource, Credentials, S3Config, S3},
        ObjectStore,
    },
};
use vfps_store::{
    jobs::{Claim, JobRecord, JobState},
    postgres::PgStore,
    sqlite::SqliteStore,
    Candidate, Store,
};
use vfps_testkit::{
    aws_s3::{AwsS3, Behaviour},
    garage::Garage,
};

async fn postgres() -> Arc<dyn Store> {
    let db = vfps_testkit::shared().create_database().unwrap();
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    Arc::new(store)
}

async fn sqlite() -> Arc<dyn Store> {
    let dir = vfps_testkit::scratch_dir("jobs");
    Arc::new(SqliteStore::open(&dir.join("vfps.sqlite")).unwrap())
}

/// Small parts, batches and checkpoints, so a few hundred rows cross many.
fn settings() -> RunnerSettings {
    RunnerSettings {
        batch_rows: 16,
        checkpoint_rows: 40,
        checkpoint_interval: Duration::from_millis(200),
        lease: Duration::from_millis(400),
        part_bytes: 2048,
        ..RunnerSettings::default()
    }
}

struct Setup {
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
    jobs: Jobs,
}

fn setup_with(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
    settings: RunnerSettings,
    runner: &str,
) -> Setup {
    jobs_for(store, objects, settings, runner)
}

/// Job files in a new folder.
fn folder() -> Arc<dyn ObjectStore> {
    Arc::new(Folder::new(vfps_testkit::scratch_dir("job-files")).unwrap())
}

/// Job files in `garage`'s bucket.
fn bucket(garage: &Garage) -> Arc<dyn ObjectStore> {
    Arc::new(
        S3::new(S3Config {
            service_url: garage.s3_url(),
            credentials: CredentialSource::Static(Credentials {
                access_key: garage.access_key().to_owned(),
                secret_key: garage.secret_key().to_owned(),
                session_token: None,
            }),
            bucket: garage.bucket().to_owned(),
            region: garage.region().to_owned(),
            force_path_style: true,
            presigned_url_expiry: Duration::from_secs(900),
            object_retention_days: 30,
            allowed_origins: Vec::new(),
        })
        .unwrap(),
    )
}

/// Job files in the AWS double's bucket.
fn aws_bucket(double: &AwsS3) -> Arc<dyn ObjectStore> {
    Arc::new(
        S3::new(S3Config {
            service_url: double.url(),
            credentials: CredentialSource::Static(Credentials {
                access_key: "AKIAIOSFODNN7EXAMPLE".to_owned(),
                secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned(),
                session_token: None,
            }),
            bucket: double.bucket().to_owned(),
            region: "eu-central-1".to_owned(),
            force_path_style: true,
            presigned_url_expiry: Duration::from_secs(900),
            object_retention_days: 30,
            allowed_origins: Vec::new(),
        })
        .unwrap(),
    )
}

fn jobs_for(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
    settings: RunnerSettings,
    runner: &str,
) -> Setup {
    let ctx = Context {
        store: store.clone(),
        objects: objects.clone(),
        settings: Arc::new(settings),
        slots: Arc::new(Semaphore::new(2)),
        runner: runner.into(),
        observer: Arc::new(Unobserved),
        pressure: Arc::new(NoPressure),
        keys: None,
    };
    let service = ServiceSettings {
        poll_interval: Duration::from_millis(50),
        ..ServiceSettings::default()
    };
    Setup {
        store,
        objects,
        jobs: Jobs::new(ctx, service),
    }
}

async fn namespace(store: &dyn Store, name: &str) {
    let now = now_micros();
    store
        .create_namespace(&Namespace {
            name: NamespaceName::parse(name).unwrap(),
            uid: NamespaceUid::random(),
            description: String::new(),
            settings: NamespaceSettings::parse(GenerationMethod::Uuid4, 36, None, None).unwrap(),
            created_at: now,
            last_updated_at: now,
        })
        .await
        .unwrap();
}

/// A file with what real exports have: quoting, repeated subjects, missing
/// values, CRLF and LF, a malformed row.
fn patients(rows: usize) -> Vec<u8> {
    let mut out = String::from("id,name,note\r\n");
    for i in 0..rows {
        match i % 11 {
            3 => out.push_str(&format!("{i},NA,\"a, b\"\r\n")),
            5 => out.push_str(&format!("{i},\"Smith \"\"J\"\"\",x\n")),
            7 => out.push_str(&format!("{i},patient-{},too,many,fields\r\n", i / 2)),
            _ => out.push_str(&format!("{i},patient-{},\"line\nbreak\"\r\n", i / 2)),
        }
    }
    out.into_bytes()
}

fn mapping(
    source: &str,
    namespace: &str,
    target: Option<&str>,
) -> (String, String, Option<String>) {
    (source.into(), namespace.into(), target.map(str::to_owned))
}

/// Column `name` mapped in place with namespace `names`.
fn on_names(direction: Direction) -> RawSpec {
    raw(direction, vec![mapping("name", "names", None)])
}

fn raw(direction: Direction, mappings: Vec<(String, String, Option<String>)>) -> RawSpec {
    RawSpec {
        direction: Some(direction),
        mappings,
        has_header: true,
        ..RawSpec::default()
    }
}

async fn submit(s: &Setup, input: &[u8], spec: RawSpec) -> String {
    let (job, address) = s.jobs.create("alice", spec).await.unwrap();
    if address.through_vfps {
        s.objects
            .put(&input_key(&job.id), Bytes::copy_from_slice(input))
            .await
            .unwrap();
    } else {
        // A bucket: the client sends the file itself, to the presigned address.
        assert_eq!(address.method, "PUT");
        let sent = reqwest::Client::new()
            .put(&address.url)
            .body(input.to_vec())
            .send()
            .await
            .unwrap();
        assert!(sent.status().is_success(), "{}", sent.status());
    }
    let started = s.jobs.start(&job.id).await.unwrap();
    assert_eq!(started.state, JobState::Queued);
    job.id
}

async fn wait_finished(s: &Setup, id: &str) -> JobRecord {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = s.jobs.get(id).await.unwrap();
        if job.state.is_finished() {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} still {:?}", job.state);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn read(objects: &dyn ObjectStore, key: &str) -> Vec<u8> {
    let mut s = objects.read(key, 0).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

/// Runs a job to its end with this setup's runners.
async fn run_to_end(s: &Setup, id: &str) -> (JobRecord, Vec<u8>) {
    let stop = CancellationToken::new();
    let runners = s.jobs.spawn_runners(stop.clone());
    let job = wait_finished(s, id).await;
    stop.cancel();
    runners.await.unwrap();
    let output = if job.state == JobState::Completed {
        read(s.objects.as_ref(), &output_key(id)).await
    } else {
        Vec::new()
    };
    (job, output)
}

async fn a_job_pseudonymizes_as_the_api_does_and_de_pseudonymizing_restores_the_input(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let s = setup_with(store, objects, settings(), "r1");
    namespace(s.store.as_ref(), "names").await;
    let input = patients(300);
    let id = submit(&s, &input, on_names(Direction::Pseudonymize)).await;
    let (job, output) = run_to_end(&s, &id).await;
    assert_eq!(job.state, JobState::Completed, "{:?}", job.error);
    let counters = runner::counters_of(&job);
    assert_eq!(counters.rows, 300);
    assert_eq!(counters.malformed, 27);
    // Row 7 starts on line 14: most rows span two lines.
    assert_eq!(counters.malformed_lines.first(), Some(&14));
    assert_eq!(counters.missing, 27);
    assert_ne!(output, input);
    // Every pseudonymized cell is the API's pseudonym of its original.
    let text = String::from_utf8(output.clone()).unwrap();
    let mut checked = 0;
    for (original_line, output_line) in String::from_utf8(input.clone())
        .unwrap()
        .split('\n')
        .zip(text.split('\n'))
    {
        let (Some(original), Some(pseudonym)) = (
            original_line
                .split(',')
                .nth(1)
                .filter(|v| v.starts_with("patient-")),
            output_line.split(',').nth(1),
        ) else {
            continue;
        };
        if original_line.split(',').count() != 3 {
            continue;
        }
        let row = s
            .store
            .get_pseudonym(
                &NamespaceName::parse("names").unwrap(),
                &PseudonymValue::parse(pseudonym).unwrap(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.original_value, original);
        checked += 1;
    }
    assert!(checked > 100, "{checked} cells checked");
    // The way back, byte for byte.
    let back = submit(&s, &output, on_names(Direction::Depseudonymize)).await;
    let (job, restored) = run_to_end(&s, &back).await;
    assert_eq!(job.state, JobState::Completed, "{:?}", job.error);
    assert_eq!(restored, input);
}

/// Originals known before the job — a whole batch of them, some scattered,
/// a repeated one — are answered with their pseudonyms from before; the new
/// ones get one pseudonym each, the store's. (On PostgreSQL a batch of new
/// originals is written with the cheaper insert of new rows, a batch with a
/// known one is upserted, and the next all-new batch goes back to the insert.)
async fn a_job_answers_originals_known_before_it_with_their_pseudonyms(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let s = setup_with(store, objects, settings(), "r1");
    namespace(s.store.as_ref(), "names").await;
    let ns = s
        .store
        .get_namespace(&NamespaceName::parse("names").unwrap())
        .await
        .unwrap()
        .unwrap();
    let known: Vec<usize> = (20..36).chain((80..160).step_by(7)).collect();
    let before: Vec<Candidate> = known
        .iter()
        .map(|i| Candidate {
            namespace: ns.name.clone(),
            namespace_uid: ns.uid,
            original: OriginalValue::parse(&format!("patient-{i}")).unwrap(),
            pseudonym: format!("known-{i}"),
            created_at: now_micros(),
            sealed: None,
            moving: false,
        })
        .collect();
    s.store.upsert_pseudonyms(&before).await.unwrap();
    // Row 170 repeats row 100's patient, row 171 row 21's (known).
    let subject = |row: usize| match row {
        170 => 100,
        171 => 21,
        r => r,
    };
    let mut input = String::from("id,name\n");
    for row in 0..172 {
        input.push_str(&format!("{row},patient-{}\n", subject(row)));
    }
    let id = submit(&s, input.as_bytes(), on_names(Direction::Pseudonymize)).await;
    let (job, output) = run_to_end(&s, &id).await;
    assert_eq!(job.state, JobState::Completed, "{:?}", job.error);
    let output = String::from_utf8(output).unwrap();
    let mut lines = output.lines();
    assert_eq!(lines.next(), Some("id,name"));
    let mut pseudonyms = std::collections::HashMap::new();
    for (row, line) in lines.enumerate() {
        let (id, pseudonym) = line.split_once(',').unwrap();
        assert_eq!(id, row.to_string());
        let subject = subject(row);
        if known.contains(&subject) {
            assert_eq!(pseudonym, format!("known-{subject}"), "row {row}");
        }
        let stored = s
            .store
            .get_pseudonym(&ns.name, &PseudonymValue::parse(pseudonym).unwrap())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("row {row}: {pseudonym} is not stored"));
        assert_eq!(
            stored.original_value,
            format!("patient-{subject}"),
            "row {row}"
        );
        if let Some(other) = pseudonyms.insert(subject, pseudonym.to_owned()) {
            assert_eq!(other, pseudonym, "row {row}: one subject, one pseudonym");
        }
    }
    assert_eq!(pseudonyms.len(), 170);
}

/// Runs job `id` under a runner that dies (its future dropped, nothing more
/// written) after `after`; answers whether it was still running then.
async fn die_after(s: &Setup, after: Duration) -> bool {
    let claim = Claim {
        runner: "doomed",
        lease: s.jobs.context().settings.lease,
        stalled: Duration::from_secs(3600),
    };
    let job = s.store.claim_job(claim).await.unwrap().unwrap();
    let shutdown = CancellationToken::new();
    let died = tokio::time::timeout(after, runner::run(s.jobs.context(), job, &shutdown))
        .await
        .is_err();
    // A write already sent when the future was dropped still lands (the
    // database runs it; a killed process would not have sent it): let it
    // settle, so the record read next is the one the next runner finds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    died
}

async fn a_runner_that_dies_anywhere_is_resumed_from_its_checkpoint_with_identical_output(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let s = setup_with(store, objects, settings(), "r2");
    namespace(s.store.as_ref(), "names").await;
    let input = patients(2000);
    let spec = || {
        raw(
            Direction::Pseudonymize,
            vec![
                mapping("name", "names", None),
                mapping("id", "names", Some("pid")),
            ],
        )
    };
    let reference = submit(&s, &input, spec()).await;
    let (_, expected) = run_to_end(&s, &reference).await;
    let mut resumed_mid_file = 0;
    for kill_after_ms in [30, 170, 420] {
        let id = submit(&s, &input, spec()).await;
        let died_running = die_after(&s, Duration::from_millis(kill_after_ms)).await;
        let before = s.jobs.get(&id).await.unwrap();
        let (job, output) = run_to_end(&s, &id).await;
        assert_eq!(job.state, JobState::Completed, "{:?}", job.error);
        assert_eq!(output, expected, "killed after {kill_after_ms} ms");
        // Dying mid-way through the final write still completes the job.
        if died_running && job.epoch > 1 {
            let takeovers: Vec<Takeover> = serde_json::from_str(&job.takeovers).unwrap();
            assert!(!takeovers.is_empty(), "the takeover is recorded");
            let t = &takeovers[0];
            assert_eq!(t.resumed_rows, t.checkpointed_rows);
            assert_eq!(t.checkpointed_rows, before.rows_done as u64);
            if t.resumed_rows > 0 {
                resumed_mid_file += 1;
            }
        }
    }
    assert!(resumed_mid_file > 0, "no runner died after a checkpoint");
}

async fn a_fenced_runner_writes_nothing_that_counts(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let s = setup_with(store, objects, settings(), "r3");
    namespace(s.store.as_ref(), "names").await;
    let input = patients(1500);
    let spec = || on_names(Direction::Pseudonymize);
    let reference = submit(&s, &input, spec()).await;
    let (_, expected) = run_to_end(&s, &reference).await;
    let id = submit(&s, &input, spec()).await;
    let lease = s.jobs.context().settings.lease;
    let claim = |runner| Claim {
        runner,
        lease,
        stalled: Duration::from_secs(3600),
    };
    // The first runner claims and is "paused" past its lease; a second takes
    // the job over; then the first wakes up and runs too.
    let first = s.store.claim_job(claim("paused")).await.unwrap().unwrap();
    tokio::time::sleep(lease + Duration::from_millis(50)).await;
    let second = s.store.claim_job(claim("second")).await.unwrap().unwrap();
    assert_eq!(second.epoch, first.epoch + 1);
    let shutdown = CancellationToken::new();
    let ctx = s.jobs.context().clone();
    let late = tokio::spawn({
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        async move { runner::run(&ctx, first, &shutdown).await }
    });
    let holder = runner::run(&ctx, second, &shutdown).await;
    assert_eq!(holder, Outcome::Completed);
    assert_eq!(late.await.unwrap(), Outcome::Fenced);
    assert_eq!(read(s.objects.as_ref(), &output_key(&id)).await, expected);
}

async fn cancel_lands_within_a_checkpoint_interval_and_leaves_no_output(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let settings = RunnerSettings {
        batch_rows: 4,
        ..settings()
    };
    let s = setup_with(store, objects, settings, "r4");
    namespace(s.store.as_ref(), "names").await;
    let id = submit(&s, &patients(20_000), on_names(Direction::Pseudonymize)).await;
    let stop = CancellationToken::new();
    let runners = s.jobs.spawn_runners(stop.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.jobs.get(&id).await.unwrap().rows_done == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cancelled = s.jobs.cancel(&id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    let rows_at_cancel = cancelled.rows_done;
    let interval = s.jobs.context().settings.checkpoint_interval;
    tokio::time::sleep(interval * 3).await;
    let after = s.jobs.get(&id).await.unwrap();
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(
        after.rows_done, rows_at_cancel,
        "no checkpoint after the cancel"
    );
    assert_eq!(s.objects.size(&output_key(&id)).await.unwrap(), None);
    stop.cancel();
    runners.await.unwrap();
    s.jobs.delete(&id).await.unwrap();
    assert_eq!(s.objects.size(&input_key(&id)).await.unwrap(), None);
}

async fn deleting_a_namespace_fails_the_job_using_it(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let settings = RunnerSettings {
        batch_rows: 4,
        ..settings()
    };
    let s = setup_with(store, objects, settings, "r5");
    namespace(s.store.as_ref(), "doomed").await;
    let id = submit(
        &s,
        &patients(20_000),
        raw(
            Direction::Pseudonymize,
            vec![mapping("name", "doomed", None)],
        ),
    )
    .await;
    let stop = CancellationToken::new();
    let runners = s.jobs.spawn_runners(stop.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.jobs.get(&id).await.unwrap().rows_done == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.store
        .delete_namespace(&NamespaceName::parse("doomed").unwrap(), None)
        .await
        .unwrap();
    let job = wait_finished(&s, &id).await;
    stop.cancel();
    runners.await.unwrap();
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.error.as_deref(),
        Some("namespace doomed was deleted while the job ran")
    );
    assert_eq!(s.objects.size(&output_key(&id)).await.unwrap(), None);
}

async fn bad_input_is_refused_at_start_naming_the_problem(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let mut settings = settings();
    settings.max_record_bytes = 64;
    let mut s = setup_with(store, objects, settings, "r6");
    let mut service = ServiceSettings::default();
    service.limits.max_file_bytes = 10_000;
    service.limits.max_columns = 5;
    service.limits.max_record_bytes = 64;
    s.jobs = Jobs::new(s.jobs.context().clone(), service);
    namespace(s.store.as_ref(), "names").await;
    let nope = s
        .jobs
        .create(
            "alice",
            raw(Direction::Pseudonymize, vec![mapping("name", "nope", None)]),
        )
        .await
        .unwrap_err();
    assert_eq!(nope.kind, ErrorKind::NotFound);
    assert!(nope.message.contains("nope"));
    let cases: [(&[u8], &str); 7] = [
        (b"", "empty"),
        (b"id,nom\n1,x\n", "\"name\" is not in the header"),
        (b"a,b,c,d,e,f,name\n", "7 columns"),
        (&[b'x'; 20_000], "more than the limit of 10000 bytes"),
        (
            format!("name,{}\n", "y".repeat(100))
                .as_bytes()
                .to_vec()
                .leak(),
            "longer than 64 bytes",
        ),
        (b"na\xFFme\n", "not valid utf-8"),
        (b"\xFF\xFEn\0", "utf-16 byte order mark"),
    ];
    for (input, expected) in cases {
        let (job, _) = s
            .jobs
            .create("alice", on_names(Direction::Pseudonymize))
            .await
            .unwrap();
        s.objects
            .put(&input_key(&job.id), Bytes::copy_from_slice(input))
            .await
            .unwrap();
        let e = s.jobs.start(&job.id).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{expected}: {e}");
        assert!(e.message.contains(expected), "{expected}: {e}");
        assert_eq!(
            s.jobs.get(&job.id).await.unwrap().state,
            JobState::AwaitingUpload
        );
    }
    // Not uploaded yet.
    let (job, _) = s
        .jobs
        .create("alice", on_names(Direction::Pseudonymize))
        .await
        .unwrap();
    assert!(s
        .jobs
        .start(&job.id)
        .await
        .unwrap_err()
        .message
        .contains("not been uploaded"));
}

async fn a_bad_byte_or_an_overlong_line_mid_file_fails_the_job_naming_its_line(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let mut settings = settings();
    settings.max_record_bytes = 64;
    let s = setup_with(store, objects, settings, "r7");
    namespace(s.store.as_ref(), "names").await;
    let mut input = patients(100);
    input.extend_from_slice(b"100,\xC3(,x\r\n");
    let id = submit(&s, &input, on_names(Direction::Pseudonymize)).await;
    let (job, _) = run_to_end(&s, &id).await;
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.error.as_deref(),
        Some("line 175: a byte sequence that is not valid utf-8")
    );
    assert_eq!(s.objects.size(&output_key(&id)).await.unwrap(), None);
    let mut input = patients(10);
    input.extend_from_slice(format!("10,{},x\n", "z".repeat(80)).as_bytes());
    let id = submit(&s, &input, on_names(Direction::Pseudonymize)).await;
    let (job, _) = run_to_end(&s, &id).await;
    assert!(
        job.error
            .as_deref()
            .unwrap()
            .contains("longer than 64 bytes"),
        "{:?}",
        job.error
    );
}

/// Every encoding and dialect, there and back, byte for byte.
async fn every_encoding_and_dialect_round_trips(
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
) {
    let s = setup_with(store, objects, settings(), "r8");
    namespace(s.store.as_ref(), "names").await;
    namespace(s.store.as_ref(), "cities").await;
    let text = "id;name;city\r\n1;Zoë;Köln\r\n2;\"Müller; Hans\";NULL\r\n3;Zoë;Bonn\r\n";
    let cases: [(&str, Vec<u8>); 6] = [
        ("utf-8", text.as_bytes().to_vec()),
        (
            "utf-8",
            [b"\xEF\xBB\xBF".as_slice(), text.as_bytes()].concat(),
        ),
        ("utf-16", {
            let mut v = b"\xFF\xFE".to_vec();
            vfps_jobs::encoding::Encoding::Utf16Le
                .encode_into(text, &mut v)
                .unwrap();
            v
        }),
        ("utf-16BE", {
            let mut v = Vec::new();
            vfps_jobs::encoding::Encoding::Utf16Be
                .encode_into(text, &mut v)
                .unwrap();
            v
        }),
        ("iso-8859-1", {
            let mut v = Vec::new();
            vfps_jobs::encoding::Encoding::Latin1
                .encode_into(text, &mut v)
                .unwrap();
            v
        }),
        ("windows-1252", {
            let mut v = Vec::new();
            vfps_jobs::encoding::Encoding::Windows1252
                .encode_into(text, &mut v)
                .unwrap();
            v
        }),
    ];
    for (encoding, input) in cases {
        let spec = |direction, header: bool| RawSpec {
            direction: Some(direction),
            mappings: match (header, direction) {
                (true, Direction::Pseudonymize) => vec![
                    mapping("name", "names", None),
                    mapping("city", "cities", Some("city pseudonym")),
                ],
                (true, Direction::Depseudonymize) => vec![
                    mapping("name", "names", None),
                    mapping("city pseudonym", "cities", None),
                ],
                (false, _) => vec![mapping("1", "names", None)],
            },
            delimiter: ";".into(),
            encoding: encoding.into(),
            has_header: header,
            file_name: "x.csv".into(),
        };
        let there = submit(&s, &input, spec(Direction::Pseudonymize, true)).await;
        let (job, output) = run_to_end(&s, &there).await;
        assert_eq!(
            job.state,
            JobState::Completed,
            "{encoding}: {:?}",
            job.error
        );
        let counters = runner::counters_of(&job);
        assert_eq!((counters.rows, counters.missing), (3, 1), "{encoding}");
        let e = vfps_jobs::encoding::Encoding::parse(encoding).unwrap();
        let decoded = e.decode(&output[e.detect(&output).unwrap().1..]).unwrap();
        let lines: Vec<&str> = decoded.split("\r\n").collect();
        assert_eq!(lines[0], "id;name;city;city pseudonym", "{encoding}");
        // One subject, one pseudonym.
        let name = |l: &str| l.split(';').nth(1).unwrap().to_owned();
        assert_eq!(name(lines[1]), name(lines[3]), "{encoding}");
        assert!(lines[2].ends_with(";NULL;NULL"), "{encoding}: {}", lines[2]);
        // The way back, both in place.
        let back = submit(&s, &output, spec(Direction::Depseudonymize, true)).await;
        let (job, restored) = run_to_end(&s, &back).await;
        assert_eq!(
            job.state,
            JobState::Completed,
            "{encoding}: {:?}",
            job.error
        );
        let restored = e
            .decode(&restored[e.detect(&restored).unwrap().1..])
            .unwrap();
        assert_eq!(
            restored.split("\r\n").nth(1).unwrap(),
            "1;Zoë;Köln;Köln",
            "{encoding}"
        );
        // Without a header, by index, in place: exactly the input back.
        let there = submit(&s, &input, spec(Direction::Pseudonymize, false)).await;
        let (_, output) = run_to_end(&s, &there).await;
        let back = submit(&s, &output, spec(Direction::Depseudonymize, false)).await;
        let (job, restored) = run_to_end(&s, &back).await;
        assert_eq!(
            job.state,
            JobState::Completed,
            "{encoding}: {:?}",
            job.error
        );
        assert_eq!(restored, input, "{encoding}");
    }
}

/// Interactive callers always present.
struct Busy;
impl runner::Pressure for Busy {
    fn interactive(&self) -> bool {
        true
    }
}

/// The largest batch a runner sent.
#[derive(Default)]
struct LargestBatch(std::sync::atomic::AtomicUsize);
impl runner::Observer for LargestBatch {
    fn batch(&self, rows: usize, _took: Duration) {
        self.0.fetch_max(rows, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A runner serving beside interactive callers sends small batches, one at
/// a time, and still finishes with the same output; alone it sends large ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_makes_way_for_interactive_callers() {
    let store = sqlite().await;
    namespace(store.as_ref(), "names").await;
    let input = patients(1500);
    let mut outputs = Vec::new();
    for busy in [false, true] {
        let largest = Arc::new(LargestBatch::default());
        let mut s = jobs_for(
            store.clone(),
            folder(),
            RunnerSettings {
                batch_rows: 1000,
                ..settings()
            },
            "r-busy",
        );
        let mut ctx = s.jobs.context().clone();
        ctx.observer = largest.clone();
        if busy {
            ctx.pressure = Arc::new(Busy);
        }
        s.jobs = Jobs::new(
            ctx,
            ServiceSettings {
                poll_interval: Duration::from_millis(50),
                ..ServiceSettings::default()
            },
        );
        let id = submit(&s, &input, on_names(Direction::Pseudonymize)).await;
        let (job, output) = run_to_end(&s, &id).await;
        assert_eq!(job.state, JobState::Completed, "{:?}", job.error);
        let largest = largest.0.load(std::sync::atomic::Ordering::Relaxed);
        if busy {
            assert!(largest <= runner::YIELDING_BATCH_ROWS, "{largest}");
        } else {
            assert!(largest > runner::YIELDING_BATCH_ROWS, "{largest}");
        }
        outputs.push(output);
    }
    assert_eq!(outputs[0], outputs[1]);
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod on_postgres {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(postgres().await, folder()).await })*
        }
        mod on_sqlite {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(sqlite().await, folder()).await })*
        }
        /// PostgreSQL and a bucket, as replicas share them in production.
        mod on_s3 {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
            async fn $name() {
                let garage = Garage::start().await;
                super::$name(postgres().await, bucket(&garage)).await
            })*
        }
        /// PostgreSQL and a bucket that answers as AWS S3 does where Garage
        /// forgives (a length on every body), under SSE-KMS (a part uploaded
        /// again gets a new tag).
        mod on_aws {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let double = AwsS3::start(Behaviour { kms: true, ..Behaviour::new() }).await;
                super::$name(postgres().await, aws_bucket(&double)).await
            })*
        }
    };
}

on_every_store!(
    a_job_pseudonymizes_as_the_api_does_and_de_pseudonymizing_restores_the_input,
    a_job_answers_originals_known_before_it_with_their_pseudonyms,
    a_runner_that_dies_anywhere_is_resumed_from_its_checkpoint_with_identical_output,
    a_fenced_runner_writes_nothing_that_counts,
    cancel_lands_within_a_checkpoint_interval_and_leaves_no_output,
    deleting_a_namespace_fails_the_job_using_it,
    bad_input_is_refused_at_start_naming_the_problem,
    a_bad_byte_or_an_overlong_line_mid_file_fails_the_job_naming_its_line,
    every_encoding_and_dialect_round_trips,
);
