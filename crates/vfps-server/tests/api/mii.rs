//! The MII pseudonymization interface at the FHIR base: the IG's example
//! requests answered in its examples' shape, what existing clients send
//! (`target`, `valueString`s) answered in kind, erasure by deletion and
//! anonymization, batch Bundles, and every refusal an `OperationOutcome`
//! that names the parameter and never a value.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::Code;
use vfps_proto::v1::NamespaceServiceCreateRequest;
use vfps_testkit::oidc::OidcIssuer;

use crate::{
    auth::{authed, secured_env},
    helpers::{spawn_app, spawn_app_with, Backend, TestApp},
};

pub(crate) const HEX: i32 = 5;
const SHA256: i32 = 2;

/// The IG's context system and examples' values.
const SYSTEM: &str = "https://sample/psn-system";

pub(crate) fn identifier(system: &str, value: &str) -> Value {
    json!({"system": system, "value": value})
}

/// `Parameters` of `(name, valueIdentifier or valueString)`.
pub(crate) fn parameters(params: &[(&str, Value)]) -> Value {
    let parameter: Vec<Value> = params
        .iter()
        .map(|(name, v)| match v {
            Value::String(s) => json!({"name": name, "valueString": s}),
            Value::Number(n) => json!({"name": name, "valueInteger": n}),
            Value::Bool(b) => json!({"name": name, "valueBoolean": b}),
            other => json!({"name": name, "valueIdentifier": other}),
        })
        .collect();
    json!({"resourceType": "Parameters", "parameter": parameter})
}

pub(crate) async fn post(
    app: &TestApp,
    token: Option<&str>,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let mut r = app
        .http_client
        .post(if path.is_empty() {
            format!("{}/v1/fhir", app.http)
        } else {
            format!("{}/v1/fhir/{path}", app.http)
        })
        .header("content-type", "application/fhir+json")
        .json(body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let response = r.send().await.unwrap();
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(content_type, "application/fhir+json", "{path}");
    (status, response.json().await.unwrap())
}

pub(crate) fn named<'a>(params: &'a Value, name: &str) -> &'a Value {
    params["parameter"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or(&Value::Null)
}

pub(crate) fn issue_code(outcome: &Value) -> &str {
    assert_eq!(outcome["resourceType"], "OperationOutcome", "{outcome}");
    outcome["issue"][0]["code"].as_str().unwrap_or_default()
}

pub(crate) async fn namespace(
    app: &TestApp,
    name: &str,
    method: i32,
    length: u32,
    deletable: bool,
) {
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: name.into(),
            pseudonym_generation_method: method,
            pseudonym_length: length,
            pseudonym_deletion_allowed: Some(deletable),
            ..Default::default()
        })
        .await
        .expect("namespace created");
}

