//! What a pseudonym reveals: a namespace whose method reveals something by
//! construction (SHA-256: its original, to anyone who can list the possible
//! ones; UUIDv7: its creation time) is made with a warning beside the
//! answer; the default method's pseudonyms are random through and through;
//! nothing handed out (List, a job's output, a Bundle's answer, the times
//! shown) follows the originals' order or links what was made together.

use reqwest::StatusCode;
use serde_json::{json, Value};
use vfps_proto::v1::{NamespaceServiceCreateRequest, PseudonymServiceListRequest};

use crate::{
    helpers::{spawn_app, spawn_app_with, Backend},
    jobs::{download, jobs_env, spec, submit, wait_done},
    mii::{identifier, named, parameters, post},
};

const UUID4: i32 = 3;
const UUID7: i32 = 4;

/// Kendall's rank correlation of `ranks` against their positions.
fn kendall_tau(ranks: &[usize]) -> f64 {
    let n = ranks.len();
    let mut s = 0i64;
    for i in 0..n {
        for j in i + 1..n {
            s += match ranks[i].cmp(&ranks[j]) {
                std::cmp::Ordering::Less => 1,
                std::cmp::Ordering::Greater => -1,
                std::cmp::Ordering::Equal => 0,
            };
        }
    }
    s as f64 / (n * (n - 1) / 2) as f64
}

/// |τ| of a random order of `n` is below this but for one time in about
/// 1.7 million (five standard deviations).
fn chance_bound(n: usize) -> f64 {
    let n = n as f64;
    5.0 * (2.0 * (2.0 * n + 5.0) / (9.0 * n * (n - 1.0))).sqrt()
}

/// The originals' ranks (`o0000`, `o0001`, … sort as their numbers) in the
/// order of their pseudonyms.
fn originals_by_pseudonym(pairs: &[(String, String)]) -> Vec<usize> {
    let mut by_pseudonym: Vec<&(String, String)> = pairs.iter().collect();
    by_pseudonym.sort_by(|a, b| a.1.cmp(&b.1));
    by_pseudonym
        .iter()
        .map(|(o, _)| o[1..].parse().unwrap())
        .collect()
}

async fn creating_a_revealing_namespace_says_what_it_reveals(backend: Backend) {
    let app = spawn_app(backend).await;
    for (name, method, length, warned) in [
        (
            "by-time",
            "PSEUDONYM_GENERATION_METHOD_UUID7",
            36,
            Some("creation time"),
        ),
        (
            "by-hash",
            "PSEUDONYM_GENERATION_METHOD_SHA256_HEX_ENCODED",
            64,
            Some("hash each"),
        ),
        ("random", "PSEUDONYM_GENERATION_METHOD_UUID4", 36, None),
    ] {
        let r = app
            .http_client
            .post(format!("{}/v1/namespaces", app.http))
            .json(&json!({"name": name, "pseudonymGenerationMethod": method, "pseudonymLength": length}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let warning = r
            .headers()
            .get("warning")
            .map(|v| v.to_str().unwrap().to_owned());
        match warned {
            Some(said) => {
                let w = warning.unwrap_or_else(|| panic!("{method}: no Warning header"));
                assert!(w.starts_with("299 vfps \"") && w.contains(said), "{w}");
            }
            None => assert_eq!(warning, None, "{method}"),
        }
    }
    let created = app
        .namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "by-time-grpc".into(),
            pseudonym_generation_method: 4,
            pseudonym_length: 36,
            ..Default::default()
        })
        .await
        .unwrap();
    let w = created.metadata().get("vfps-warning").expect("a warning");
    assert!(w.to_str().unwrap().contains("UUIDv7"), "{w:?}");
}

async fn default_pseudonyms_share_no_leading_tag(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("default", 1, 32).await;
    let made: Vec<String> = futures::future::join_all((0..40).map(|i| {
        let app = &app;
        async move {
            app.create("default", &format!("s-{i}"))
                .await
                .unwrap()
                .pseudonym_value
        }
    }))
    .await;
    // One replica, within milliseconds: upstream's layout (host tag, tick)
    // shared the first 6 characters and more.
    let leading: std::collections::HashSet<&str> = made.iter().map(|p| &p[..6]).collect();
    assert_eq!(leading.len(), made.len(), "{made:?}");
    assert!(made.iter().all(|p| p.len() == 54));
}

