//! P8 against real vfps replicas (two, on one PostgreSQL from the test kit,
//! their pseudonym caches on): the MII side of the workload (transaction
//! Bundles all or nothing among it) passes on the service as it is, fails P8 when erasures are not announced to the other
//! replica's cache, and fails its guard when the namespace does not allow
//! erasure. Its `$pseudonymize-multiple` creates in the multi-pseudonym
//! namespace resolve to their originals on both replicas.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use vfps_chaos::{
    checker::{Property, Validity},
    config::{Limits, LoadConfig, Output, Service, Verification, Workload},
    history::erasures::Meaning,
    report::Summary,
    run,
};
use vfps_client::{Client, Endpoints, RetryPolicy};
use vfps_proto::v1::NamespaceServiceCreateRequest;
use vfps_server::{config::Flags, startup};

const MIX: &str = "create=40,get=10,mii=20,bundle=4,erase=10";

/// Two replicas on one database, caches on; `extra` settings for both.
async fn replicas(extra: &[(&str, &str)]) -> Vec<startup::Running> {
    let db = vfps_testkit::shared().create_database().unwrap();
    let mut vars: Vec<(String, String)> = vec![
        ("ConnectionStrings__PostgreSQL".into(), db.connection_string),
        ("ForceRunDatabaseMigrations".into(), "true".into()),
        (
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into(),
        ),
        (
            "Pseudonymization__Caching__Pseudonyms__IsEnabled".into(),
            "true".into(),
        ),
        (
            "Pseudonymization__Caching__SizeLimit".into(),
            "100000".into(),
        ),
    ];
    vars.extend(extra.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    let mut running = Vec::new();
    for _ in 0..2 {
        running.push(
            startup::spawn(vars.clone(), Flags::default())
                .await
                .unwrap(),
        );
    }
    running
}

fn config(servers: &[startup::Running], name: &str) -> LoadConfig {
    let list = |f: &dyn Fn(&startup::Running) -> String| {
        servers.iter().map(f).collect::<Vec<_>>().join(",")
    };
    LoadConfig {
        service: Service {
            address: list(&|s| format!("http://{}", s.grpc_addr)),
            namespace: "resilience".into(),
        },
        credentials: Default::default(),
        workload: Workload {
            rate_per_second: 50,
            load_seconds: 6,
            call_deadline_seconds: 5.0,
            max_in_flight: 500,
            seed: Some(40),
            mix: MIX.into(),
            job_rows: 0,
            privacy_probe: None,
            privacy_rounds_apart_seconds: 70,
            http_address: Some(list(&|s| format!("http://{}", s.http_addr))),
            ui_address: None,
            ui_user: "admin".into(),
            ui_tests_dir: "tests/ui".into(),
        },
        limits: Limits {
            max_outage_seconds: 0,
            max_unavailable_seconds: 0.0,
        },
        verification: Verification {
            settle_seconds: 2,
            verify_concurrency: 8,
        },
        output: Output {
            output_dir: vfps_testkit::scratch_dir(name),
            ledger_capacity: 0,
        },
    }
}

fn verdict(summary: &Summary, property: Property) -> &vfps_chaos::checker::Verdict {
    summary
        .verdicts
        .iter()
        .find(|v| v.property == property)
        .unwrap_or_else(|| panic!("no verdict {property}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasures_bundles_and_fhir_calls_pass_on_the_service_as_it_is() {
    let servers = replicas(&[]).await;
    let cfg = config(&servers, "erasure-clean");
    let summary = run::standalone(&cfg, false).await.unwrap();
    for p in [
        Property::ErasedStaysErased,
        Property::ErasableSubjects,
        Property::Bundles,
        Property::ErasureExercised,
        Property::NoInnocentFailure,
        Property::MultiPseudonyms,
        Property::MultiErasedStaysErased,
        Property::MultiExercised,
    ] {
        let v = verdict(&summary, p);
        assert_eq!(v.validity, Validity::Valid, "{p}: {v:#?}");
    }
    assert!(summary.passed, "{:#?}", summary.verdicts);
    let p8 = verdict(&summary, Property::ErasedStaysErased);
    assert!(p8.summary.contains("multi-pseudonyms"), "{}", p8.summary);
    // What the service does not offer yet was asked for, and refused.
    let b = verdict(&summary, Property::Bundles);
    assert!(
        !b.summary
            .contains("refusals seen: 0 $pseudonymize-multiple"),
        "{}",
        b.summary
    );
    assert!(summary.operations["erase"].ok > 0);
    assert!(summary.operations["bundle"].ok > 0);
    // Some erasures were checked against every replica's cache, and each
    // replica had the mapping cached before.
    assert!(
        !p8.summary.contains("cache checks: 0 ") && !p8.summary.contains("(0 caches filled"),
        "{}",
        p8.summary
    );
    // Transactions were acknowledged and refused as meant, and verification
    // looked up their fresh originals.
    let dir = cfg.output.output_dir.clone();
    let h = vfps_chaos::checker::erasure::read_history(&dir)
        .unwrap()
        .unwrap();
    let meant_refused = h
        .transactions
        .iter()
        .filter(|t| t.meant_to_fail.is_some() && t.meaning == Meaning::Refused)
        .count();
    let acknowledged_new: usize = h
        .transactions
        .iter()
        .filter(|t| t.meaning == Meaning::Acknowledged)
        .map(|t| t.new.len())
        .sum();
    assert!(meant_refused > 0 && acknowledged_new > 0, "{}", b.summary);
    assert!(
        !b.summary.contains(" 0 verified all or nothing"),
        "{}",
        b.summary
    );
    // Multi creates were acknowledged, and verification resolved each of
    // their pseudonyms on both replicas to its own original.
    let multi = h.multi.as_ref().unwrap();
    assert_eq!(multi.namespace, "resilience-multi");
    let acknowledged = multi.acknowledged();
    assert!(!acknowledged.is_empty());
    let seen: vfps_chaos::history::verified::Observed =
        serde_json::from_str(&std::fs::read_to_string(dir.join("erasures-verify.json")).unwrap())
            .unwrap();
    let resolved: usize = seen
        .multi
        .unwrap()
        .originals
        .iter()
        .filter(|o| !multi.erasures.iter().any(|e| e.original == o.original))
        .flat_map(|o| o.replicas.iter().map(move |r| (o, r)))
        .map(|(o, r)| {
            r.resolved
                .iter()
                .filter(|s| **s == vfps_chaos::history::verified::Seen::Value(o.original.clone()))
                .count()
        })
        .sum();
    assert!(
        resolved > 0,
        "{:#?}",
        verdict(&summary, Property::MultiPseudonyms)
    );
    // A saved run is re-checked from erasures.json, every replica asked again.
    assert!(dir.join("erasures.json").exists());
    assert!(dir.join("erasures-verify.json").exists());
    let again = run::check(&dir, None, None, 8, false).await.unwrap();
    for p in [
        Property::ErasedStaysErased,
        Property::MultiPseudonyms,
        Property::MultiErasedStaysErased,
    ] {
        assert_eq!(verdict(&again, p).validity, Validity::Valid, "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasures_not_announced_to_the_other_replicas_cache_fail_p8() {
    let servers = replicas(&[("VFPS_UNSAFE_ERASURE_UNANNOUNCED", "true")]).await;
    let summary = run::standalone(&config(&servers, "erasure-unannounced"), false)
        .await
        .unwrap();
    let p8 = verdict(&summary, Property::ErasedStaysErased);
    assert_eq!(p8.validity, Validity::Invalid, "{p8:#?}");
    // Caught during the load, by the replica asked again right after the
    // acknowledgement (not only by chance or after settling).
    assert!(
        p8.evidence
            .iter()
            .any(|e| e.contains(vfps_chaos::checker::cache_check::AFTER_ACK)),
        "{p8:#?}"
    );
    assert!(!summary.passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_does_not_allow_deletion_fails_the_guard() {
    let servers = replicas(&[]).await;
    let cfg = config(&servers, "erasure-not-allowed");
    // The erasable namespace made beforehand without the setting: the run's
    // own create of it answers ALREADY_EXISTS and deletes are refused.
    let endpoints = Endpoints::parse(&cfg.service.address).await.unwrap();
    let client = Client::new(endpoints, RetryPolicy::default());
    let made = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: "resilience-erasable".into(),
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                ..Default::default()
            },
            Duration::from_secs(10),
        )
        .await;
    assert!(made.is_ok());
    let summary = run::standalone(&cfg, false).await.unwrap();
    let guard = verdict(&summary, Property::ErasureExercised);
    assert_eq!(guard.validity, Validity::Invalid, "{guard:#?}");
    assert!(
        guard.summary.contains("does not allow"),
        "{}",
        guard.summary
    );
    assert!(!summary.passed);
}