async fn the_igs_requests_are_answered_in_the_igs_shape(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "Transfer1", HEX, 10, false).await;
    // PseudonymizeRequestWithIdentifierExample.
    let context = identifier(SYSTEM, "Transfer1");
    let original = identifier(SYSTEM, "D1CL0CAL1");
    let request = parameters(&[("context", context.clone()), ("original", original.clone())]);
    let (status, answer) = post(&app, None, "$pseudonymize", &request).await;
    assert_eq!(status, StatusCode::CREATED, "made now: {answer}");
    // PseudonymizeIdentifierResponseExample: context and original echoed
    // byte for byte, the pseudonym an Identifier in the context's system.
    let names: Vec<&str> = answer["parameter"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["context", "original", "pseudonym"]);
    assert_eq!(named(&answer, "context")["valueIdentifier"], context);
    assert_eq!(named(&answer, "original")["valueIdentifier"], original);
    let pseudonym = named(&answer, "pseudonym")["valueIdentifier"].clone();
    assert_eq!(pseudonym["system"], SYSTEM);
    let value = pseudonym["value"].as_str().unwrap().to_owned();
    assert_eq!(value.len(), 10);
    // Stable, the same through $get-pseudonym and gRPC.
    let (status, again) = post(&app, None, "$pseudonymize", &request).await;
    assert_eq!(status, StatusCode::OK, "found: {again}");
    assert_eq!(
        named(&again, "pseudonym")["valueIdentifier"]["value"],
        value.as_str()
    );
    let (status, got) = post(&app, None, "$get-pseudonym", &request).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(
        named(&got, "pseudonym")["valueIdentifier"]["value"],
        value.as_str()
    );
    assert_eq!(
        app.create("Transfer1", "D1CL0CAL1")
            .await
            .unwrap()
            .pseudonym_value,
        value
    );

    // DePseudonymizeRequestWithIdentifierExample → the original's parts.
    let (status, back) = post(
        &app,
        None,
        "$de-pseudonymize",
        &parameters(&[
            ("context", context.clone()),
            (
                "pseudonym",
                identifier("https://example.com/pseudonym-ids", &value),
            ),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{back}");
    let parts = &named(&back, "original")["part"];
    assert_eq!(parts[0]["name"], "context");
    assert_eq!(parts[0]["valueIdentifier"], context);
    assert_eq!(parts[1]["name"], "value");
    assert_eq!(parts[1]["valueIdentifier"]["value"], "D1CL0CAL1");
    assert_eq!(parts[2]["name"], "pseudonym");
    assert_eq!(parts[2]["valueIdentifier"]["value"], value.as_str());

    // As the FHIR pseudonymizer's MII client asks: target, strings, allowCreate.
    let (status, old) = post(
        &app,
        None,
        "$pseudonymize",
        &parameters(&[
            ("target", json!("Transfer1")),
            ("original", json!("D1CL0CAL1")),
            ("allowCreate", json!(true)),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{old}");
    assert_eq!(named(&old, "target")["valueString"], "Transfer1");
    assert_eq!(named(&old, "pseudonym")["valueString"], value.as_str());
    let (_, back) = post(
        &app,
        None,
        "$de-pseudonymize",
        &parameters(&[("target", json!("Transfer1")), ("pseudonym", json!(value))]),
    )
    .await;
    let part = &named(&back, "original")["part"][1];
    assert_eq!(
        (&part["name"], &part["valueString"]),
        (&json!("value"), &json!("D1CL0CAL1"))
    );

    // allowCreate false makes nothing.
    let (status, none) = post(
        &app,
        None,
        "$pseudonymize",
        &parameters(&[
            ("context", context.clone()),
            ("original", identifier(SYSTEM, "never-made")),
            ("allowCreate", json!(false)),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{none}");
    assert!(!none.to_string().contains("never-made"), "{none}");

    // The CapabilityStatement names every operation by the IG's canonical URL.
    let metadata = app.get_json("/v1/fhir/metadata").await;
    let operations = metadata["rest"][0]["operation"].as_array().unwrap();
    for code in [
        "pseudonymize",
        "get-pseudonym",
        "de-pseudonymize",
        "pseudonymize-multiple",
        "delete-pseudonym",
        "anonymize-original",
    ] {
        let op = operations.iter().find(|o| o["name"] == code).expect(code);
        assert!(
            op["definition"].as_str().unwrap().starts_with(
                "https://www.medizininformatik-initiative.de/fhir/ext/mii-interface-module-pseudonymization/OperationDefinition/"
            ),
            "{op}"
        );
    }
}

async fn bad_input_is_an_operation_outcome_naming_the_parameter(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "Transfer1", HEX, 10, false).await;
    let context = identifier(SYSTEM, "Transfer1");
    let secret = "patient-secret-value";
    let cases = [
        (
            "$pseudonymize",
            parameters(&[("original", json!(secret))]),
            400,
            "invalid",
            "context",
        ),
        (
            "$pseudonymize",
            parameters(&[("context", context.clone())]),
            400,
            "invalid",
            "original is required",
        ),
        (
            "$pseudonymize",
            parameters(&[
                ("context", context.clone()),
                ("original", json!(secret)),
                ("original", json!(secret)),
            ]),
            400,
            "invalid",
            "original is given more than once",
        ),
        (
            "$pseudonymize",
            parameters(&[("context", context.clone()), ("original", json!(7))]),
            400,
            "invalid",
            "original must be a valueIdentifier",
        ),
        (
            "$de-pseudonymize",
            parameters(&[("context", context.clone()), ("original", json!(secret))]),
            400,
            "invalid",
            "is not one this operation takes",
        ),
        (
            "$pseudonymize",
            parameters(&[
                ("context", identifier(SYSTEM, "no-such-domain")),
                ("original", json!(secret)),
            ]),
            404,
            "not-found",
            "namespace no-such-domain not found",
        ),
        (
            "$get-pseudonym",
            parameters(&[("context", context.clone()), ("original", json!(secret))]),
            404,
            "not-found",
            "no pseudonym for this original",
        ),
        (
            "$de-pseudonymize",
            parameters(&[("context", context.clone()), ("pseudonym", json!("nope"))]),
            404,
            "not-found",
            "pseudonym not found",
        ),
        (
            "$pseudonymize-multiple",
            parameters(&[
                ("context", context.clone()),
                ("original", json!(secret)),
                ("count", json!(-1)),
            ]),
            400,
            "invalid",
            "count must be between 0 and",
        ),
        (
            "$pseudonymize-multiple",
            parameters(&[
                ("context", context.clone()),
                ("original", json!(secret)),
                ("count", json!(3)),
            ]),
            405,
            "not-supported",
            "single-pseudonym namespace",
        ),
    ];
    for (op, body, status, code, named) in cases {
        let (got, outcome) = post(&app, None, op, &body).await;
        assert_eq!(got.as_u16(), status, "{op} {body}: {outcome}");
        assert_eq!(issue_code(&outcome), code, "{op}: {outcome}");
        let text = outcome.to_string();
        assert!(text.contains(named), "{op}: {named} not in {text}");
        assert!(!text.contains(secret), "{op}: the original in {text}");
    }
    let (status, outcome) = post(&app, None, "$pseudonymize", &json!("nope")).await;
    assert_eq!(
        (status, issue_code(&outcome)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
}

async fn erasure_deletes_where_allowed_and_anonymizes_for_good(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "fixed", HEX, 16, false).await;
    namespace(&app, "withdrawable", HEX, 16, true).await;
    namespace(&app, "derived", SHA256, 64, true).await;
    let ask = |ns: &str, original: &str| {
        parameters(&[
            ("context", identifier(SYSTEM, ns)),
            ("original", identifier(SYSTEM, original)),
        ])
    };
    let pseudonym_of = |answer: &Value| {
        named(answer, "pseudonym")["valueIdentifier"]["value"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // Deletion only where the namespace allows it (the IG's 405 not-supported).
    post(&app, None, "$pseudonymize", &ask("fixed", "s1")).await;
    let (status, outcome) = post(&app, None, "$delete-pseudonym", &ask("fixed", "s1")).await;
    assert_eq!(
        (status, issue_code(&outcome)),
        (StatusCode::METHOD_NOT_ALLOWED, "not-supported")
    );
    assert!(
        outcome.to_string().contains("does not allow deleting"),
        "{outcome}"
    );

    let (_, first) = post(&app, None, "$pseudonymize", &ask("withdrawable", "s1")).await;
    let first = pseudonym_of(&first);
    let (status, outcome) = post(&app, None, "$delete-pseudonym", &ask("withdrawable", "s1")).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        outcome["issue"][0]["details"]["coding"][0]["code"],
        "MSG_DELETED"
    );
    let (status, _) = post(&app, None, "$get-pseudonym", &ask("withdrawable", "s1")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, outcome) = post(&app, None, "$delete-pseudonym", &ask("withdrawable", "s1")).await;
    assert_eq!(
        (status, issue_code(&outcome)),
        (StatusCode::NOT_FOUND, "not-found")
    );
    let (_, anew) = post(&app, None, "$pseudonymize", &ask("withdrawable", "s1")).await;
    assert_ne!(pseudonym_of(&anew), first, "a deleted entry came back");

    // Anonymized: the link is gone on every path, the original gets a new
    // pseudonym, the old one resolves to no one.
    let (_, kept) = post(&app, None, "$pseudonymize", &ask("fixed", "s2")).await;
    let old = pseudonym_of(&kept);
    let (status, outcome) = post(&app, None, "$anonymize-original", &ask("fixed", "s2")).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        outcome["issue"][0]["details"]["coding"][0]["code"],
        "MSG_UPDATED"
    );
    let (status, _) = post(
        &app,
        None,
        "$de-pseudonymize",
        &parameters(&[
            ("context", identifier(SYSTEM, "fixed")),
            ("pseudonym", json!(old)),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let grpc = app
        .pseudonyms
        .clone()
        .get(authed(
            vfps_proto::v1::PseudonymServiceGetRequest {
                namespace: "fixed".into(),
                pseudonym_value: old.clone(),
            },
            None,
        ))
        .await;
    assert_eq!(grpc.unwrap_err().code(), Code::NotFound);
    let (status, _) = post(&app, None, "$get-pseudonym", &ask("fixed", "s2")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, again) = post(&app, None, "$pseudonymize", &ask("fixed", "s2")).await;
    assert_ne!(pseudonym_of(&again), old);

    // Where anyone can recompute the link, anonymizing is refused, saying why.
    post(&app, None, "$pseudonymize", &ask("derived", "s3")).await;
    let (status, outcome) = post(&app, None, "$anonymize-original", &ask("derived", "s3")).await;
    assert_eq!(
        (status, issue_code(&outcome)),
        (StatusCode::METHOD_NOT_ALLOWED, "not-supported")
    );
    assert!(outcome.to_string().contains("recompute"), "{outcome}");
}

async fn a_batch_bundle_answers_each_entry_on_its_own(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "pseudonym-domain", HEX, 12, false).await;
    let entry = |url: &str, ns: &str, original: &str| {
        json!({
            "fullUrl": format!("urn:uuid:{}", uuid_like(original)),
            "request": {"method": "POST", "url": url},
            "resource": parameters(&[
                ("context", identifier(SYSTEM, ns)),
                ("original", identifier("https://example.com/original-ids", original)),
            ]),
        })
    };
    // The IG's pseudonymize-example-bundle-batch-request: the third entry's
    // context does not exist.
    let batch = json!({"resourceType": "Bundle", "type": "batch", "entry": [
        entry("$pseudonymize", "pseudonym-domain", "an-original-value-1"),
        entry("$pseudonymize", "pseudonym-domain", "an-original-identifier-value"),
        entry("$pseudonymize", "pseudonym-domain-that-doesn't-exist", "an-original-value-1"),
        {"request": {"method": "GET", "url": "$pseudonymize"}, "resource": {}},
        {"request": {"method": "POST", "url": "$no-such-operation"}, "resource": {}},
    ]});
    // As in the IG's response example, the first original has a pseudonym
    // already (200 OK) and the second gets one (201 Created).
    app.create("pseudonym-domain", "an-original-value-1")
        .await
        .unwrap();
    let (status, answer) = post(&app, None, "", &batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["type"], "batch-response");
    let statuses: Vec<&str> = answer["entry"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["response"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "200 OK",
            "201 Created",
            "404 Not Found",
            "405 Method Not Allowed",
            "404 Not Found"
        ]
    );
    let first = named(&answer["entry"][0]["resource"], "pseudonym")["valueIdentifier"]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        app.create("pseudonym-domain", "an-original-value-1")
            .await
            .unwrap()
            .pseudonym_value,
        first
    );
    assert_eq!(issue_code(&answer["entry"][2]["resource"]), "not-found");

    // Many entries at once, each its own answer.
    let many: Vec<Value> = (0..300)
        .map(|i| entry("$pseudonymize", "pseudonym-domain", &format!("subject-{i}")))
        .collect();
    let (status, answer) = post(
        &app,
        None,
        "",
        &json!({"resourceType": "Bundle", "type": "batch", "entry": many}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    for (i, e) in answer["entry"].as_array().unwrap().iter().enumerate() {
        let p = named(&e["resource"], "pseudonym")["valueIdentifier"]["value"]
            .as_str()
            .unwrap();
        let back = app
            .create("pseudonym-domain", &format!("subject-{i}"))
            .await
            .unwrap();
        assert_eq!(back.pseudonym_value, p, "entry {i}");
    }

    // Refused whole: another type, too many entries, not a Bundle.
    for (body, status, code) in [
        (
            json!({"resourceType": "Bundle", "type": "history", "entry": []}),
            400,
            "invalid",
        ),
        (
            json!({"resourceType": "Bundle", "type": "batch",
                   "entry": vec![json!({}); 1001]}),
            400,
            "invalid",
        ),
        (json!({"resourceType": "Parameters"}), 400, "invalid"),
    ] {
        let (got, outcome) = post(&app, None, "", &body).await;
        assert_eq!(got.as_u16(), status, "{outcome}");
        assert_eq!(issue_code(&outcome), code);
    }
}

/// A transaction Bundle is all or nothing: every entry answered, or one
/// failing entry named and nothing changed, whichever entry fails; its new
/// pseudonyms are chosen anew where taken, even in a crowded namespace.
async fn a_transaction_bundle_is_all_or_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    namespace(&app, "tx", HEX, 16, true).await;
    namespace(&app, "crowded", HEX, 2, false).await;
    let known = app.create("tx", "known").await.unwrap().pseudonym_value;
    let entry = |url: &str, params: Value| json!({"request": {"method": "POST", "url": url}, "resource": params});
    let ask = |ns: &str, name: &str, value: &str| {
        parameters(&[
            ("context", identifier(SYSTEM, ns)),
            (name, identifier(SYSTEM, value)),
        ])
    };
    let transaction = |entries: Vec<Value>| json!({"resourceType": "Bundle", "type": "transaction", "entry": entries});
    let exists = |original: &'static str| {
        let app = &app;
        async move {
            post(
                app,
                None,
                "$get-pseudonym",
                &ask("tx", "original", original),
            )
            .await
            .0 == StatusCode::OK
        }
    };

    let failing = [
        (
            ask("no-such-namespace", "original", "x"),
            "$pseudonymize",
            404,
            "not-found",
        ),
        (
            ask("tx", "pseudonym", "no-such-pseudonym"),
            "$de-pseudonymize",
            404,
            "not-found",
        ),
        (
            ask("tx", "original", "known"),
            "$delete-pseudonym",
            400,
            "not-supported",
        ),
        (
            parameters(&[("context", identifier(SYSTEM, "tx"))]),
            "$pseudonymize",
            400,
            "invalid",
        ),
    ];
    for (params, op, status, code) in failing {
        let (got, outcome) = post(
            &app,
            None,
            "",
            &transaction(vec![
                entry("$pseudonymize", ask("tx", "original", "new-1")),
                entry("$pseudonymize", ask("tx", "original", "new-2")),
                entry(op, params),
            ]),
        )
        .await;
        assert_eq!(got.as_u16(), status, "{op}: {outcome}");
        assert_eq!(issue_code(&outcome), code, "{op}: {outcome}");
        let said = outcome["issue"][0]["diagnostics"].as_str().unwrap();
        assert!(said.starts_with("entry 2:"), "{said}");
        assert_eq!(outcome["issue"][0]["expression"][0], "Bundle.entry[2]");
        assert!(
            !exists("new-1").await && !exists("new-2").await,
            "{op}: a failed transaction stored an entry"
        );
    }

    let (status, answer) = post(
        &app,
        None,
        "",
        &transaction(vec![
            entry("$pseudonymize", ask("tx", "original", "new-1")),
            entry("$pseudonymize", ask("tx", "original", "known")),
            entry("$de-pseudonymize", ask("tx", "pseudonym", &known)),
            entry("$pseudonymize", ask("tx", "original", "new-1")),
            entry("/$get-pseudonym", ask("tx", "original", "known")),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["type"], "transaction-response");
    let entries = answer["entry"].as_array().unwrap();
    let statuses: Vec<&str> = entries
        .iter()
        .map(|e| e["response"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["201 Created", "200 OK", "200 OK", "200 OK", "200 OK"],
        "made once, by its first entry: {answer}"
    );
    let pseudonym =
        |i: usize| named(&entries[i]["resource"], "pseudonym")["valueIdentifier"]["value"].clone();
    assert_eq!(pseudonym(1), json!(known));
    assert_eq!(
        pseudonym(0),
        pseudonym(3),
        "an original twice got two pseudonyms"
    );
    assert_eq!(pseudonym(4), json!(known));
    assert_eq!(
        named(&entries[2]["resource"], "original")["part"][1]["valueIdentifier"]["value"],
        "known"
    );
    assert_eq!(
        json!(app.create("tx", "new-1").await.unwrap().pseudonym_value),
        pseudonym(0)
    );

    // 256 two-hex pseudonyms, 120 taken: 40 new originals still go in
    // together (the taken ones among their first choices chosen anew).
    for i in 0..120 {
        app.create("crowded", &format!("filler-{i}")).await.unwrap();
    }
    let many: Vec<Value> = (0..40)
        .map(|i| {
            entry(
                "$pseudonymize",
                ask("crowded", "original", &format!("late-{i}")),
            )
        })
        .collect();
    let (status, answer) = post(&app, None, "", &transaction(many)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let mut seen = std::collections::HashSet::new();
    for e in answer["entry"].as_array().unwrap() {
        let p = named(&e["resource"], "pseudonym")["valueIdentifier"]["value"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(seen.insert(p), "a pseudonym twice");
    }
}

fn uuid_like(seed: &str) -> String {
    let h = seed
        .bytes()
        .fold(0u128, |h, b| h.wrapping_mul(31).wrapping_add(u128::from(b)));
    let hex = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Erasing is a right of its own: a writer (or an admin) cannot; an eraser
/// can; each try is an audit event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_needs_the_erase_right_and_is_audited() {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(Backend::Sqlite, &issuer);
    env.push((
        "Authorization__NamespaceRules__0__EraseRoles__0".into(),
        "eraser".into(),
    ));
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin"]);
    let writer = issuer.token("w", &["writer"]);
    let eraser = issuer.token("e", &["eraser"]);
    let created = app
        .namespaces
        .clone()
        .create(authed(
            NamespaceServiceCreateRequest {
                name: "research".into(),
                pseudonym_generation_method: HEX,
                pseudonym_length: 16,
                pseudonym_deletion_allowed: Some(true),
                ..Default::default()
            },
            Some(&admin),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        created.namespace.unwrap().pseudonym_deletion_allowed,
        Some(true)
    );
    let ask = parameters(&[
        ("context", identifier(SYSTEM, "research")),
        ("original", json!("s")),
    ]);
    let (status, _) = post(&app, Some(&writer), "$pseudonymize", &ask).await;
    assert_eq!(status, StatusCode::CREATED);
    for token in [&writer, &admin] {
        for op in ["$delete-pseudonym", "$anonymize-original"] {
            let (status, outcome) = post(&app, Some(token), op, &ask).await;
            assert_eq!(
                (status, issue_code(&outcome)),
                (StatusCode::FORBIDDEN, "forbidden")
            );
        }
    }
    let (status, outcome) = post(&app, Some(&eraser), "$delete-pseudonym", &ask).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    let (status, _) = post(&app, None, "$pseudonymize", &ask).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let metrics = app.metrics_text().await;
    for line in [
        "vfps_audit_events_total{operation=\"Pseudonyms/Erase\",outcome=\"denied\"} 4",
        "vfps_audit_events_total{operation=\"Pseudonyms/Erase\",outcome=\"allowed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

/// The same erasures over gRPC and REST (additive methods of vfps.api.v1).
async fn erasure_over_grpc_and_rest(backend: Backend) {
    use vfps_proto::v1::{ErasureMode, PseudonymServiceEraseRequest};
    let app = spawn_app(backend).await;
    namespace(&app, "withdrawable", HEX, 16, true).await;
    let erase = |original: &str, mode: ErasureMode| PseudonymServiceEraseRequest {
        namespace: "withdrawable".into(),
        original_value: original.into(),
        mode: mode as i32,
    };
    let p = app
        .create("withdrawable", "g1")
        .await
        .unwrap()
        .pseudonym_value;
    let mut client = app.pseudonyms.clone();
    let unspecified = client
        .erase(erase("g1", ErasureMode::Unspecified))
        .await
        .unwrap_err();
    assert_eq!(unspecified.code(), Code::InvalidArgument);
    assert!(
        unspecified.message().contains("mode must be"),
        "{unspecified:?}"
    );
    client
        .erase(erase("g1", ErasureMode::Anonymize))
        .await
        .unwrap();
    let gone = client
        .get(vfps_proto::v1::PseudonymServiceGetRequest {
            namespace: "withdrawable".into(),
            pseudonym_value: p,
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let again = client
        .erase(erase("g1", ErasureMode::Delete))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "nothing left to erase");

    app.create("withdrawable", "r1").await.unwrap();
    let url = format!("{}/v1/namespaces/withdrawable/pseudonyms:erase", app.http);
    let r = app
        .http_client
        .post(&url)
        .json(&json!({"originalValue": "r1", "mode": "ERASURE_MODE_DELETE"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let r = app
        .http_client
        .post(&url)
        .json(&json!({"originalValue": "r1", "mode": "ERASURE_MODE_DELETE"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = app
        .http_client
        .post(&url)
        .json(&json!({"originalValue": "r1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

/// `vfps pseudonyms erase` reads the original from standard input and
/// erases through a running vfps; a failure exits non-zero naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_erases_an_original_read_from_standard_input() {
    use std::io::Write;
    let app = spawn_app(Backend::Sqlite).await;
    namespace(&app, "cli", HEX, 16, false).await;
    let p = app
        .create("cli", "withdrawn by letter")
        .await
        .unwrap()
        .pseudonym_value;
    let erase = |extra: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vfps"))
            .args([
                "pseudonyms",
                "erase",
                "--namespace",
                "cli",
                "--address",
                &app.grpc,
            ])
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let refused = erase(&["--delete"], "withdrawn by letter\n");
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("does not allow deleting"), "{why}");
    let done = erase(&[], "withdrawn by letter\n");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(!String::from_utf8_lossy(&done.stderr).contains("withdrawn"));
    let gone = app
        .pseudonyms
        .clone()
        .get(vfps_proto::v1::PseudonymServiceGetRequest {
            namespace: "cli".into(),
            pseudonym_value: p,
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

crate::on_both_backends!(
    a_transaction_bundle_is_all_or_nothing,
    erasure_over_grpc_and_rest,
    the_igs_requests_are_answered_in_the_igs_shape,
    bad_input_is_an_operation_outcome_naming_the_parameter,
    erasure_deletes_where_allowed_and_anonymizes_for_good,
    a_batch_bundle_answers_each_entry_on_its_own,
);
