//! CSV jobs through the API: REST and gRPC end to end with files streamed
//! through vfps, upstream's authorization rules and audit events, and a
//! runner process killed with SIGKILL mid-job whose job another process
//! finishes with byte-identical output.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::{transport::Channel, Code};
use vfps_proto::v1::{
    csv_job_service_client::CsvJobServiceClient, CsvColumnMapping, CsvJobServiceCreateRequest,
    CsvJobServiceGetRequest, CsvJobServiceStartRequest, CsvJobState,
};
use vfps_testkit::oidc::OidcIssuer;

use crate::{
    auth::secured_env,
    helpers::{backend_env, spawn_app_with, Backend, ServerProcess, TestApp},
};

const UUID4: i32 = 3;

/// A backend's environment with job files in a folder every server of the
/// test shares.
pub(crate) fn jobs_env(backend: Backend) -> Vec<(String, String)> {
    let mut env = backend_env(backend).0;
    with_jobs_dir(&mut env);
    env
}

pub(crate) fn with_jobs_dir(env: &mut Vec<(String, String)>) {
    let dir = vfps_testkit::scratch_dir("job-files");
    env.push(("VFPS_JOBS_DIR".into(), dir.display().to_string()));
    env.push(("CsvProcessing__PollInterval".into(), "100ms".into()));
}

pub(crate) fn input(rows: usize) -> String {
    let mut s = String::from("id,name\r\n");
    for i in 0..rows {
        s.push_str(&format!("{i},\"subject, {}\"\r\n", i % 97));
    }
    s
}

pub(crate) async fn rest(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut r = app
        .http_client
        .request(method, format!("{}{path}", app.http));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r
}

/// Creates, uploads and starts a job over REST; answers its id.
pub(crate) async fn submit(app: &TestApp, token: Option<&str>, body: &str, spec: Value) -> String {
    let created: Value = rest(app, reqwest::Method::POST, "/v1/csv-jobs", token)
        .await
        .json(&spec)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    assert_eq!(created["job"]["state"], "CSV_JOB_STATE_AWAITING_UPLOAD");
    let upload = &created["upload"];
    assert_eq!(upload["throughVfps"], true);
    assert_eq!(upload["method"], "PUT");
    let path = upload["url"].as_str().unwrap();
    let r = rest(app, reqwest::Method::PUT, path, token)
        .await
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let started: Value = rest(
        app,
        reqwest::Method::POST,
        &format!("/v1/csv-jobs/{id}:start"),
        token,
    )
    .await
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    // Queued, and perhaps claimed at once.
    let state = started["job"]["state"].as_str().unwrap_or_default();
    assert!(
        [
            "CSV_JOB_STATE_QUEUED",
            "CSV_JOB_STATE_RUNNING",
            "CSV_JOB_STATE_COMPLETED"
        ]
        .contains(&state),
        "{started}"
    );
    assert_eq!(started["job"]["totalBytes"], body.len());
    id
}

