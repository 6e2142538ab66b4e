//! The MII IG's own example instances (tests/mii-ig/fsh, converted to JSON by
//! scripts/fsh-instances.py into tests/mii-ig/examples.json): every request
//! example is answered in its response example's shape — the same parameters
//! and parts with the same value types, the same issue severity and code, a
//! Bundle's entries with the same status class and resources of that shape.
//! The pseudonyms themselves are this server's (the examples' are made up), so
//! a request naming an example pseudonym is sent with the one this server
//! made for the example's original.
//! `$pseudonymize-multiple`'s examples run in a multi-pseudonym namespace
//! (`MultiPsnDomain`).

use serde_json::{json, Value};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::helpers::{spawn_app, Backend, TestApp};

const HEX: i32 = 5;

fn examples() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mii-ig/examples.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("the IG's examples")).unwrap()
}

/// What a resource looks like, values aside.
fn shape(v: &Value) -> Value {
    let parameters = |params: &Value| -> Value {
        params
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        let kind = p
                            .as_object()
                            .and_then(|o| o.keys().find(|k| k.starts_with("value")).cloned());
                        match kind {
                            Some(k) => json!([p["name"], k]),
                            None => json!([
                                p["name"],
                                shape(
                                    &json!({"resourceType": "Parameters", "parameter": p["part"]})
                                )
                            ]),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    match v["resourceType"].as_str() {
        Some("Parameters") => parameters(&v["parameter"]),
        Some("OperationOutcome") => json!([v["issue"][0]["severity"], v["issue"][0]["code"]]),
        Some("Bundle") => json!({
            "type": v["type"],
            "entry": v["entry"].as_array().map(|es| es.iter().map(|e| json!([
                e["response"]["status"].as_str().map(|s| &s[..1]),
                shape(&e["resource"]),
            ])).collect::<Vec<_>>()),
        }),
        _ => v.clone(),
    }
}

async fn post(app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let r = app
        .http_client
        .post(format!("{}/v1/fhir{path}", app.http))
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn namespace(app: &TestApp, name: &str, deletable: bool) {
    namespace_of_kind(app, name, deletable, false).await;
}

async fn namespace_of_kind(app: &TestApp, name: &str, deletable: bool, multi: bool) {
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: name.into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: 10,
            pseudonym_deletion_allowed: Some(deletable),
            multi_pseudonym: Some(multi),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// `text` with every example pseudonym replaced by this server's.
fn with_pseudonyms(request: &Value, ours: &[(&str, &str)]) -> Value {
    let mut text = request.to_string();
    for (theirs, mine) in ours {
        text = text.replace(&format!("\"{theirs}\""), &format!("\"{mine}\""));
    }
    serde_json::from_str(&text).unwrap()
}

async fn every_request_example_is_answered_in_its_response_examples_shape(backend: Backend) {
    let ex = examples();
    let app = spawn_app(backend).await;
    namespace(&app, "Transfer1", true).await;
    namespace(&app, "pseudonym-domain", false).await;
    namespace(&app, "deletion-forbidden-domain", false).await;
    namespace_of_kind(&app, "MultiPsnDomain", false, true).await;
    for (ns, original) in [
        ("Transfer1", "D1CL0CAL2"),
        ("deletion-forbidden-domain", "D1CL0CAL3"),
    ] {
        app.create(ns, original).await.unwrap();
    }

    let single = [
        (
            "$pseudonymize",
            "PseudonymizeRequestWithIdentifierExample",
            "PseudonymizeIdentifierResponseExample",
        ),
        (
            "$get-pseudonym",
            "GetPseudonymRequestWithIdentifierExample",
            "GetPseudonymIdentifierResponseExample",
        ),
        (
            "$de-pseudonymize",
            "DePseudonymizeRequestWithIdentifierExample",
            "DePseudonymizeResponseWithIdentifierExample",
        ),
        (
            "$delete-pseudonym",
            "Parameters-DeletePseudonym-request-example-1",
            "OperationOutcome-DeletePseudonym-response-example-1",
        ),
    ];
    let mut ours = String::new();
    for (op, request, response) in single {
        let sent = with_pseudonyms(&ex[request], &[("H3RAU56A8E", &ours)]);
        let (status, answer) = post(&app, &format!("/{op}"), &sent).await;
        // 201 Created where the pseudonym is made now, as the IG's batch
        // examples answer.
        let made = op == "$pseudonymize";
        assert_eq!(status, if made { 201 } else { 200 }, "{request}: {answer}");
        assert_eq!(shape(&answer), shape(&ex[response]), "{request} → {answer}");
        if op == "$pseudonymize" {
            ours = answer["parameter"][2]["valueIdentifier"]["value"]
                .as_str()
                .unwrap()
                .to_owned();
        }
    }
    let (status, answer) = post(
        &app,
        "/$pseudonymize-multiple",
        &ex["Parameters-PseudonymizeMultiple-request-example-1"],
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        shape(&answer),
        shape(&ex["Parameters-PseudonymizeMultiple-response-example-1"]),
        "{answer}"
    );

    // The batch examples, in an order whose data each needs: the pseudonymize
    // batch makes what the get batch reads; D1CL0CAL1 exists (again) for the
    // de-pseudonymize and delete batches, and once more for the anonymize one.
    let fresh = app
        .create("Transfer1", "D1CL0CAL1")
        .await
        .unwrap()
        .pseudonym_value;
    for batch in [
        "pseudonymize",
        "get-pseudonym",
        "de-pseudonymize",
        "delete-pseudonym",
        "pseudonymize-multiple",
    ] {
        let request = &ex[format!("{batch}-example-bundle-batch-request")];
        let sent = with_pseudonyms(request, &[("H3RAU56A8E", &fresh)]);
        let (status, answer) = post(&app, "", &sent).await;
        assert_eq!(status, 200, "{batch}: {answer}");
        let mut expected = shape(&ex[format!("{batch}-example-bundle-batch-response")]);
        if batch == "de-pseudonymize" {
            // The ballot's batch example answers a de-pseudonymization as a
            // pseudonymization (context, original, pseudonym); its
            // OperationDefinition and single example answer `original` with
            // parts, as this server does.
            expected["entry"][0][1] = shape(&ex["DePseudonymizeResponseWithIdentifierExample"]);
        }
        if batch == "pseudonymize-multiple" {
            // The ballot's batch example asks for 2 pseudonyms and answers 3;
            // its OperationDefinition answers the count asked for.
            expected["entry"][0][1].as_array_mut().unwrap().truncate(2);
        }
        assert_eq!(shape(&answer), expected, "{batch} → {answer}");
    }
    anonymize_examples(backend, &ex).await;
}

/// The anonymize examples name D1CL0CAL1 in another identifier system
/// (`https://example.com/original-ids`) than the pseudonymize example does
/// (`https://sample/psn-system`): here, two subjects, and a namespace holds
/// one system's originals (docs/fhir.md), so the second is refused where the
/// first was pseudonymized. They run where D1CL0CAL1 was made without a
/// system (a gRPC Create), which their system then adopts.
async fn anonymize_examples(backend: Backend, ex: &Value) {
    let app = spawn_app(backend).await;
    namespace(&app, "Transfer1", true).await;
    app.create("Transfer1", "D1CL0CAL1").await.unwrap();
    let (status, answer) = post(
        &app,
        "/$anonymize-original",
        &ex["Parameters-AnonymizeOriginal-request-example-1"],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        shape(&answer),
        shape(&ex["OperationOutcome-AnonymizeOriginal-response-example-1"]),
        "{answer}"
    );
    app.create("Transfer1", "D1CL0CAL1").await.unwrap();
    let (status, answer) = post(
        &app,
        "",
        &ex["anonymize-original-example-bundle-batch-request"],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        shape(&answer),
        shape(&ex["anonymize-original-example-bundle-batch-response"]),
        "{answer}"
    );
}

crate::on_both_backends!(every_request_example_is_answered_in_its_response_examples_shape);
