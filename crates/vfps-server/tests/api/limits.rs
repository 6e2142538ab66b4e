//! Bounded input: every string has a documented maximum, whole messages and
//! bodies are capped before they are buffered, and an oversize call fails alone.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::Code;
use vfps_proto::v1::{
    NamespaceServiceCreateRequest, PseudonymServiceGetRequest, PseudonymServiceListRequest,
};

use crate::helpers::{spawn_app, Backend};

const HEX: i32 = 5;

async fn oversize_input_is_refused_with_its_code_and_fails_only_itself(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("n", HEX, 16).await;
    let huge = "x".repeat(100 * 1024);

    // Whole messages and bodies over VFPS_MAX_REQUEST_BYTES (64 KiB).
    let e = app.create("n", &huge).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    let r = app
        .http_client
        .post(format!("{}/v1/namespaces/n/pseudonyms", app.http))
        .json(&json!({"originalValue": huge}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], 11, "OUT_OF_RANGE, as over gRPC: {body}");
    let r = app
        .http_client
        .post(format!("{}/v1/fhir/$create-pseudonym", app.http))
        .json(&json!({"resourceType": "Parameters", "parameter": [
            {"name": "namespace", "valueString": "n"},
            {"name": "originalValue", "valueString": huge}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["resourceType"], "OperationOutcome", "{body}");

    // Fields over their own maxima, inside the cap: INVALID_ARGUMENT.
    let long = |n: usize| "y".repeat(n);
    let e = app.create("n", &long(2049)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = app
        .pseudonyms
        .clone()
        .get(PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: long(4097),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = app
        .pseudonyms
        .clone()
        .list(PseudonymServiceListRequest {
            namespace: "n".into(),
            page_token: long(8193),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("8192"), "{e:?}");
    for request in [
        NamespaceServiceCreateRequest {
            name: long(129),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            ..Default::default()
        },
        NamespaceServiceCreateRequest {
            name: "d".into(),
            description: long(4097),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            ..Default::default()
        },
        NamespaceServiceCreateRequest {
            name: "p".into(),
            pseudonym_prefix: Some(long(65)),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            ..Default::default()
        },
    ] {
        let e = app.namespaces.clone().create(request).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    }
    // The service goes on for everyone else.
    assert!(app.create("n", "innocent").await.is_ok());
}

/// One request's work is bounded whatever it asks: a Bundle whose entries'
/// counts pass 10,000 pseudonyms is refused whole before any entry runs,
/// and an original's pseudonyms are bounded, so a count of 0 is too.
async fn a_bundle_asking_for_too_many_pseudonyms_is_refused_whole(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "m".into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let multiple = |original: &str, count: i64| {
        json!({"request": {"method": "POST", "url": "$pseudonymize-multiple"},
               "resource": {"resourceType": "Parameters", "parameter": [
                   {"name": "context", "valueIdentifier": {"value": "m"}},
                   {"name": "original", "valueIdentifier": {"value": original}},
                   {"name": "count", "valueInteger": count}]}})
    };
    let bundle =
        |entries: Vec<Value>| json!({"resourceType": "Bundle", "type": "batch", "entry": entries});
    let post = |body: Value| {
        app.http_client
            .post(format!("{}/v1/fhir", app.http))
            .header("content-type", "application/fhir+json")
            .json(&body)
            .send()
    };
    // The attack as it was found: 300 entries of count 1000 (300,000
    // pseudonyms from a 95 kB body).
    let r = post(bundle(
        (0..300)
            .map(|i| multiple(&format!("o-{i}"), 1000))
            .collect(),
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let outcome: Value = r.json().await.unwrap();
    assert_eq!(outcome["issue"][0]["code"], "too-costly", "{outcome}");
    let said = outcome["issue"][0]["diagnostics"].as_str().unwrap();
    assert!(said.contains("300000") && said.contains("10000"), "{said}");
    // Nothing ran: o-0 has no pseudonym.
    let r = post(bundle(vec![multiple("o-0", 0)])).await.unwrap();
    let answer: Value = r.json().await.unwrap();
    assert_eq!(
        answer["entry"][0]["response"]["status"], "404 Not Found",
        "{answer}"
    );
    // Counts of 0 reserve an original's most; 11 of them pass the bound.
    let r = post(bundle(
        (0..11).map(|i| multiple(&format!("o-{i}"), 0)).collect(),
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // At the bound exactly: taken.
    let r = post(bundle(
        (0..10).map(|i| multiple(&format!("p-{i}"), 1000)).collect(),
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let answer: Value = r.json().await.unwrap();
    assert!(
        answer["entry"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["response"]["status"] == "201 Created"),
        "{}",
        answer["entry"][0]["response"]
    );
    // p-0 has 1000, the most an original may have: one more is refused,
    // naming the bound; all of them are still answered.
    let r = post(bundle(vec![multiple("p-0", 1), multiple("p-0", 0)]))
        .await
        .unwrap();
    let answer: Value = r.json().await.unwrap();
    assert_eq!(
        answer["entry"][0]["response"]["status"], "400 Bad Request",
        "{answer}"
    );
    let said = answer["entry"][0]["resource"]["issue"][0]["diagnostics"]
        .as_str()
        .unwrap();
    assert!(said.contains("at most 1000 pseudonyms"), "{said}");
    assert_eq!(
        answer["entry"][1]["resource"]["parameter"]
            .as_array()
            .unwrap()
            .len(),
        1000
    );
}

crate::on_both_backends!(
    oversize_input_is_refused_with_its_code_and_fails_only_itself,
    a_bundle_asking_for_too_many_pseudonyms_is_refused_whole,
);
