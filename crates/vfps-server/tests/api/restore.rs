//! After a restore (docs/backup.md): while a hold is open, a Create of an
//! original the database does not know is refused with FAILED_PRECONDITION
//! (it could mint a second pseudonym for a subject the restore forgot), while
//! re-Creates of known originals and reads go on; `vfps restore confirm`
//! checks the database, refuses while a check fails, and lifts the hold.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::Code;
use vfps_proto::v1::{NamespaceServiceCreateRequest, PseudonymServiceGetRequest};
use vfps_server::restore_cli::{run, RestoreAction};
use vfps_store::postgres::{npgsql, PgStore};

use crate::helpers::{backend_env, spawn_app_with, Backend, ServerProcess};

fn store(env: &[(String, String)]) -> PgStore {
    let conn = env
        .iter()
        .find(|(k, _)| k == "ConnectionStrings__PostgreSQL")
        .map(|(_, v)| v.clone())
        .unwrap();
    PgStore::new(&npgsql::parse(&conn, None, None).unwrap().options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_database_refuses_new_originals_until_the_restore_is_confirmed() {
    let (env, database) = backend_env(Backend::Postgres);
    let app = spawn_app_with(env.clone()).await;
    app.namespace("restored", 1, 16).await;
    let known = app.create("restored", "known").await.unwrap();
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "restored-multi".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 16,
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let (status, _) = multiple(&app, 1).await;
    assert_eq!(status, StatusCode::CREATED);
    let store = store(&env);

    run(
        &store,
        RestoreAction::Hold {
            restored_to: "latest".into(),
        },
    )
    .await
    .unwrap();
    // A server started on the held database says so, and what it checked.
    let log = vfps_testkit::scratch_dir("restore-log").join("vfps.log");
    let server = ServerProcess::start_logging(&env, &log).await;
    let said = vfps_testkit::wait_for(std::time::Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("awaits `vfps restore confirm`")
            && text.contains("pseudonyms unique per namespace")
    });
    assert!(
        said,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    drop(server);
    let refused = app.create("restored", "new").await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("the database was restored from a backup")
            && refused.message().contains("vfps restore confirm"),
        "the hold's own words, not a database error code: {}",
        refused.message()
    );
    // The hold on every protocol: gRPC FAILED_PRECONDITION (above); REST and
    // FHIR 409 Conflict, the operator's to lift, not the request's to mend
    // (FHIR answered 405 "not-supported", REST 400).
    let rest = app
        .http_client
        .post(format!("{}/v1/namespaces/restored/pseudonyms", app.http))
        .json(&serde_json::json!({"originalValue": "new"}))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), StatusCode::CONFLICT);
    let fhir = app
        .http_client
        .post(format!("{}/v1/fhir/$pseudonymize", app.http))
        .json(
            &serde_json::json!({"resourceType": "Parameters", "parameter": [
            {"name": "context", "valueIdentifier": {"value": "restored"}},
            {"name": "original", "valueIdentifier": {"value": "new"}}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(fhir.status(), StatusCode::CONFLICT);
    let outcome: serde_json::Value = fhir.json().await.unwrap();
    assert_eq!(outcome["issue"][0]["code"], "conflict", "{outcome}");
    // In a multi-pseudonym namespace every new pseudonym is one the restore
    // may have forgotten giving to someone else: refused too, and reads go on.
    let (status, outcome) = multiple(&app, 1).await;
    assert_eq!(status, StatusCode::CONFLICT, "{outcome}");
    assert!(
        outcome.to_string().contains("vfps restore confirm"),
        "{outcome}"
    );
    let (status, answer) = multiple(&app, 0).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The subject the database still knows keeps its pseudonym, and reads go on.
    assert_eq!(app.create("restored", "known").await.unwrap(), known);
    let got = app
        .pseudonyms
        .clone()
        .get(PseudonymServiceGetRequest {
            namespace: "restored".into(),
            pseudonym_value: known.pseudonym_value.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        got.into_inner()
            .pseudonym
            .unwrap()
            .original_value
            .as_deref(),
        Some("known")
    );

    // A check that fails keeps the hold.
    let cluster = vfps_testkit::shared();
    let database = database.unwrap();
    cluster
        .psql(
            &database,
            "INSERT INTO namespaces (name, pseudonym_generation_method, pseudonym_length, \
             created_at, last_updated_at, uid) VALUES ('no-uid', 1, 16, now(), now(), 0)",
        )
        .unwrap();
    let e = run(&store, RestoreAction::Confirm).await.unwrap_err();
    assert!(e.to_string().contains("namespace identities"), "{e:#}");
    assert_eq!(
        app.create("restored", "new").await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    cluster
        .psql(&database, "DELETE FROM namespaces WHERE name = 'no-uid'")
        .unwrap();

    run(&store, RestoreAction::Confirm).await.unwrap();
    let holds = store.restore_holds().await.unwrap();
    assert!(holds.iter().all(|h| h.confirmed), "{holds:?}");
    // The trigger is gone with the hold: nothing is left to cost a Create.
    let triggers = cluster
        .psql(
            &database,
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'vfps_restore_hold'",
        )
        .unwrap();
    assert_eq!(triggers.trim(), "0");
    app.create("restored", "new").await.unwrap();
    assert_eq!(multiple(&app, 1).await.0, StatusCode::CREATED);
}

/// `$pseudonymize-multiple` of one original in `restored-multi`.
async fn multiple(app: &crate::helpers::TestApp, count: i64) -> (StatusCode, Value) {
    let id = |v: &str| json!({"system": "https://sample/system", "value": v});
    let body = json!({"resourceType": "Parameters", "parameter": [
        {"name": "context", "valueIdentifier": id("restored-multi")},
        {"name": "original", "valueIdentifier": id("subject")},
        {"name": "count", "valueInteger": count},
    ]});
    let r = app
        .http_client
        .post(format!("{}/v1/fhir/$pseudonymize-multiple", app.http))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}
