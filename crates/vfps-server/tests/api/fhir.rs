//! FHIR `$create-pseudonym` and the CapabilityStatement.

use serde_json::{json, Value};

use crate::helpers::{spawn_app, Backend};

fn parameters(namespace: &str, original: &str) -> Value {
    json!({"resourceType": "Parameters", "parameter": [
        {"name": "namespace", "valueString": namespace},
        {"name": "originalValue", "valueString": original},
    ]})
}

fn param<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body["parameter"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?["valueString"]
        .as_str()
}

async fn fhir_create_pseudonym_answers_parameters(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("fhir", 3, 36).await;
    let url = format!("{}/v1/fhir/$create-pseudonym", app.http);
    let r = app
        .http_client
        .post(&url)
        .json(&parameters("fhir", "subject"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/fhir+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["resourceType"], "Parameters");
    assert_eq!(param(&body, "namespace"), Some("fhir"));
    assert_eq!(param(&body, "originalValue"), Some("subject"));
    let pseudonym = param(&body, "pseudonymValue").unwrap();
    assert_eq!(pseudonym.len(), 36);
    let grpc = app.create("fhir", "subject").await.unwrap();
    assert_eq!(
        grpc.pseudonym_value, pseudonym,
        "FHIR and gRPC share the mapping"
    );
}

async fn fhir_errors_are_operation_outcomes(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("fhir", 3, 36).await;
    let url = format!("{}/v1/fhir/$create-pseudonym", app.http);
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        // Not FHIR JSON by its Content-Type (none, or another): 415.
        (
            app.http_client.post(&url).body("nope"),
            415,
            "not-supported",
        ),
        (
            app.http_client
                .post(&url)
                .header("content-type", "text/plain")
                .body("{}"),
            415,
            "not-supported",
        ),
        (
            app.http_client
                .post(&url)
                .header("content-type", "application/fhir+json; charset=utf-8")
                .body("nope"),
            400,
            "invalid",
        ),
        (
            app.http_client
                .post(&url)
                .json(&json!({"resourceType": "Patient"})),
            400,
            "invalid",
        ),
        (
            app.http_client
                .post(&url)
                .json(&json!({"resourceType": "Parameters", "parameter": []})),
            400,
            "invalid",
        ),
        (
            app.http_client.post(&url).json(&parameters("fhir", "  ")),
            400,
            "invalid",
        ),
        (
            app.http_client.post(&url).json(&parameters("unknown", "x")),
            404,
            "not-found",
        ),
    ];
    for (request, status, code) in cases {
        let r = request.send().await.unwrap();
        assert_eq!(r.status().as_u16(), status);
        assert_eq!(r.headers()["content-type"], "application/fhir+json");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["resourceType"], "OperationOutcome");
        assert_eq!(body["issue"][0]["severity"], "error");
        assert_eq!(body["issue"][0]["code"], code, "{body}");
    }
    let meta: Value = app.get_json("/v1/fhir/metadata").await;
    assert_eq!(meta["resourceType"], "CapabilityStatement");
    assert_eq!(meta["fhirVersion"], "4.0.1");
}

crate::on_both_backends!(
    fhir_create_pseudonym_answers_parameters,
    fhir_errors_are_operation_outcomes
);
