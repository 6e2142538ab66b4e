//! Multi-pseudonym namespaces through every transport: `$pseudonymize-multiple`
//! makes and answers an original's pseudonyms, the single-pseudonym calls are
//! refused there (and it on single-pseudonym namespaces), reverse lookups,
//! List's pages, erasure, counts and CSV jobs cover both kinds.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::Code;
use vfps_proto::v1::{
    NamespaceServiceCreateRequest, NamespaceServiceGetRequest, PseudonymServiceGetRequest,
    PseudonymServiceListRequest,
};

use crate::{
    helpers::{spawn_app, spawn_app_with, Backend, TestApp},
    jobs::{download, jobs_env, rest, spec, submit, wait_done},
};

const HEX: i32 = 5;
const SHA256: i32 = 2;
const SYSTEM: &str = "https://sample/multi-psn-capable-system";

async fn multi_namespace(app: &TestApp, name: &str, length: u32, deletable: bool) {
    app.namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: name.into(),
            pseudonym_generation_method: HEX,
            pseudonym_length: length,
            pseudonym_deletion_allowed: Some(deletable),
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .expect("multi-pseudonym namespace created");
}

fn request(namespace: &str, original: &str, count: Option<i64>) -> Value {
    let mut parameter = vec![
        json!({"name": "context", "valueIdentifier": {"system": SYSTEM, "value": namespace}}),
        json!({"name": "original", "valueIdentifier": {"system": SYSTEM, "value": original}}),
    ];
    if let Some(n) = count {
        parameter.push(json!({"name": "count", "valueInteger": n}));
    }
    json!({"resourceType": "Parameters", "parameter": parameter})
}