/// Made one after the other in the originals' order, listed by pseudonym:
/// neither the creation order nor the originals' is the listing's; the times
/// shown are days.
async fn listing_follows_neither_originals_nor_creation(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("listed", UUID4, 36).await;
    let n = 60;
    let mut original_of = std::collections::HashMap::new();
    for i in 0..n {
        let p = app.create("listed", &format!("o{i:04}")).await.unwrap();
        original_of.insert(p.pseudonym_value, i);
    }
    let mut listed: Vec<(String, String)> = Vec::new();
    let mut token = String::new();
    loop {
        let page = app
            .pseudonyms
            .clone()
            .list(PseudonymServiceListRequest {
                namespace: "listed".into(),
                page_size: 25,
                page_token: token.clone(),
                include_total_size: false,
            })
            .await
            .unwrap()
            .into_inner();
        for p in page.pseudonyms {
            let meta = p.meta.unwrap();
            for t in [meta.created_at.unwrap(), meta.last_updated_at.unwrap()] {
                assert_eq!(
                    (t.seconds % 86_400, t.nanos),
                    (0, 0),
                    "a day, not the moment"
                );
            }
            listed.push((
                format!("o{:04}", original_of[&p.pseudonym_value]),
                p.pseudonym_value,
            ));
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed.len(), n);
    let mut by_pseudonym: Vec<String> = listed.iter().map(|(_, p)| p.clone()).collect();
    by_pseudonym.sort_by(|a, b| b.cmp(a));
    let order: Vec<String> = listed.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(order, by_pseudonym, "by pseudonym, descending");
    let originals: Vec<usize> = listed
        .iter()
        .map(|(o, _)| o[1..].parse().unwrap())
        .collect();
    let tau = kendall_tau(&originals);
    assert!(
        tau.abs() < chance_bound(n),
        "listing follows the originals: tau {tau}"
    );
    // REST shows the same day.
    let rest: Value = app
        .get_json("/v1/namespaces/listed/pseudonyms?pageSize=1")
        .await;
    let shown = rest["pseudonyms"][0]["meta"]["createdAt"].as_str().unwrap();
    assert!(shown.ends_with("T00:00:00Z"), "{shown}");
}

/// A CSV job of sequential originals in a shuffled order into a UUIDv7
/// namespace (whose pseudonyms carry their making order): sorted by
/// pseudonym, its output gives the originals in no order. (Rows in the
/// input's order across the runner's batches are the caller's order; the
/// runner must not impose the originals' within one.)
async fn a_jobs_pseudonyms_carry_no_order_of_its_originals(backend: Backend) {
    let app = spawn_app_with(jobs_env(backend)).await;
    app.namespace("ordered", UUID7, 36).await;
    let n = 300;
    // A fixed shuffle: 7 generates the integers modulo the prime 307.
    let order: Vec<usize> = (1..=306u64)
        .map(|k| (7u64.pow(5) * k % 307) as usize)
        .filter(|&k| k <= n)
        .map(|k| k - 1)
        .collect();
    assert_eq!(order.len(), n);
    let mut body = String::from("id,name\r\n");
    for (row, i) in order.iter().enumerate() {
        body.push_str(&format!("{row},o{i:04}\r\n"));
    }
    let id = submit(
        &app,
        None,
        &body,
        spec("CSV_JOB_DIRECTION_PSEUDONYMIZE", "ordered"),
    )
    .await;
    let job = wait_done(&app, None, &id).await;
    assert_eq!(job["state"], "CSV_JOB_STATE_COMPLETED", "{job}");
    let output = download(&app, None, &id).await.text().await.unwrap();
    let pairs: Vec<(String, String)> = output
        .lines()
        .skip(1)
        .zip(&order)
        .map(|(line, i)| {
            let p = line.split(',').nth(1).unwrap().trim_matches('"').to_owned();
            (format!("o{i:04}"), p)
        })
        .collect();
    assert_eq!(pairs.len(), n);
    let tau = kendall_tau(&originals_by_pseudonym(&pairs));
    assert!(
        tau.abs() < chance_bound(n),
        "the job's pseudonyms follow its originals: tau {tau}"
    );
}

/// A transaction Bundle and a batch Bundle of sequential originals into a
/// UUIDv7 namespace: their new pseudonyms carry no order of the originals.
async fn a_bundles_pseudonyms_carry_no_order_of_its_originals(backend: Backend) {
    let app = spawn_app(backend).await;
    crate::mii::namespace(&app, "bundled", UUID7, 36, false).await;
    let n = 200;
    let system = "https://example.org/sample";
    for kind in ["transaction", "batch"] {
        let entries: Vec<Value> = (0..n)
            .map(|i| {
                json!({"request": {"method": "POST", "url": "$pseudonymize"},
                "resource": parameters(&[
                    ("context", identifier(system, "bundled")),
                    ("original", identifier(system, &format!("{kind}-o{i:04}"))),
                ])})
            })
            .collect();
        let (status, answer) = post(
            &app,
            None,
            "",
            &json!({"resourceType": "Bundle", "type": kind, "entry": entries}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let pairs: Vec<(String, String)> = answer["entry"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let p = named(&e["resource"], "pseudonym")["valueIdentifier"]["value"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{e}"))
                    .to_owned();
                (format!("o{i:04}"), p)
            })
            .collect();
        assert_eq!(pairs.len(), n);
        let tau = kendall_tau(&originals_by_pseudonym(&pairs));
        assert!(
            tau.abs() < chance_bound(n),
            "the {kind} Bundle's pseudonyms follow its originals: tau {tau}"
        );
    }
}

/// `VFPS_UNSAFE_REVEALING_PSEUDONYMS` (the harness's self-test of P10)
/// really reveals: one replica's pseudonyms share a host tag and tell their
/// times apart, List pages go newest first, times are shown to the
/// microsecond. A separate process: the mode is process-wide.
#[tokio::test]
async fn the_revealing_self_test_mode_reveals_what_p10_looks_for() {
    let mut env = crate::helpers::backend_env(Backend::Sqlite).0;
    env.push(("VFPS_UNSAFE_REVEALING_PSEUDONYMS".into(), "true".into()));
    env.push(("VFPS_INSTANCE_NAME".into(), "replica-a".into()));
    let server = crate::helpers::ServerProcess::start(&env).await;
    let channel = tonic::transport::Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect_lazy();
    let mut namespaces =
        vfps_proto::v1::namespace_service_client::NamespaceServiceClient::new(channel.clone());
    let mut pseudonyms =
        vfps_proto::v1::pseudonym_service_client::PseudonymServiceClient::new(channel);
    namespaces
        .create(NamespaceServiceCreateRequest {
            name: "revealing".into(),
            pseudonym_generation_method: 1,
            pseudonym_length: 32,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut made = Vec::new();
    for i in 0..30 {
        let p = pseudonyms
            .create(vfps_proto::v1::PseudonymServiceCreateRequest {
                namespace: "revealing".into(),
                original_value: format!("o{i:04}"),
            })
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap();
        made.push(p.pseudonym_value);
    }
    let tags: std::collections::HashSet<&str> = made.iter().map(|p| &p[..5]).collect();
    assert_eq!(tags.len(), 1, "one host tag: {made:?}");
    let page = pseudonyms
        .list(PseudonymServiceListRequest {
            namespace: "revealing".into(),
            page_size: 30,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let listed: Vec<String> = page
        .pseudonyms
        .iter()
        .map(|p| p.pseudonym_value.clone())
        .collect();
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(listed, newest_first, "newest first");
    let shown = page.pseudonyms[0].meta.unwrap().created_at.unwrap();
    assert_ne!(
        (shown.seconds % 86_400, shown.nanos),
        (0, 0),
        "to the microsecond"
    );
}

crate::on_both_backends!(
    creating_a_revealing_namespace_says_what_it_reveals,
    default_pseudonyms_share_no_leading_tag,
    listing_follows_neither_originals_nor_creation,
    a_jobs_pseudonyms_carry_no_order_of_its_originals,
    a_bundles_pseudonyms_carry_no_order_of_its_originals,
);