pub(crate) async fn wait_done(app: &TestApp, token: Option<&str>, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job: Value = rest(
            app,
            reqwest::Method::GET,
            &format!("/v1/csv-jobs/{id}"),
            token,
        )
        .await
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let state = job["job"]["state"].as_str().unwrap_or_default().to_owned();
        if [
            "CSV_JOB_STATE_COMPLETED",
            "CSV_JOB_STATE_FAILED",
            "CSV_JOB_STATE_CANCELLED",
        ]
        .contains(&state.as_str())
        {
            return job["job"].clone();
        }
        assert!(Instant::now() < deadline, "job {id} still {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn download(app: &TestApp, token: Option<&str>, id: &str) -> reqwest::Response {
    let address: Value = rest(
        app,
        reqwest::Method::GET,
        &format!("/v1/csv-jobs/{id}:downloadAddress"),
        token,
    )
    .await
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let url = address["download"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{address}"));
    rest(app, reqwest::Method::GET, url, token)
        .await
        .send()
        .await
        .unwrap()
}

/// The status of asking for a job's download address.
pub(crate) async fn download_address_status(
    app: &TestApp,
    token: Option<&str>,
    id: &str,
) -> StatusCode {
    rest(
        app,
        reqwest::Method::GET,
        &format!("/v1/csv-jobs/{id}:downloadAddress"),
        token,
    )
    .await
    .send()
    .await
    .unwrap()
    .status()
}

pub(crate) fn spec(direction: &str, namespace: &str) -> Value {
    json!({
        "direction": direction,
        "columnMappings": [{"sourceColumn": "name", "namespace": namespace}],
        "hasHeaderRow": true,
        "originalFileName": "subjects 2026.csv",
    })
}

async fn a_job_runs_over_rest_and_its_output_round_trips(backend: Backend) {
    let app = spawn_app_with(jobs_env(backend)).await;
    app.namespace("subjects", UUID4, 36).await;
    let body = input(500);
    let mut named = spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "subjects");
    named["originalFileName"] = json!("Müller \"Studie\" 2026.csv");
    let id = submit(&app, None, &body, named).await;
    let job = wait_done(&app, None, &id).await;
    assert_eq!(job["state"], "CSV_JOB_STATE_COMPLETED", "{job}");
    assert_eq!(job["rowsProcessed"], 500);
    assert_eq!(job["originalFileName"], "Müller \"Studie\" 2026.csv");
    let r = download(&app, None, &id).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "no-store");
    // The exact name, umlaut and quotes, in `filename*`; an ASCII fallback.
    assert_eq!(
        r.headers()["content-disposition"],
        "attachment; filename=\"M_ller _Studie_ 2026-pseudonymized.csv\"; \
         filename*=UTF-8''M%C3%BCller%20%22Studie%22%202026-pseudonymized.csv"
    );
    let output = r.text().await.unwrap();
    // One subject, one pseudonym, the API's.
    let line = output.lines().nth(1).unwrap();
    let pseudonym = line.split(',').nth(1).unwrap().trim_matches('"');
    let same = app.create("subjects", "subject, 0").await.unwrap();
    assert_eq!(same.pseudonym_value, pseudonym);
    let back = submit(
        &app,
        None,
        &output,
        spec("CSV_JOB_DIRECTION_DEPSEUDONYMIZE", "subjects"),
    )
    .await;
    wait_done(&app, None, &back).await;
    let restored = download(&app, None, &back).await.text().await.unwrap();
    assert_eq!(restored, body);
    // Listed newest first; deleted with their files once finished.
    let listed: Value = app.get_json("/v1/csv-jobs").await;
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [back.as_str(), id.as_str()]);
    let cleared: Value = app
        .post_json("/v1/csv-jobs:clearFinished", &json!({}))
        .await;
    assert_eq!(cleared["deleted"], 2);
    let gone = app.get(&format!("/v1/csv-jobs/{id}")).await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}

