//! Whose originals: a namespace holds the values of one identifier system, so
//! equal values of two systems are never given one pseudonym, and
//! `$de-pseudonymize` gives the original back in its own system.

use reqwest::StatusCode;
use serde_json::{json, Value};
use vfps_proto::v1::{NamespaceServiceCreateRequest, NamespaceServiceGetRequest};

use crate::{
    helpers::{spawn_app, Backend, TestApp},
    mii::{identifier, issue_code, named, namespace, parameters, post, HEX},
};

const HOSPITAL: &str = "https://hospital-a.example/pid";
const LAB: &str = "https://lab-b.example/sample-id";
const CONTEXT: &str = "https://sample/psn-system";

fn pseudonymize(ns: &str, original: Value) -> Value {
    parameters(&[("context", identifier(CONTEXT, ns)), ("original", original)])
}

async fn system_of(app: &TestApp, ns: &str) -> Option<String> {
    app.namespaces
        .clone()
        .get(NamespaceServiceGetRequest { name: ns.into() })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap()
        .original_system
}

/// The refusal names both systems and the namespace, never the value.
fn assert_refused(status: StatusCode, outcome: &Value, ns: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{outcome}");
    assert_eq!(issue_code(outcome), "invalid", "{outcome}");
    let said = outcome["issue"][0]["diagnostics"].as_str().unwrap();
    for named in [HOSPITAL, LAB, ns] {
        assert!(said.contains(named), "{named} not named: {said}");
    }
    assert!(!said.contains("4711"), "the value in the outcome: {said}");
}

async fn two_systems_with_one_value_are_two_subjects_or_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "ids", HEX, 16, true).await;
    let (status, first) = post(
        &app,
        None,
        "$pseudonymize",
        &pseudonymize("ids", identifier(HOSPITAL, "4711")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let p = named(&first, "pseudonym")["valueIdentifier"]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        system_of(&app, "ids").await.as_deref(),
        Some(HOSPITAL),
        "adopted"
    );

    // The laboratory's sample 4711 is another person: refused, not linked,
    // on every operation that takes an original.
    for op in [
        "$pseudonymize",
        "$get-pseudonym",
        "$delete-pseudonym",
        "$anonymize-original",
    ] {
        let (status, refused) = post(
            &app,
            None,
            op,
            &pseudonymize("ids", identifier(LAB, "4711")),
        )
        .await;
        assert_refused(status, &refused, "ids");
    }
    let (status, refused) = post(
        &app,
        None,
        "$pseudonymize-multiple",
        &parameters(&[
            ("context", identifier(CONTEXT, "ids")),
            ("original", identifier(LAB, "4711")),
            ("count", json!(1)),
        ]),
    )
    .await;
    assert_refused(status, &refused, "ids");
    // In a transaction too, which then changes nothing.
    let entry = |original: Value| {
        json!({"request": {"method": "POST", "url": "$pseudonymize"},
               "resource": pseudonymize("ids", original)})
    };
    let (status, refused) = post(
        &app,
        None,
        "",
        &json!({"resourceType": "Bundle", "type": "transaction", "entry": [
            entry(identifier(HOSPITAL, "4712")),
            entry(identifier(LAB, "4711")),
        ]}),
    )
    .await;
    assert_refused(status, &refused, "ids");
    let (status, _) = post(
        &app,
        None,
        "$get-pseudonym",
        &pseudonymize("ids", identifier(HOSPITAL, "4712")),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the transaction changed nothing"
    );
    // In a batch, the entry alone.
    let (status, batch) = post(
        &app,
        None,
        "",
        &json!({"resourceType": "Bundle", "type": "batch", "entry": [
            entry(identifier(LAB, "4711")),
            entry(identifier(HOSPITAL, "4711")),
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(
        batch["entry"][0]["response"]["status"], "400 Bad Request",
        "{batch}"
    );
    assert_eq!(
        named(&batch["entry"][1]["resource"], "pseudonym")["valueIdentifier"]["value"],
        p.as_str()
    );

    // De-pseudonymized, the original comes back as it was given: in its own
    // system, not the context's nor the pseudonym's.
    let (status, back) = post(
        &app,
        None,
        "$de-pseudonymize",
        &parameters(&[
            ("context", identifier(CONTEXT, "ids")),
            (
                "pseudonym",
                identifier("https://example.com/pseudonym-ids", &p),
            ),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{back}");
    assert_eq!(
        named(&back, "original")["part"][1]["valueIdentifier"],
        identifier(HOSPITAL, "4711")
    );
}

async fn originals_made_before_keep_their_pseudonyms_and_a_declared_system_holds_from_the_start(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    // Made without a system (gRPC, as before the rule): the first system
    // named adopts the entry, which keeps its pseudonym.
    namespace(&app, "legacy", HEX, 16, false).await;
    let before = app.create("legacy", "0815").await.unwrap().pseudonym_value;
    assert_eq!(system_of(&app, "legacy").await, None);
    let (status, same) = post(
        &app,
        None,
        "$pseudonymize",
        &pseudonymize("legacy", identifier(HOSPITAL, "0815")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(
        named(&same, "pseudonym")["valueIdentifier"]["value"],
        before.as_str()
    );
    // A value without a system is of the namespace's: gRPC and valueString
    // still answer it.
    assert_eq!(
        app.create("legacy", "0815").await.unwrap().pseudonym_value,
        before
    );
    let (_, string) = post(
        &app,
        None,
        "$pseudonymize",
        &parameters(&[("target", json!("legacy")), ("original", json!("0815"))]),
    )
    .await;
    assert_eq!(named(&string, "pseudonym")["valueString"], before.as_str());

    // Declared at creation: the first original of another system is refused.
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "declared".into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            original_system: Some(LAB.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(system_of(&app, "declared").await.as_deref(), Some(LAB));
    let (status, refused) = post(
        &app,
        None,
        "$pseudonymize",
        &pseudonymize("declared", identifier(HOSPITAL, "4711")),
    )
    .await;
    assert_refused(status, &refused, "declared");
    let (status, _) = post(
        &app,
        None,
        "$pseudonymize",
        &pseudonymize("declared", identifier(LAB, "4711")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // A system that is no URI is refused when declared.
    let bad = app
        .namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "bad".into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            original_system: Some("has spaces".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
}

crate::on_both_backends!(
    two_systems_with_one_value_are_two_subjects_or_refused,
    originals_made_before_keep_their_pseudonyms_and_a_declared_system_holds_from_the_start,
);
