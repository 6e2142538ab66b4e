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

crate::on_both_backends!(oversize_input_is_refused_with_its_code_and_fails_only_itself);
