//! Every right has an end: a minted token ends with the credential that
//! minted it, every API call is authenticated before its body is read, only
//! a job's creator feeds and starts it, deleting a namespace with
//! pseudonyms is an erasure of them, an ID token is never an access token,
//! and a transaction's lookup that never reached the caller is audited as
//! not revealed.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tonic::Code;
use vfps_testkit::oidc::OidcIssuer;

use crate::{
    auth::{grpc_create, grpc_create_namespace, rest, secured_env},
    helpers::{spawn_app_with, Backend},
    jobs::{input, spec, with_jobs_dir},
};

/// Seconds since the epoch of a UTC RFC 3339 time as the API writes it
/// (`2026-12-07T10:00:00Z`, fractions ignored).
fn unix(rfc3339: &str) -> u64 {
    let n = |a: usize, b: usize| rfc3339[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    (days * 86400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19)) as u64
}

async fn a_minted_token_ends_with_the_credential_that_minted_it(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let app = spawn_app_with(secured_env(backend, &issuer)).await;
    // The admin's JWT is valid for five minutes.
    let claims = issuer.claims("root", &["admin", "writer"]);
    let jwt_exp = claims["exp"].as_u64().unwrap();
    let admin = issuer.sign(&claims);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    for asked in [json!(30 * 24 * 3600), Value::Null] {
        let mut body =
            json!({"kind": "service-account", "name": "loader", "grants": ["research=write"]});
        if !asked.is_null() {
            body["expiresInSeconds"] = asked.clone();
        }
        let (status, created) =
            rest(&app, Method::POST, "/v1/tokens", Some(&admin), Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{created}");
        let expires = created["token"]["expiresAt"].as_str().unwrap_or_else(|| {
            panic!("asked {asked}: a token without an end outlives its minter: {created}")
        });
        assert!(
            unix(expires) <= jwt_exp + 60,
            "asked {asked}: the token ends at {expires}, after its minter's credential ({jwt_exp})"
        );
    }
    // A token minted by a token ends with it too.
    let (_, minter) = rest(
        &app,
        Method::POST,
        "/v1/tokens",
        Some(&admin),
        Some(
            json!({"kind": "service-account", "name": "minter", "admin": true,
                    "grants": ["research=write"], "expiresInSeconds": 120}),
        ),
    )
    .await;
    let minter_secret = minter["secret"].as_str().unwrap().to_owned();
    let minter_end = unix(minter["token"]["expiresAt"].as_str().unwrap());
    let (status, child) = rest(
        &app,
        Method::POST,
        "/v1/tokens",
        Some(&minter_secret),
        Some(json!({"kind": "service-account", "name": "child", "grants": ["research=write"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{child}");
    assert_eq!(
        unix(child["token"]["expiresAt"].as_str().unwrap()),
        minter_end
    );
}

async fn every_api_call_is_authenticated_before_its_body_is_read(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(backend, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    for (method, path, content_type) in [
        (Method::POST, "/v1/csv-jobs", "application/json"),
        (Method::PUT, "/v1/csv-jobs/someid/input", "text/csv"),
        (Method::POST, "/v1/namespaces", "application/json"),
        (
            Method::POST,
            "/v1/namespaces/research/pseudonyms",
            "application/json",
        ),
        (Method::POST, "/v1/tokens", "application/json"),
        (
            Method::POST,
            "/v1/fhir/$pseudonymize",
            "application/fhir+json",
        ),
        (Method::POST, "/v1/fhir", "application/fhir+json"),
        (
            Method::POST,
            "/v1/fhir/$create-pseudonym",
            "application/fhir+json",
        ),
    ] {
        let r = app
            .http_client
            .request(method.clone(), format!("{}{path}", app.http))
            .header("content-type", content_type)
            .body("{ this is not a valid body")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{method} {path}");
        let text = r.text().await.unwrap();
        assert!(
            !text.contains("JSON") && !text.contains("parse"),
            "{method} {path}: the body was read: {text}"
        );
    }
    // The CapabilityStatement stays public.
    let r = app
        .http_client
        .get(format!("{}/v1/fhir/metadata", app.http))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// An admin sees and may cancel or delete anyone's job, but only its
/// creator uploads its input and starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_cannot_feed_or_start_another_users_job() {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(Backend::Sqlite, &issuer);
    with_jobs_dir(&mut env);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin", "writer"]);
    let writer = issuer.token("w", &["writer"]);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    let (status, created) = rest(
        &app,
        Method::POST,
        "/v1/csv-jobs",
        Some(&writer),
        Some(spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "research")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let upload = created["upload"]["url"].as_str().unwrap().to_owned();
    let r = app
        .http_client
        .put(format!("{}{upload}", app.http))
        .bearer_auth(&admin)
        .body(input(5))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "an admin uploaded another's input"
    );
    let r = app
        .http_client
        .put(format!("{}{upload}", app.http))
        .bearer_auth(&writer)
        .body(input(5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (status, refused) = rest(
        &app,
        Method::POST,
        &format!("/v1/csv-jobs/{id}:start"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(
        refused.to_string().contains("only its creator"),
        "{refused}"
    );
    let (status, _) = rest(
        &app,
        Method::GET,
        &format!("/v1/csv-jobs/{id}"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "an admin still sees it");
    let (status, _) = rest(
        &app,
        Method::POST,
        &format!("/v1/csv-jobs/{id}:start"),
        Some(&writer),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

async fn deleting_a_namespace_with_pseudonyms_is_an_erasure(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(backend, &issuer);
    env.push((
        "Authorization__NamespaceRules__0__EraseRoles__0".into(),
        "eraser".into(),
    ));
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin", "writer"]);
    let admin_eraser = issuer.token("root", &["admin", "eraser"]);
    for ns in ["research", "empty"] {
        assert_eq!(
            grpc_create_namespace(&app, Some(&admin), ns).await,
            Code::Ok
        );
    }
    for i in 0..3 {
        grpc_create(&app, Some(&admin), "research", &format!("subject-{i}"))
            .await
            .unwrap();
    }
    // An admin alone deletes an empty namespace, not one with pseudonyms.
    let (status, _) = rest(
        &app,
        Method::DELETE,
        "/v1/namespaces/empty",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) = rest(
        &app,
        Method::DELETE,
        "/v1/namespaces/research",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("erases its 3 pseudonyms") && said.contains("erase permission"),
        "{said}"
    );
    let (status, _) = rest(
        &app,
        Method::DELETE,
        "/v1/namespaces/research",
        Some(&admin_eraser),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Audited as an erasure too.
    let metrics = app.metrics_text().await;
    for line in [
        "vfps_audit_events_total{operation=\"NamespaceService/Delete\",outcome=\"allowed\"} 2",
        "vfps_audit_events_total{operation=\"NamespaceService/Delete\",outcome=\"denied\"} 1",
        "vfps_audit_events_total{operation=\"Pseudonyms/Erase\",outcome=\"allowed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

/// With the API's audience set to the UI's client (a setting that makes the
/// UI's tokens the API's), the UI's ID tokens are still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_token_is_never_an_access_token() {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(Backend::Sqlite, &issuer);
    env.retain(|(k, _)| k != "Authorization__Audience");
    env.push(("Authorization__Audience".into(), "vfps-ui".into()));
    env.push(("Authorization__ClientId".into(), "vfps-ui".into()));
    let app = spawn_app_with(env).await;
    let mut claims = issuer.claims("root", &["admin"]);
    claims["aud"] = json!("vfps-ui");
    let access = issuer.sign(&claims);
    assert_eq!(
        grpc_create_namespace(&app, Some(&access), "a").await,
        Code::Ok
    );
    for (claim, value) in [
        ("nonce", json!("n-1")),
        ("at_hash", json!("h")),
        ("c_hash", json!("h")),
    ] {
        let mut id = claims.clone();
        id[claim] = value;
        let id_token = issuer.sign(&id);
        assert_eq!(
            grpc_create_namespace(&app, Some(&id_token), "b").await,
            Code::Unauthenticated,
            "an ID token (with {claim}) was taken for an access token"
        );
    }
}

/// A transaction's `$de-pseudonymize` answered, but the transaction failed
/// later: nothing reached the caller, and the audit trail says so.
async fn a_failed_transactions_lookup_is_audited_as_not_revealed(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let app = spawn_app_with(secured_env(backend, &issuer)).await;
    let admin = issuer.token("root", &["admin", "writer", "trustee"]);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    let p = grpc_create(&app, Some(&admin), "research", "subject")
        .await
        .unwrap();
    let ask = |name: &str, value: &str| {
        json!({"resourceType": "Parameters", "parameter": [
        {"name": "context", "valueIdentifier": {"value": "research"}},
        {"name": name, "valueIdentifier": {"value": value}}]})
    };
    let entry = |url: &str, resource: Value| json!({"request": {"method": "POST", "url": url}, "resource": resource});
    let post = |body: Value| {
        app.http_client
            .post(format!("{}/v1/fhir", app.http))
            .bearer_auth(&admin)
            .header("content-type", "application/fhir+json")
            .json(&body)
            .send()
    };
    let failed = post(
        json!({"resourceType": "Bundle", "type": "transaction", "entry": [
            entry("$de-pseudonymize", ask("pseudonym", &p)),
            entry("$get-pseudonym", ask("original", "no-such-original")),
        ]}),
    )
    .await
    .unwrap();
    assert_eq!(failed.status(), StatusCode::NOT_FOUND);
    let answered = post(
        json!({"resourceType": "Bundle", "type": "transaction", "entry": [
            entry("$de-pseudonymize", ask("pseudonym", &p)),
        ]}),
    )
    .await
    .unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let metrics = app.metrics_text().await;
    for line in [
        "vfps_audit_events_total{operation=\"PseudonymService/Get\",outcome=\"allowed\"} 1",
        "vfps_audit_events_total{operation=\"PseudonymService/Get\",outcome=\"failed\"} 1",
    ] {
        assert!(
            metrics.contains(line),
            "{line} missing:\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("audit"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

crate::on_both_backends!(
    a_minted_token_ends_with_the_credential_that_minted_it,
    every_api_call_is_authenticated_before_its_body_is_read,
    deleting_a_namespace_with_pseudonyms_is_an_erasure,
    a_failed_transactions_lookup_is_audited_as_not_revealed,
);
