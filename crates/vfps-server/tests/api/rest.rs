//! REST in proto3 JSON: shapes and errors.

use serde_json::{json, Value};

use crate::helpers::{spawn_app, Backend};

async fn rest_routes_speak_proto3_json(backend: Backend) {
    let app = spawn_app(backend).await;
    let c = &app.http_client;
    let url = |p: &str| format!("{}{p}", app.http);

    // Enum by name, camelCase fields.
    let r = c
        .post(url("/v1/namespaces"))
        .json(&json!({"name": "rest", "pseudonymGenerationMethod": "PSEUDONYM_GENERATION_METHOD_FULL_RANDOM_HEX_ENCODED", "pseudonymLength": 12, "pseudonymSuffix": "-x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["namespace"]["name"], "rest");
    assert_eq!(
        body["namespace"]["pseudonymGenerationMethod"],
        "PSEUDONYM_GENERATION_METHOD_FULL_RANDOM_HEX_ENCODED"
    );
    assert_eq!(body["namespace"]["pseudonymSuffix"], "-x");
    let created_at = body["namespace"]["meta"]["createdAt"].as_str().unwrap();
    assert!(
        created_at.starts_with("20") && created_at.contains('T') && created_at.ends_with('Z'),
        "RFC 3339 in UTC with Z, as protobuf's JSON mapping writes it: {created_at}"
    );

    // Enum by number.
    let r = c
        .post(url("/v1/namespaces"))
        .json(&json!({"name": "num", "pseudonymGenerationMethod": 3, "pseudonymLength": 36}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let all: Value = app.get_json("/v1/namespaces").await;
    assert_eq!(all["namespaces"].as_array().unwrap().len(), 2);
    let one: Value = app.get_json("/v1/namespaces/rest").await;
    assert_eq!(one["namespace"]["pseudonymLength"], 12);

    let p: Value = app
        .post_json(
            "/v1/namespaces/rest/pseudonyms",
            &json!({"originalValue": "subject-1"}),
        )
        .await;
    let pseudonym = p["pseudonym"]["pseudonymValue"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(pseudonym.ends_with("-x") && pseudonym.len() == 14);
    assert_eq!(p["pseudonym"]["originalValue"], "subject-1");

    let back: Value = app
        .get_json(&format!("/v1/namespaces/rest/pseudonyms/{pseudonym}"))
        .await;
    assert_eq!(back["pseudonym"]["originalValue"], "subject-1");

    let list: Value = c
        .get(url(
            "/v1/namespaces/rest/pseudonyms?pageSize=5&includeTotalSize=true",
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["totalSize"], "1", "int64 is a string in proto3 JSON");
    assert!(list["pseudonyms"][0].get("originalValue").is_none());

    let r = c.delete(url("/v1/namespaces/num")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({}));
}

async fn rest_errors_carry_the_grpc_code_and_http_status(backend: Backend) {
    let app = spawn_app(backend).await;
    let c = &app.http_client;
    let url = |p: &str| format!("{}{p}", app.http);
    app.namespace("n", 5, 8).await;
    let cases = [
        (c.get(url("/v1/namespaces/nope")), 404, 5),
        (c.delete(url("/v1/namespaces/nope")), 404, 5),
        (c.post(url("/v1/namespaces")).body("{not json"), 400, 3),
        (
            c.post(url("/v1/namespaces"))
                .json(&json!({"name": "z", "pseudonymLength": 0})),
            400,
            11,
        ),
        (
            c.post(url("/v1/namespaces"))
                .json(&json!({"name": "n", "pseudonymLength": 8})),
            409,
            6,
        ),
        (
            c.post(url("/v1/namespaces/n/pseudonyms"))
                .json(&json!({"originalValue": " "})),
            400,
            3,
        ),
        (
            c.post(url("/v1/namespaces/nope/pseudonyms"))
                .json(&json!({"originalValue": "x"})),
            404,
            5,
        ),
        (c.get(url("/v1/namespaces/n/pseudonyms/unknown")), 404, 5),
        (
            c.get(url("/v1/namespaces/n/pseudonyms?pageSize=abc")),
            400,
            3,
        ),
        (
            c.get(url("/v1/namespaces/n/pseudonyms?pageToken=%25%25")),
            400,
            3,
        ),
        // A path segment that is not UTF-8 once decoded: axum's refusal, in
        // the JSON error body too.
        (c.get(url("/v1/namespaces/n/pseudonyms/%C3%28")), 400, 3),
        (c.delete(url("/v1/namespaces/%E2%82")), 400, 3),
    ];
    for (request, status, code) in cases {
        let r = request.send().await.unwrap();
        let got_status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (got_status, body["code"].as_i64()),
            (status, Some(code)),
            "{body}"
        );
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

/// Upstream's JSON transcoding skips fields it does not know; a wrong type is
/// still refused.
async fn rest_bodies_skip_unknown_fields_but_not_wrong_types(backend: Backend) {
    let app = spawn_app(backend).await;
    let c = &app.http_client;
    let url = |p: &str| format!("{}{p}", app.http);
    let r = c
        .post(url("/v1/namespaces"))
        .json(&json!({"name": "n", "pseudonymGenerationMethod": 5, "pseudonymLength": 8, "labels": {"team": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = c
        .post(url("/v1/namespaces/n/pseudonyms"))
        .json(&json!({"originalValue": "someone", "clientVersion": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = c
        .post(url("/v1/namespaces/n/pseudonyms"))
        .json(&json!({"originalValue": 42}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

crate::on_both_backends!(
    rest_routes_speak_proto3_json,
    rest_errors_carry_the_grpc_code_and_http_status,
    rest_bodies_skip_unknown_fields_but_not_wrong_types
);
