//! An admin re-identifies only with the namespace's reverse-lookup right: from
//! outside, an admin without it tries every path to an original value (Get,
//! List, FHIR, a minted token, someone's CSV job, the UI's lookup) and gets
//! none; rights are granted only by someone who holds them; a job's output
//! needs, at download time, the right the job needed; callers are typed.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tonic::Code;
use vfps_testkit::oidc::OidcIssuer;

use crate::{
    auth::{authed, secured_env},
    helpers::{spawn_app_with, Backend, TestApp},
    jobs::{download, download_address_status, rest, spec, submit, wait_done, with_jobs_dir},
};

const HEX: i32 = 5;

async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut r = rest(app, method, path, Some(token)).await;
    if let Some(b) = body {
        r = r.json(&b);
    }
    let response = r.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Namespace `research` (hex, length 16), made by `admin`.
async fn create_research(app: &TestApp, admin: &str) {
    let (status, body) = call(
        app,
        Method::POST,
        "/v1/namespaces",
        admin,
        Some(json!({"name": "research", "pseudonymGenerationMethod": HEX, "pseudonymLength": 16})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A pseudonym of `original` in `research`, made by `writer`.
async fn pseudonym(app: &TestApp, writer: &str, original: &str) -> String {
    let (status, body) = call(
        app,
        Method::POST,
        "/v1/namespaces/research/pseudonyms",
        writer,
        Some(json!({ "originalValue": original })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["pseudonym"]["pseudonymValue"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn an_admin_without_reverse_lookup_reaches_no_original_value(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(backend, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin"]);
    let trustee = issuer.token("t", &["writer", "trustee"]);
    create_research(&app, &admin).await;
    let original = "patient-0042";
    let p = pseudonym(&app, &trustee, original).await;
    let mut seen = Vec::new();

    // The reverse lookup, over gRPC and REST.
    let got = app
        .pseudonyms
        .clone()
        .get(authed(
            vfps_proto::v1::PseudonymServiceGetRequest {
                namespace: "research".into(),
                pseudonym_value: p.clone(),
            },
            Some(&admin),
        ))
        .await;
    assert_eq!(
        got.map(|_| Code::Ok).unwrap_or_else(|s| s.code()),
        Code::PermissionDenied
    );
    for path in [
        format!("/v1/namespaces/research/pseudonyms/{p}"),
        "/v1/namespaces/research/pseudonyms?pageSize=100".to_owned(),
    ] {
        let (status, body) = call(&app, Method::GET, &path, &admin, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        seen.push(body.to_string());
    }
    // FHIR's operation creates (write), which an admin does not hold either.
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/fhir/$create-pseudonym",
        &admin,
        Some(json!({"resourceType": "Parameters", "parameter": [
            {"name": "namespace", "valueString": "research"},
            {"name": "originalValue", "valueString": "someone-else"},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // A token granting what the admin lacks is refused, naming the grant; one
    // granting what it holds (admin) is made, and re-identifies no better.
    for grants in [
        json!(["*=reverse-lookup,read,write"]),
        json!(["research=reverse-lookup"]),
        json!(["research=read"]),
    ] {
        let (status, body) = call(
            &app,
            Method::POST,
            "/v1/tokens",
            &admin,
            Some(json!({"kind": "service-account", "name": "escalate", "grants": grants})),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{grants}: {body}");
        let why = body.to_string();
        assert!(why.contains("cannot grant"), "{why}");
        seen.push(why);
    }
    let (status, made) = call(
        &app,
        Method::POST,
        "/v1/tokens",
        &admin,
        Some(json!({"kind": "personal", "name": "deputy", "admin": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let deputy = made["secret"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &app,
        Method::GET,
        &format!("/v1/namespaces/research/pseudonyms/{p}"),
        &deputy,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    seen.push(body.to_string());

    // Someone's de-pseudonymized output: listed for the admin, never handed out.
    let id = submit(
        &app,
        Some(&trustee),
        &format!("id,name\r\n1,{p}\r\n"),
        spec("CSV_JOB_DIRECTION_DEPSEUDONYMIZE", "research"),
    )
    .await;
    let job = wait_done(&app, Some(&trustee), &id).await;
    assert_eq!(job["state"], "CSV_JOB_STATE_COMPLETED", "{job}");
    let (_, listed) = call(&app, Method::GET, "/v1/csv-jobs", &admin, None).await;
    assert_eq!(listed["jobs"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(
        download_address_status(&app, Some(&admin), &id).await,
        StatusCode::FORBIDDEN
    );
    let over_grpc = vfps_proto::v1::csv_job_service_client::CsvJobServiceClient::new(
        tonic::transport::Channel::from_shared(app.grpc.clone())
            .unwrap()
            .connect_lazy(),
    )
    .get_download_address(authed(
        vfps_proto::v1::CsvJobServiceGetDownloadAddressRequest { id: id.clone() },
        Some(&admin),
    ))
    .await
    .unwrap_err();
    assert_eq!(over_grpc.code(), Code::PermissionDenied, "{over_grpc:?}");
    let (_, address) = call(
        &app,
        Method::GET,
        &format!("/v1/csv-jobs/{id}:downloadAddress"),
        &trustee,
        None,
    )
    .await;
    let url = address["download"]["url"].as_str().unwrap().to_owned();
    let (status, body) = call(&app, Method::GET, &url, &admin, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    seen.push(body.to_string());
    // Its creator, who holds the right, gets it.
    let output = download(&app, Some(&trustee), &id).await;
    assert_eq!(output.status(), StatusCode::OK);
    assert!(output.text().await.unwrap().contains(original));

    for answer in &seen {
        assert!(
            !answer.contains(original),
            "an answer holds the original: {answer}"
        );
    }
    let metrics = app.metrics_text().await;
    for line in [
        "vfps_audit_events_total{operation=\"Tokens/Create\",outcome=\"denied\"} 3",
        "vfps_audit_events_total{operation=\"Tokens/Create\",outcome=\"allowed\"} 1",
        "vfps_audit_events_total{operation=\"CsvJobService/Download\",outcome=\"denied\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

/// Rights are read at download time: the creator of a job who has since lost
/// the right its output needs gets it no more.
async fn a_creator_who_lost_the_right_loses_the_output(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(backend, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin"]);
    create_research(&app, &admin).await;
    let before = issuer.token("t", &["writer", "trustee"]);
    let p = pseudonym(&app, &before, "patient-7").await;
    let id = submit(
        &app,
        Some(&before),
        &format!("id,name\r\n1,{p}\r\n"),
        spec("CSV_JOB_DIRECTION_DEPSEUDONYMIZE", "research"),
    )
    .await;
    wait_done(&app, Some(&before), &id).await;
    // The same person, the trustee role taken away: still the job's owner
    // (it sees the job), no longer entitled to its output.
    let after = issuer.token("t", &["writer"]);
    let (status, _) = call(
        &app,
        Method::GET,
        &format!("/v1/csv-jobs/{id}"),
        &after,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        download_address_status(&app, Some(&after), &id).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        download_address_status(&app, Some(&before), &id).await,
        StatusCode::OK
    );
}

/// A JWT without `sub` named nobody (every such caller was `unknown`, sharing
/// jobs); one whose `sub` is a database token's subject is not that token.
async fn callers_are_typed_and_a_jwt_without_sub_is_refused(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(backend, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin", "writer"]);
    create_research(&app, &admin).await;

    let mut claims = issuer.claims("ignored", &["writer"]);
    claims.as_object_mut().unwrap().remove("sub");
    let nameless = issuer.sign(&claims);
    let (status, body) = call(&app, Method::GET, "/v1/csv-jobs", &nameless, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.to_string().contains("no sub claim"), "{body}");

    let (status, made) = call(
        &app,
        Method::POST,
        "/v1/tokens",
        &admin,
        Some(json!({"kind": "service-account", "name": "loader", "grants": ["research=write"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let token = made["secret"].as_str().unwrap().to_owned();
    let token_id = made["token"]["id"].as_str().unwrap().to_owned();
    let id = submit(
        &app,
        Some(&token),
        "id,name\r\n1,someone\r\n",
        spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "research"),
    )
    .await;
    let impostor = issuer.token(&format!("token:{token_id}"), &["writer"]);
    let (status, _) = call(
        &app,
        Method::GET,
        &format!("/v1/csv-jobs/{id}"),
        &impostor,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, own) = call(&app, Method::GET, "/v1/csv-jobs", &impostor, None).await;
    assert_eq!(own["jobs"].as_array().map(Vec::len), Some(0), "{own}");
    let (status, _) = call(
        &app,
        Method::GET,
        &format!("/v1/csv-jobs/{id}"),
        &token,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// Without an audience every token of the provider was accepted, the UI's ID
/// tokens included: those are refused now (`typ: ID`, or the UI's client as
/// their only audience), and start-up says the audience is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_tokens_are_no_credential_for_the_api() {
    let issuer = OidcIssuer::start().await;
    let mut env: Vec<(String, String)> = secured_env(Backend::Sqlite, &issuer)
        .into_iter()
        .filter(|(k, _)| k != "Authorization__Audience")
        .collect();
    env.push(("Authorization__ClientId".into(), "vfps-ui".into()));
    env.push(("Authorization__ClientSecret".into(), "secret".into()));
    let log = vfps_testkit::scratch_dir("id-tokens").join("vfps.log");
    let server = crate::helpers::ServerProcess::start_logging(&env, &log).await;
    let with = |patch: Value| {
        let mut claims = issuer.claims("ada", &["admin"]);
        for (k, v) in patch.as_object().unwrap() {
            claims[k] = v.clone();
        }
        issuer.sign(&claims)
    };
    let client = reqwest::Client::new();
    let status_of = |token: String| {
        let client = client.clone();
        let url = format!("{}/v1/namespaces", server.http);
        async move {
            let r = client.get(url).bearer_auth(token).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    for (patch, why) in [
        (
            json!({"aud": "vfps-ui"}),
            "only audience is the admin UI's client",
        ),
        (
            json!({"aud": ["vfps-ui"]}),
            "only audience is the admin UI's client",
        ),
        (json!({"typ": "ID"}), "ID token"),
    ] {
        let (status, body) = status_of(with(patch.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{patch}: {body}");
        assert!(body.contains(why), "{patch}: {body}");
    }
    for patch in [
        json!({"aud": ["vfps-ui", "vfps"]}),
        json!({"typ": "Bearer"}),
    ] {
        let (status, body) = status_of(with(patch.clone())).await;
        assert_eq!(status, StatusCode::OK, "{patch}: {body}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("Authorization__Audience is not set"),
        "no warning at start-up:\n{text}"
    );
}

crate::on_both_backends!(
    an_admin_without_reverse_lookup_reaches_no_original_value,
    a_creator_who_lost_the_right_loses_the_output,
    callers_are_typed_and_a_jwt_without_sub_is_refused,
);
