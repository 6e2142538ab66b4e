//! REST in proto3 JSON: shapes and errors.

use reqwest::header::CONTENT_TYPE;
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
    assert_eq!(
        list["totalSize"], 1,
        "int64 is a number, as upstream's transcoding writes it"
    );
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

/// Upstream answers through ASP.NET Core's gRPC JSON transcoding with the
/// default `GrpcJsonSettings`: a field at its default value is written (`""`,
/// `[]`), a field with presence (`optional`, a message) only when set, int64
/// as a number, fields in field-number order, as
/// `application/json; charset=utf-8`. Clients index into these answers
/// (`resp["nextPageToken"]`), so the text itself is compared.
async fn rest_answers_are_written_as_upstream_writes_them(backend: Backend) {
    let app = spawn_app(backend).await;
    let c = &app.http_client;
    let url = |p: &str| format!("{}{p}", app.http);
    // The `meta` object of an answer, as the answer wrote it.
    let meta = |text: &str, pointer: &str| {
        let v: Value = serde_json::from_str(text).unwrap();
        v.pointer(pointer).unwrap().to_string()
    };

    let all = upstream_text(app.get("/v1/namespaces").await).await;
    assert_eq!(all, r#"{"namespaces":[]}"#);

    // Upstream's Create stores what the request's getters return, and an
    // unset optional string reads as "": its namespaces carry "" for the
    // prefix and suffix as for the description.
    let r = c
        .post(url("/v1/namespaces"))
        .json(&json!({"name": "plain", "pseudonymGenerationMethod": "PSEUDONYM_GENERATION_METHOD_UUID4", "pseudonymLength": 36}))
        .send()
        .await
        .unwrap();
    let created = upstream_text(r).await;
    let namespace = |text: &str, pointer: &str| {
        format!(
            r#"{{"meta":{},"name":"plain","description":"","pseudonymGenerationMethod":"PSEUDONYM_GENERATION_METHOD_UUID4","pseudonymLength":36,"pseudonymPrefix":"","pseudonymSuffix":""}}"#,
            meta(text, pointer)
        )
    };
    let want = format!(
        r#"{{"namespace":{}}}"#,
        namespace(&created, "/namespace/meta")
    );
    assert_eq!(created, want);
    let one = upstream_text(app.get("/v1/namespaces/plain").await).await;
    let want = format!(r#"{{"namespace":{}}}"#, namespace(&one, "/namespace/meta"));
    assert_eq!(one, want);
    let all = upstream_text(app.get("/v1/namespaces").await).await;
    let want = format!(
        r#"{{"namespaces":[{}]}}"#,
        namespace(&all, "/namespaces/0/meta")
    );
    assert_eq!(all, want);

    // The last page's token is "", an empty page is [], and totalSize is
    // written (as a number) only when asked for.
    let page = upstream_text(app.get("/v1/namespaces/plain/pseudonyms").await).await;
    assert_eq!(
        page,
        r#"{"namespace":"plain","nextPageToken":"","pseudonyms":[]}"#
    );
    let page = upstream_text(
        app.get("/v1/namespaces/plain/pseudonyms?includeTotalSize=true")
            .await,
    )
    .await;
    assert_eq!(
        page,
        r#"{"namespace":"plain","totalSize":0,"nextPageToken":"","pseudonyms":[]}"#
    );

    // Create and Get carry originalValue; List items never do.
    let r = c
        .post(url("/v1/namespaces/plain/pseudonyms"))
        .json(&json!({"originalValue": "subject-1"}))
        .send()
        .await
        .unwrap();
    let created = upstream_text(r).await;
    let value = serde_json::from_str::<Value>(&created).unwrap()["pseudonym"]["pseudonymValue"]
        .as_str()
        .unwrap()
        .to_owned();
    let with_original = |text: &str| {
        format!(
            r#"{{"pseudonym":{{"meta":{},"namespace":"plain","originalValue":"subject-1","pseudonymValue":"{value}"}}}}"#,
            meta(text, "/pseudonym/meta")
        )
    };
    assert_eq!(created, with_original(&created));
    let got = upstream_text(
        app.get(&format!("/v1/namespaces/plain/pseudonyms/{value}"))
            .await,
    )
    .await;
    assert_eq!(got, with_original(&got));
    let page = upstream_text(
        app.get("/v1/namespaces/plain/pseudonyms?includeTotalSize=true")
            .await,
    )
    .await;
    let want = format!(
        r#"{{"namespace":"plain","totalSize":1,"nextPageToken":"","pseudonyms":[{{"meta":{},"namespace":"plain","pseudonymValue":"{value}"}}]}}"#,
        meta(&page, "/pseudonyms/0/meta")
    );
    assert_eq!(page, want);

    // Delete answers an empty object; an error is code, message, details.
    let r = c.delete(url("/v1/namespaces/plain")).send().await.unwrap();
    assert_eq!(upstream_text(r).await, "{}");
    let r = app.get("/v1/namespaces/plain").await;
    assert_eq!(r.status(), 404);
    let error = upstream_text(r).await;
    assert!(
        error.starts_with(r#"{"code":5,"message":""#) && error.ends_with(r#"","details":[]}"#),
        "{error}"
    );
}

/// The text of an answer, once its content type is checked to be upstream's.
async fn upstream_text(r: reqwest::Response) -> String {
    assert_eq!(
        r.headers().get(CONTENT_TYPE).map(|v| v.to_str().unwrap()),
        Some("application/json; charset=utf-8")
    );
    r.text().await.unwrap()
}

crate::on_both_backends!(
    rest_routes_speak_proto3_json,
    rest_answers_are_written_as_upstream_writes_them,
    rest_errors_carry_the_grpc_code_and_http_status,
    rest_bodies_skip_unknown_fields_but_not_wrong_types
);
