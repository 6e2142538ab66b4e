//! The MII interface exactly as FHIR and the IG have it: 201 where a
//! pseudonym is made, 415 for a body that is not FHIR JSON, an
//! OperationOutcome for what no route takes, `transaction` in the
//! CapabilityStatement, a transaction's entries in FHIR's order, and what
//! the FHIR pseudonymizer (miracum/fhir-pseudonymizer, the real MII client)
//! sends, byte for byte, answered as it reads.

use reqwest::StatusCode;
use serde_json::{json, Value};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::{
    helpers::{spawn_app, Backend, TestApp},
    mii::{identifier, issue_code, named, namespace, parameters, post, HEX},
};

const CONTEXT: &str = "https://sample/psn-system";

fn ask(ns: &str, name: &str, value: &str) -> Value {
    parameters(&[
        ("context", identifier(CONTEXT, ns)),
        (name, identifier(CONTEXT, value)),
    ])
}

fn entry(url: &str, resource: Value) -> Value {
    json!({"request": {"method": "POST", "url": url}, "resource": resource})
}

fn transaction(entries: Vec<Value>) -> Value {
    json!({"resourceType": "Bundle", "type": "transaction", "entry": entries})
}

async fn raw(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (StatusCode, Option<String>, String) {
    let mut r = app
        .http_client
        .request(method, format!("{}{path}", app.http))
        .body(body.to_owned());
    if let Some(t) = content_type {
        r = r.header("content-type", t);
    }
    let response = r.send().await.unwrap();
    let status = response.status();
    let ct = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, ct, response.text().await.unwrap())
}