async fn grpc_errors_name_the_problem(backend: Backend) {
    let app = spawn_app_with(jobs_env(backend)).await;
    app.namespace("subjects", UUID4, 36).await;
    let mut client = CsvJobServiceClient::new(
        Channel::from_shared(app.grpc.clone())
            .unwrap()
            .connect_lazy(),
    );
    let mapping = |ns: &str| CsvColumnMapping {
        source_column: "name".into(),
        namespace: ns.into(),
        target_column: None,
    };
    let missing = client
        .create(CsvJobServiceCreateRequest {
            column_mappings: vec![mapping("nope")],
            has_header_row: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let bad = client
        .create(CsvJobServiceCreateRequest {
            column_mappings: vec![mapping("subjects")],
            encoding: "ebcdic".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("ebcdic"));
    let created = client
        .create(CsvJobServiceCreateRequest {
            column_mappings: vec![mapping("subjects")],
            has_header_row: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let id = created.job.unwrap().id;
    let not_uploaded = client
        .start(CsvJobServiceStartRequest { id: id.clone() })
        .await
        .unwrap_err();
    assert_eq!(not_uploaded.code(), Code::InvalidArgument);
    assert!(not_uploaded.message().contains("not been uploaded"));
    let r = app
        .http_client
        .put(format!("{}/v1/csv-jobs/{id}/input", app.http))
        .body("id,surname\n1,x\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let unknown = client
        .start(CsvJobServiceStartRequest { id: id.clone() })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::InvalidArgument);
    assert!(
        unknown.message().contains("\"name\" is not in the header"),
        "{unknown:?}"
    );
    let job = client
        .get(CsvJobServiceGetRequest { id })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(job.state, CsvJobState::AwaitingUpload as i32);
    let absent = client
        .get(CsvJobServiceGetRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(absent.code(), Code::NotFound);
}

crate::on_both_backends!(
    a_job_runs_over_rest_and_its_output_round_trips,
    grpc_errors_name_the_problem
);

/// PostgreSQL without S3 or a shared folder: every job call says what to set.
#[tokio::test]
async fn without_s3_or_a_shared_folder_postgresql_has_no_jobs_and_says_why() {
    let app = spawn_app_with(backend_env(Backend::Postgres).0).await;
    let r = app
        .http_client
        .post(format!("{}/v1/csv-jobs", app.http))
        .json(&spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], 9, "FAILED_PRECONDITION");
    assert!(body["message"].as_str().unwrap().contains("S3__IsEnabled"));
}

/// Upstream's rules: write to pseudonymize, reverse-lookup to
/// de-pseudonymize; a job is its creator's (and admins'); creating,
/// cancelling and downloading are audit events.
#[tokio::test]
async fn jobs_follow_upstreams_rules_and_are_audited() {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(Backend::Sqlite, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin"]);
    let writer = issuer.token("w", &["writer"]);
    let other_writer = issuer.token("w2", &["writer"]);
    let reader = issuer.token("r", &["reader"]);
    let trustee = issuer.token("t", &["trustee"]);
    let r = rest(&app, reqwest::Method::POST, "/v1/namespaces", Some(&admin))
        .await
        .json(
            &json!({"name": "research", "pseudonymGenerationMethod": UUID4, "pseudonymLength": 36}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let create = |token: String, direction: &'static str| {
        let app = &app;
        async move {
            rest(app, reqwest::Method::POST, "/v1/csv-jobs", Some(&token))
                .await
                .json(&spec(direction, "research"))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        create(reader.clone(), "CSV_JOB_DIRECTION_PSEUDONYMIZE").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        create(writer.clone(), "CSV_JOB_DIRECTION_DEPSEUDONYMIZE").await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        create(trustee.clone(), "CSV_JOB_DIRECTION_DEPSEUDONYMIZE").await,
        StatusCode::OK
    );
    let unauthenticated = app
        .http_client
        .get(format!("{}/v1/csv-jobs", app.http))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
    let id = submit(
        &app,
        Some(&writer),
        &input(20),
        spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "research"),
    )
    .await;
    wait_done(&app, Some(&writer), &id).await;
    // Someone else's job is not there for them; an admin sees it.
    let theirs = rest(
        &app,
        reqwest::Method::GET,
        &format!("/v1/csv-jobs/{id}"),
        Some(&other_writer),
    )
    .await
    .send()
    .await
    .unwrap();
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND);
    // An admin sees it, but its output needs the right creating it needed.
    assert_eq!(
        download_address_status(&app, Some(&admin), &id).await,
        StatusCode::FORBIDDEN
    );
    let own: Value = rest(
        &app,
        reqwest::Method::GET,
        "/v1/csv-jobs",
        Some(&other_writer),
    )
    .await
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(own["jobs"].as_array().unwrap().len(), 0);
    let all: Value = rest(&app, reqwest::Method::GET, "/v1/csv-jobs", Some(&admin))
        .await
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(
        download(&app, Some(&writer), &id).await.status(),
        StatusCode::OK
    );
    let metrics = app.metrics_text().await;
    for (operation, outcome, n) in [
        ("CsvJobService/Create", "allowed", 2),
        ("CsvJobService/Create", "denied", 2),
        ("CsvJobService/Download", "allowed", 1),
        ("CsvJobService/Download", "denied", 1),
    ] {
        let line = format!(
            "vfps_audit_events_total{{operation=\"{operation}\",outcome=\"{outcome}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} missing");
    }
}

/// Two server processes on one PostgreSQL database and one folder: the one
/// running a job is killed with SIGKILL mid-job; the other resumes it from
/// the last checkpoint, and the output is byte for byte an uninterrupted
/// run's.
#[tokio::test]
async fn a_runner_killed_with_sigkill_mid_job_is_resumed_by_another_replica() {
    let mut env = jobs_env(Backend::Postgres);
    for (k, v) in [
        ("CsvProcessing__PseudonymizeBatchSize", "50"),
        ("CsvProcessing__CheckpointRows", "500"),
        ("CsvProcessing__CheckpointInterval", "300ms"),
        ("CsvProcessing__LeaseDuration", "1500ms"),
        ("CsvProcessing__OutputPartSize", "64KiB"),
    ] {
        env.push((k.into(), v.into()));
    }
    let with_name = |name: &str| {
        let mut e = env.clone();
        e.push(("VFPS_INSTANCE_NAME".into(), name.into()));
        e
    };
    let a = ServerProcess::start(&with_name("a")).await;
    let mut b = Some(ServerProcess::start(&with_name("b")).await);
    // The observer runs no jobs of its own: only a and b do.
    let mut observer = with_name("observer");
    observer.push(("CsvProcessing__Workers".into(), "0".into()));
    let app = spawn_app_with(observer).await;
    app.namespace("subjects", UUID4, 36).await;
    let body = input(30_000);
    let reference = submit(
        &app,
        None,
        &body,
        spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "subjects"),
    )
    .await;
    wait_done(&app, None, &reference).await;
    let expected = download(&app, None, &reference)
        .await
        .bytes()
        .await
        .unwrap();
    let id = submit(
        &app,
        None,
        &body,
        spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "subjects"),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (victim, rows_at_kill) = loop {
        let job: Value = app.get_json(&format!("/v1/csv-jobs/{id}")).await;
        let runner = job["job"]["runner"].as_str().unwrap_or_default().to_owned();
        let rows = job["job"]["rowsProcessed"].as_i64().unwrap_or(0);
        if rows > 0 && job["job"]["state"] == "CSV_JOB_STATE_RUNNING" {
            break (runner, rows);
        }
        assert!(Instant::now() < deadline, "the job never ran: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let killed = match victim.split('/').next() {
        Some("a") => &a,
        Some("b") => b.as_ref().unwrap(),
        _ => panic!("a runner other than a or b ran the job ({victim})"),
    };
    killed.signal("KILL");
    let job = wait_done(&app, None, &id).await;
    assert_eq!(job["state"], "CSV_JOB_STATE_COMPLETED", "{job}");
    let takeovers = job["takeovers"].as_array().unwrap();
    assert!(!takeovers.is_empty(), "{job}");
    let t = &takeovers[0];
    assert!(
        t["resumedRows"].as_i64().unwrap() >= rows_at_kill,
        "never from row 0: {t}"
    );
    assert!(
        !t["runner"].as_str().unwrap().starts_with(&victim[..2]),
        "{t}"
    );
    let output = download(&app, None, &id).await.bytes().await.unwrap();
    assert_eq!(output, expected);
    drop(b.take());
}

/// `vfps jobs submit FILE --column … --wait --output OUT`, then `list`,
/// `status` and a bad column named in a non-zero exit.
#[tokio::test]
async fn the_command_line_submits_waits_and_downloads() {
    let app = spawn_app_with(jobs_env(Backend::Sqlite)).await;
    app.namespace("subjects", UUID4, 36).await;
    let dir = vfps_testkit::scratch_dir("cli");
    let file = dir.join("subjects.csv");
    let body = input(2000);
    std::fs::write(&file, &body).unwrap();
    let vfps = |args: &[&str]| {
        let grpc = app.grpc.clone();
        let http = app.http.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_vfps"))
                .arg("jobs")
                .args(&args)
                .env("VFPS_ADDRESS", grpc)
                .env("VFPS_HTTP_ADDRESS", http)
                .output()
                .await
                .unwrap()
        }
    };
    let out = vfps(&[
        "submit",
        file.to_str().unwrap(),
        "--column",
        "name=subjects",
        "--column",
        "id=subjects:id_pseudonym",
        "--wait",
    ])
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("done: 2000 rows"), "{stderr}");
    let written = std::fs::read_to_string(dir.join("subjects-pseudonymized.csv")).unwrap();
    assert!(
        written.starts_with("id,name,id_pseudonym\r\n"),
        "{written:.80}"
    );
    assert_eq!(written.lines().count(), 2001);
    let listed = vfps(&["list"]).await;
    assert!(String::from_utf8_lossy(&listed.stdout).contains("COMPLETED"));
    let bad = vfps(&[
        "submit",
        file.to_str().unwrap(),
        "--column",
        "surname=subjects",
    ])
    .await;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("\"surname\" is not in the header"));
    let malformed = vfps(&["submit", file.to_str().unwrap(), "--column", "name"]).await;
    assert!(!malformed.status.success());
    assert!(String::from_utf8_lossy(&malformed.stderr).contains("--column \"name\""));
}