async fn post(app: &TestApp, op: &str, body: &Value) -> (StatusCode, Value) {
    let r = app
        .http_client
        .post(if op.is_empty() {
            format!("{}/v1/fhir", app.http)
        } else {
            format!("{}/v1/fhir/{op}", app.http)
        })
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// The pseudonyms of a `$pseudonymize-multiple` answer, each checked to
/// carry the request's context and original.
fn pseudonyms_of(answer: &Value, namespace: &str, original: &str) -> Vec<String> {
    answer["parameter"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|p| {
            assert_eq!(p["name"], "pseudonym", "{p}");
            let part = |name: &str| {
                p["part"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["name"] == name)
                    .unwrap_or_else(|| panic!("no {name} in {p}"))["valueIdentifier"]
                    .clone()
            };
            assert_eq!(
                part("context"),
                json!({"system": SYSTEM, "value": namespace})
            );
            assert_eq!(
                part("original"),
                json!({"system": SYSTEM, "value": original})
            );
            let value = part("value");
            assert_eq!(value["system"], SYSTEM);
            value["value"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn issue(outcome: &Value) -> (&str, String) {
    assert_eq!(outcome["resourceType"], "OperationOutcome", "{outcome}");
    (
        outcome["issue"][0]["code"].as_str().unwrap_or_default(),
        outcome.to_string(),
    )
}

async fn pseudonymize_multiple_makes_and_answers_many_and_single_calls_are_refused(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    multi_namespace(&app, "MultiPsnDomain", 12, false).await;
    app.namespace("Single", HEX, 12).await;
    let got = app
        .namespaces
        .clone()
        .get(NamespaceServiceGetRequest {
            name: "MultiPsnDomain".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(got.multi_pseudonym, Some(true));
    let rest: Value = app.get_json("/v1/namespaces/Single").await;
    assert!(rest["namespace"].get("multiPseudonym").is_none(), "{rest}");

    // count 0 before any: 404.
    let (status, none) = post(
        &app,
        "$pseudonymize-multiple",
        &request("MultiPsnDomain", "H3RAU56A8E", Some(0)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{none}");
    assert!(!issue(&none).1.contains("H3RAU56A8E"));
    // count 3: three new ones, 201.
    let (status, made) = post(
        &app,
        "$pseudonymize-multiple",
        &request("MultiPsnDomain", "H3RAU56A8E", Some(3)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let first = pseudonyms_of(&made, "MultiPsnDomain", "H3RAU56A8E");
    assert_eq!(first.len(), 3);
    // count 2 more: only the new ones.
    let (_, more) = post(
        &app,
        "$pseudonymize-multiple",
        &request("MultiPsnDomain", "H3RAU56A8E", Some(2)),
    )
    .await;
    let second = pseudonyms_of(&more, "MultiPsnDomain", "H3RAU56A8E");
    assert_eq!(second.len(), 2);
    let all: HashSet<&String> = first.iter().chain(&second).collect();
    assert_eq!(all.len(), 5, "a pseudonym was answered twice");
    // count 0: all five, oldest first.
    let (status, every) = post(
        &app,
        "$pseudonymize-multiple",
        &request("MultiPsnDomain", "H3RAU56A8E", Some(0)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{every}");
    let every = pseudonyms_of(&every, "MultiPsnDomain", "H3RAU56A8E");
    assert_eq!(every.len(), 5);
    assert_eq!(every.iter().collect::<HashSet<_>>(), all);
    assert_eq!(
        every[3..].iter().collect::<HashSet<_>>(),
        second.iter().collect::<HashSet<_>>(),
        "the later ones last"
    );

    // Refusals: the single-pseudonym operations here, this one there, a
    // count out of range; never an original in the outcome.
    for (op, body, status, code, says) in [
        (
            "$pseudonymize",
            request("MultiPsnDomain", "H3RAU56A8E", None),
            405,
            "not-supported",
            "multi-pseudonym namespace",
        ),
        (
            "$get-pseudonym",
            request("MultiPsnDomain", "H3RAU56A8E", None),
            405,
            "not-supported",
            "multi-pseudonym namespace",
        ),
        (
            "$pseudonymize-multiple",
            request("Single", "H3RAU56A8E", Some(2)),
            405,
            "not-supported",
            "single-pseudonym namespace",
        ),
        (
            "$pseudonymize-multiple",
            request("MultiPsnDomain", "H3RAU56A8E", Some(1001)),
            400,
            "invalid",
            "count",
        ),
        (
            "$pseudonymize-multiple",
            request("Nowhere", "H3RAU56A8E", Some(1)),
            404,
            "not-found",
            "Nowhere",
        ),
    ] {
        let (got, outcome) = post(&app, op, &body).await;
        assert_eq!(got.as_u16(), status, "{op}: {outcome}");
        let (c, text) = issue(&outcome);
        assert_eq!(c, code, "{op}: {text}");
        assert!(text.contains(says), "{op}: {says} not in {text}");
        assert!(!text.contains("H3RAU56A8E"), "{op}: the original in {text}");
    }
    // gRPC and REST Create are refused as $pseudonymize is.
    let refused = app.create("MultiPsnDomain", "someone").await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains("multi-pseudonym namespace"),
        "{refused:?}"
    );
    let r = app
        .http_client
        .post(format!(
            "{}/v1/namespaces/MultiPsnDomain/pseudonyms",
            app.http
        ))
        .json(&json!({"originalValue": "someone"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    // A multi-pseudonym namespace needs a random method.
    let sha = app
        .namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "hashed".into(),
            pseudonym_generation_method: SHA256,
            pseudonym_length: 64,
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(sha.code(), Code::InvalidArgument);
    assert!(
        sha.message().contains("random generation method"),
        "{sha:?}"
    );

    // A batch: each entry on its own; a transaction refuses $pseudonymize
    // here and stores nothing.
    let batch = json!({"resourceType": "Bundle", "type": "batch", "entry": [
        {"request": {"method": "POST", "url": "$pseudonymize-multiple"}, "resource": request("MultiPsnDomain", "other", Some(2))},
        {"request": {"method": "POST", "url": "$pseudonymize-multiple"}, "resource": request("Single", "other", Some(2))},
    ]});
    let (status, answer) = post(&app, "", &batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["entry"][0]["response"]["status"], "201 Created",
        "{answer}"
    );
    assert_eq!(
        pseudonyms_of(&answer["entry"][0]["resource"], "MultiPsnDomain", "other").len(),
        2
    );
    assert!(
        answer["entry"][1]["response"]["status"]
            .as_str()
            .unwrap()
            .starts_with("405"),
        "{answer}"
    );
    let transaction = json!({"resourceType": "Bundle", "type": "transaction", "entry": [
        {"request": {"method": "POST", "url": "$pseudonymize"}, "resource": request("Single", "third", None)},
        {"request": {"method": "POST", "url": "$pseudonymize"}, "resource": request("MultiPsnDomain", "third", None)},
    ]});
    let (status, outcome) = post(&app, "", &transaction).await;
    // 400 business-rule naming the entry, as every failed transaction.
    assert!(status.is_client_error(), "{status}: {outcome}");
    assert!(issue(&outcome).1.contains("multi-pseudonym namespace"));
    let (status, _) = post(&app, "$get-pseudonym", &request("Single", "third", None)).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the transaction stored its other entry"
    );
}

/// Every pseudonym of an original resolves to it over gRPC, REST and FHIR;
/// List pages over them all; counts include them.
async fn many_pseudonyms_of_one_original_resolve_and_page(backend: Backend) {
    let app = spawn_app(backend).await;
    multi_namespace(&app, "m", 10, false).await;
    let (status, made) = post(
        &app,
        "$pseudonymize-multiple",
        &request("m", "subject-1", Some(60)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let made = pseudonyms_of(&made, "m", "subject-1");
    assert_eq!(made.iter().collect::<HashSet<_>>().len(), 60);
    let (_, other) = post(
        &app,
        "$pseudonymize-multiple",
        &request("m", "subject-2", Some(1)),
    )
    .await;
    let other = pseudonyms_of(&other, "m", "subject-2");

    for p in made.iter().step_by(7).chain(&other) {
        let want = if other.contains(p) {
            "subject-2"
        } else {
            "subject-1"
        };
        let got = app
            .pseudonyms
            .clone()
            .get(PseudonymServiceGetRequest {
                namespace: "m".into(),
                pseudonym_value: p.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap();
        assert_eq!(got.original_value.as_deref(), Some(want));
        let rest: Value = app
            .get_json(&format!("/v1/namespaces/m/pseudonyms/{p}"))
            .await;
        assert_eq!(rest["pseudonym"]["originalValue"], want, "{rest}");
        let (status, back) = post(
            &app,
            "$de-pseudonymize",
            &json!({"resourceType": "Parameters", "parameter": [
                {"name": "context", "valueIdentifier": {"system": SYSTEM, "value": "m"}},
                {"name": "pseudonym", "valueIdentifier": {"system": SYSTEM, "value": p}},
            ]}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{back}");
        assert!(back.to_string().contains(want), "{back}");
    }

    // gRPC List, 7 a page: every pseudonym once, by pseudonym descending.
    let mut listed: Vec<String> = Vec::new();
    let mut token = String::new();
    loop {
        let page = app
            .pseudonyms
            .clone()
            .list(PseudonymServiceListRequest {
                namespace: "m".into(),
                page_size: 7,
                page_token: token.clone(),
                include_total_size: true,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.total_size, Some(61));
        assert!(page.pseudonyms.iter().all(|p| p.original_value.is_none()));
        listed.extend(page.pseudonyms.into_iter().map(|p| p.pseudonym_value));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed.len(), 61);
    assert_eq!(
        listed.iter().collect::<HashSet<_>>().len(),
        61,
        "listed twice"
    );
    let mut by_pseudonym = listed.clone();
    by_pseudonym.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, by_pseudonym, "by pseudonym, descending");
    // REST's List follows the same tokens.
    let first: Value = app
        .get_json("/v1/namespaces/m/pseudonyms?pageSize=50")
        .await;
    let token = first["nextPageToken"].as_str().unwrap();
    let rest_page: Value = app
        .get_json(&format!(
            "/v1/namespaces/m/pseudonyms?pageSize=50&pageToken={token}"
        ))
        .await;
    assert_eq!(
        first["pseudonyms"].as_array().unwrap().len()
            + rest_page["pseudonyms"].as_array().unwrap().len(),
        61
    );
    // The per-namespace gauge (and so the UI's statistics, the same counts)
    // counts them, once this replica has counted again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let metrics = app.metrics_text().await;
        if metrics
            .lines()
            .any(|l| l == "vfps_pseudonyms{namespace=\"m\"} 61")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("vfps_pseudonyms"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Erasure takes every pseudonym of the original; deleting the namespace
/// takes the rest.
async fn erasing_an_original_takes_all_its_pseudonyms(backend: Backend) {
    let app = spawn_app(backend).await;
    multi_namespace(&app, "m", 10, true).await;
    let make = |original: &'static str, n: i64| {
        let app = &app;
        async move {
            let (_, answer) = post(
                app,
                "$pseudonymize-multiple",
                &request("m", original, Some(n)),
            )
            .await;
            pseudonyms_of(&answer, "m", original)
        }
    };
    let anonymized = make("anonymized", 4).await;
    let deleted = make("deleted", 3).await;
    let kept = make("kept", 2).await;
    let resolves = |p: String| {
        let app = &app;
        async move {
            match app
                .pseudonyms
                .clone()
                .get(PseudonymServiceGetRequest {
                    namespace: "m".into(),
                    pseudonym_value: p,
                })
                .await
            {
                Ok(r) => r.into_inner().pseudonym.unwrap().original_value,
                Err(e) => {
                    assert_eq!(e.code(), Code::NotFound);
                    None
                }
            }
        }
    };
    for (op, original) in [
        ("$anonymize-original", "anonymized"),
        ("$delete-pseudonym", "deleted"),
    ] {
        let (status, outcome) = post(&app, op, &request("m", original, None)).await;
        assert_eq!(status, StatusCode::OK, "{op}: {outcome}");
        let (status, _) = post(
            &app,
            "$pseudonymize-multiple",
            &request("m", original, Some(0)),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{op} left pseudonyms");
    }
    for p in anonymized.iter().chain(&deleted) {
        assert_eq!(
            resolves(p.clone()).await,
            None,
            "an erased pseudonym resolves"
        );
    }
    for p in &kept {
        assert_eq!(resolves(p.clone()).await.as_deref(), Some("kept"));
    }
    // The anonymized original gets new pseudonyms, none of the old ones.
    let again = make("anonymized", 3).await;
    assert!(again.iter().all(|p| !anonymized.contains(p)));
    // gRPC's and REST's Erase take them all too.
    let by_grpc = make("by-grpc", 2).await;
    let by_rest = make("by-rest", 2).await;
    app.pseudonyms
        .clone()
        .erase(vfps_proto::v1::PseudonymServiceEraseRequest {
            namespace: "m".into(),
            original_value: "by-grpc".into(),
            mode: vfps_proto::v1::ErasureMode::Anonymize as i32,
        })
        .await
        .unwrap();
    let r = app
        .http_client
        .post(format!("{}/v1/namespaces/m/pseudonyms:erase", app.http))
        .json(&json!({"originalValue": "by-rest", "mode": "ERASURE_MODE_DELETE"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    for p in by_grpc.iter().chain(&by_rest) {
        assert_eq!(
            resolves(p.clone()).await,
            None,
            "an erased pseudonym resolves"
        );
    }
    // Deleting the namespace takes every pseudonym with it.
    app.namespaces
        .clone()
        .delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name: "m".into() })
        .await
        .unwrap();
    multi_namespace(&app, "m", 10, true).await;
    for p in kept.iter().chain(&again) {
        assert_eq!(
            resolves(p.clone()).await,
            None,
            "a pseudonym outlived its namespace"
        );
    }
    let (status, _) = post(
        &app,
        "$pseudonymize-multiple",
        &request("m", "kept", Some(0)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Where collisions are likely (two hex digits: 256 pseudonyms) and certain
/// (one: 16), every pseudonym is issued once across originals; anonymized
/// ones are never issued again, and a full namespace says so.
async fn a_crowded_namespace_issues_each_pseudonym_once(backend: Backend) {
    let app = spawn_app(backend).await;
    multi_namespace(&app, "small", 2, false).await;
    let mut all: HashSet<String> = HashSet::new();
    for (original, n) in [("a", 100), ("b", 60)] {
        let (status, made) = post(
            &app,
            "$pseudonymize-multiple",
            &request("small", original, Some(n)),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let made = pseudonyms_of(&made, "small", original);
        assert_eq!(made.len(), n as usize);
        all.extend(made);
    }
    assert_eq!(all.len(), 160, "a pseudonym was issued twice");

    // Sixteen: filled one at a time (a call may give up after its
    // collisions, as a Create does), each answer new.
    multi_namespace(&app, "tiny", 1, false).await;
    let mut issued: Vec<String> = Vec::new();
    for i in 0..2000 {
        if issued.len() == 16 {
            break;
        }
        let original = ["a", "b", "c"][i % 3];
        let (status, made) = post(
            &app,
            "$pseudonymize-multiple",
            &request("tiny", original, Some(1)),
        )
        .await;
        if status == StatusCode::CREATED {
            let p = pseudonyms_of(&made, "tiny", original).remove(0);
            assert!(!issued.contains(&p), "{p} was issued twice");
            issued.push(p);
        } else {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{made}");
        }
    }
    assert_eq!(issued.len(), 16);
    let (status, _) = post(&app, "$anonymize-original", &request("tiny", "a", None)).await;
    assert_eq!(status, StatusCode::OK);
    // a's anonymized pseudonyms stay taken: each try finds none free (16
    // collisions a call; five calls would find a freed one almost surely).
    for _ in 0..5 {
        let (status, full) = post(
            &app,
            "$pseudonymize-multiple",
            &request("tiny", "d", Some(1)),
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{full}");
        assert!(
            issue(&full).1.contains("choose a longer pseudonym length"),
            "{full}"
        );
    }
}

/// A CSV pseudonymization job into a multi-pseudonym namespace is refused at
/// submission, naming it; de-pseudonymizing its pseudonyms works.
async fn csv_jobs_depseudonymize_but_do_not_pseudonymize_into_a_multi_namespace(backend: Backend) {
    let app = spawn_app_with(jobs_env(backend)).await;
    multi_namespace(&app, "research", 10, false).await;
    let created = rest(&app, reqwest::Method::POST, "/v1/csv-jobs", None)
        .await
        .json(&spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "research"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_client_error(), "{}", created.status());
    let text = created.text().await.unwrap();
    assert!(
        text.contains("namespace research is a multi-pseudonym namespace"),
        "{text}"
    );
    let mut body = String::from("id,name\r\n");
    let mut expected = body.clone();
    for (i, subject) in ["s-1", "s-2"].iter().enumerate() {
        let (_, made) = post(
            &app,
            "$pseudonymize-multiple",
            &request("research", subject, Some(2)),
        )
        .await;
        for p in pseudonyms_of(&made, "research", subject) {
            body.push_str(&format!("{i},{p}\r\n"));
            expected.push_str(&format!("{i},{subject}\r\n"));
        }
    }
    let id = submit(
        &app,
        None,
        &body,
        spec("CSV_JOB_DIRECTION_DEPSEUDONYMIZE", "research"),
    )
    .await;
    let job = wait_done(&app, None, &id).await;
    assert_eq!(job["state"], "CSV_JOB_STATE_COMPLETED", "{job}");
    let restored = download(&app, None, &id).await.text().await.unwrap();
    assert_eq!(restored, expected);
}

crate::on_both_backends!(
    pseudonymize_multiple_makes_and_answers_many_and_single_calls_are_refused,
    many_pseudonyms_of_one_original_resolve_and_page,
    erasing_an_original_takes_all_its_pseudonyms,
    a_crowded_namespace_issues_each_pseudonym_once,
    csv_jobs_depseudonymize_but_do_not_pseudonymize_into_a_multi_namespace,
);