async fn statuses_and_refusals_are_fhirs(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "n", HEX, 16, false).await;
    let body = ask("n", "original", "a").to_string();

    // Made now: 201; found: 200.
    let (status, _, _) = raw(
        &app,
        reqwest::Method::POST,
        "/v1/fhir/$pseudonymize",
        Some("application/fhir+json"),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = raw(
        &app,
        reqwest::Method::POST,
        "/v1/fhir/$pseudonymize",
        Some("application/fhir+json"),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Not FHIR JSON by its Content-Type: 415, naming what came; FHIR JSON
    // with parameters, plain JSON and DSTU2's type are taken.
    for given in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/fhir+xml"),
    ] {
        let (status, ct, text) = raw(
            &app,
            reqwest::Method::POST,
            "/v1/fhir/$pseudonymize",
            given,
            &body,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{given:?}: {text}"
        );
        assert_eq!(ct.as_deref(), Some("application/fhir+json"));
        let outcome: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(issue_code(&outcome), "not-supported", "{outcome}");
        assert!(text.contains("Content-Type"), "{text}");
    }
    for taken in [
        "application/fhir+json; charset=utf-8",
        "application/json",
        "application/json+fhir; fhirVersion=4.0",
    ] {
        let (status, _, text) = raw(
            &app,
            reqwest::Method::POST,
            "/v1/fhir/$pseudonymize",
            Some(taken),
            &body,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{taken}: {text}");
    }

    // What no route takes is an OperationOutcome, not an empty body.
    for (method, path, status) in [
        (
            reqwest::Method::POST,
            "/v1/fhir/$no-such-operation",
            StatusCode::NOT_FOUND,
        ),
        (
            reqwest::Method::GET,
            "/v1/fhir/$pseudonymize",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            reqwest::Method::DELETE,
            "/v1/fhir",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            reqwest::Method::POST,
            "/v1/fhir/metadata",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ] {
        let (got, ct, text) = raw(
            &app,
            method.clone(),
            path,
            Some("application/fhir+json"),
            &body,
        )
        .await;
        assert_eq!(got, status, "{method} {path}: {text}");
        assert_eq!(
            ct.as_deref(),
            Some("application/fhir+json"),
            "{method} {path}"
        );
        let outcome: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(issue_code(&outcome), "not-supported", "{outcome}");
        assert!(text.contains(path), "{text}");
    }

    // The CapabilityStatement says transactions are taken.
    let metadata = app.get_json("/v1/fhir/metadata").await;
    let interactions: Vec<&str> = metadata["rest"][0]["interaction"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["code"].as_str().unwrap())
        .collect();
    assert_eq!(interactions, ["batch", "transaction"]);
}

async fn a_transaction_runs_in_fhirs_order_and_refuses_with_the_right_reason(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "tx", HEX, 16, false).await;
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "multi".into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: 16,
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();

    // A $get-pseudonym after a $pseudonymize of the same original sees it.
    let (status, answer) = post(
        &app,
        None,
        "",
        &transaction(vec![
            entry("$pseudonymize", ask("tx", "original", "fresh")),
            entry("$get-pseudonym", ask("tx", "original", "fresh")),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let entries = answer["entry"].as_array().unwrap();
    assert_eq!(entries[0]["response"]["status"], "201 Created", "{answer}");
    assert_eq!(entries[1]["response"]["status"], "200 OK", "{answer}");
    let pseudonym =
        |e: &Value| named(&e["resource"], "pseudonym")["valueIdentifier"]["value"].clone();
    assert_eq!(pseudonym(&entries[0]), pseudonym(&entries[1]));
    // Before it, it does not (and the transaction changes nothing).
    let (status, answer) = post(
        &app,
        None,
        "",
        &transaction(vec![
            entry("$get-pseudonym", ask("tx", "original", "later")),
            entry("$pseudonymize", ask("tx", "original", "later")),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");

    // $pseudonymize-multiple: not part of a transaction, and not because it
    // erases.
    let multiple = parameters(&[
        ("context", identifier(CONTEXT, "multi")),
        ("original", identifier(CONTEXT, "m")),
        ("count", json!(2)),
    ]);
    let (status, outcome) = post(
        &app,
        None,
        "",
        &transaction(vec![entry("$pseudonymize-multiple", multiple)]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{outcome}");
    assert_eq!(issue_code(&outcome), "not-supported");
    let said = outcome["issue"][0]["diagnostics"].as_str().unwrap();
    assert!(
        said.contains("$pseudonymize-multiple cannot be part of a transaction"),
        "{said}"
    );
    assert!(!said.contains("erasure"), "{said}");
    // A $pseudonymize into a multi-pseudonym namespace: refused as on its
    // own (405, naming the namespace and the operation to use).
    let (status, outcome) = post(
        &app,
        None,
        "",
        &transaction(vec![entry("$pseudonymize", ask("multi", "original", "m"))]),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{outcome}");
    assert_eq!(issue_code(&outcome), "not-supported");
    let said = outcome["issue"][0]["diagnostics"].as_str().unwrap();
    assert!(
        said.starts_with("entry 0:")
            && said.contains("multi")
            && said.contains("$pseudonymize-multiple"),
        "{said}"
    );
}

/// The FHIR pseudonymizer's MII client (`MiiFhirClient`, Firely SDK): a
/// POST per value to `{base}$pseudonymize` and `{base}$de-pseudonymize`,
/// `target`/`original`/`pseudonym` as `valueString`s and `allowCreate`, with
/// the SDK's headers. It reads exactly one top-level `pseudonym` with a
/// `valueString`, and `original.part[name=value]`'s string or Identifier
/// value; any 2xx is success, anything else an error with an
/// OperationOutcome.
async fn the_fhir_pseudonymizers_requests_are_answered_as_it_reads_them(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "Patient", HEX, 16, false).await;
    let send = |op: &'static str, body: &'static str| {
        app.http_client
            .post(format!("{}/v1/fhir/${op}", app.http))
            .header("content-type", "application/fhir+json; charset=utf-8")
            .header("accept", "application/fhir+json")
            .header("accept-charset", "utf-8")
            .header("user-agent", "firely-sdk-client/5.13.4")
            .body(body)
            .send()
    };
    let r = send(
        "pseudonymize",
        r#"{"resourceType":"Parameters","parameter":[{"name":"target","valueString":"Patient"},{"name":"original","valueString":"123"},{"name":"allowCreate","valueBoolean":true}]}"#,
    )
    .await
    .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(r.headers()["content-type"], "application/fhir+json");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["resourceType"], "Parameters");
    let pseudonyms: Vec<&Value> = answer["parameter"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "pseudonym")
        .collect();
    assert_eq!(
        pseudonyms.len(),
        1,
        "exactly one top-level pseudonym: {answer}"
    );
    let pseudonym = pseudonyms[0]["valueString"]
        .as_str()
        .expect("a valueString")
        .to_owned();
    assert_eq!(
        app.create("Patient", "123").await.unwrap().pseudonym_value,
        pseudonym
    );

    let body: &'static str = Box::leak(
        format!(r#"{{"resourceType":"Parameters","parameter":[{{"name":"target","valueString":"Patient"}},{{"name":"pseudonym","valueString":"{pseudonym}"}}]}}"#)
            .into_boxed_str(),
    );
    let r = send("de-pseudonymize", body).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let answer: Value = r.json().await.unwrap();
    let original = &answer["parameter"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "original")
        .expect("original")["part"];
    let value = original
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "value")
        .expect("its value part");
    assert_eq!(value["valueString"], "123", "{answer}");

    // An unknown pseudonym: not 2xx, with an OperationOutcome it parses.
    let r = send(
        "de-pseudonymize",
        r#"{"resourceType":"Parameters","parameter":[{"name":"target","valueString":"Patient"},{"name":"pseudonym","valueString":"no-such-pseudonym"}]}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()["content-type"], "application/fhir+json");
    let outcome: Value = r.json().await.unwrap();
    assert_eq!(issue_code(&outcome), "not-found");
}

crate::on_both_backends!(
    statuses_and_refusals_are_fhirs,
    a_transaction_runs_in_fhirs_order_and_refuses_with_the_right_reason,
    the_fhir_pseudonymizers_requests_are_answered_as_it_reads_them,
);
