//! Tracing end to end: a server with `Tracing__IsEnabled=true` exports its spans
//! over OTLP/gRPC to the test kit's collector.
//!
//! Its own test binary: tracing needs the process's one global subscriber, which
//! [`telemetry::init`] installs, exactly as `vfps serve` does before serving.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, time::Duration};

use tonic::{metadata::MetadataValue, transport::Channel, Request};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest,
};
use vfps_server::{
    config::{Flags, Settings},
    telemetry,
};
use vfps_testkit::otlp::{Collector, ReceivedSpan, SpanKind};

/// The caller's trace and span, as its `traceparent` names them.
const GRPC_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const GRPC_PARENT: &str = "00f067aa0ba902b7";
const HTTP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HTTP_PARENT: &str = "b7ad6b7169203331";

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id == trace).collect()
}

fn named<'a>(spans: &[&'a ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name:?} among {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_create_keeps_the_callers_trace_and_exports_no_personal_data() {
    let collector = Collector::start().await.unwrap();
    let sqlite = vfps_testkit::scratch_dir("tracing").join("vfps.sqlite");
    let env: Vec<(String, String)> = [
        ("VFPS_SQLITE_PATH", sqlite.display().to_string()),
        ("Tracing__IsEnabled", "true".into()),
        ("Tracing__RootSampler", "AlwaysOnSampler".into()),
        ("Tracing__ServiceName", "vfps-under-test".into()),
        ("Tracing__Otlp__Endpoint", collector.endpoint.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let (settings, _) = Settings::load(env.clone(), &Flags::default()).unwrap();
    let telemetry = telemetry::init(&settings.telemetry, &settings.tracing).unwrap();
    assert!(telemetry.tracing(), "the OpenTelemetry layer is installed");

    let app = vfps_server::startup::spawn(env, Flags::default())
        .await
        .unwrap();
    let http = format!("http://{}", app.http_addr);
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !client
        .get(format!("{http}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let channel = Channel::from_shared(format!("http://{}", app.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    NamespaceServiceClient::new(channel.clone())
        .create(NamespaceServiceCreateRequest {
            name: "traced".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 32,
            ..Default::default()
        })
        .await
        .unwrap();

    // A Create over gRPC in the caller's trace.
    let original = format!("subject-{}", uuid::Uuid::new_v4().simple());
    let mut request = Request::new(PseudonymServiceCreateRequest {
        namespace: "traced".into(),
        original_value: original.clone(),
    });
    request.metadata_mut().insert(
        "traceparent",
        MetadataValue::try_from(format!("00-{GRPC_TRACE}-{GRPC_PARENT}-01")).unwrap(),
    );
    request
        .metadata_mut()
        .insert("tracestate", MetadataValue::from_static("caller=1"));
    let pseudonym = PseudonymServiceClient::new(channel.clone())
        .create(request)
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap()
        .pseudonym_value;

    // The same over REST, in another trace.
    let other_original = format!("subject-{}", uuid::Uuid::new_v4().simple());
    let answer: serde_json::Value = client
        .post(format!("{http}/v1/namespaces/traced/pseudonyms"))
        .header("traceparent", format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01"))
        .json(&serde_json::json!({"originalValue": other_original}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let other_pseudonym = answer["pseudonym"]["pseudonymValue"]
        .as_str()
        .unwrap()
        .to_owned();

    // Health checks on both ports, and the metrics port: none of them is traced.
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    assert_eq!(health.into_inner().status, 1, "SERVING");
    for path in ["/livez", "/readyz", "/healthz"] {
        let r = client.get(format!("{http}{path}")).send().await.unwrap();
        assert!(r.status().is_success(), "{path}");
    }
    let metrics = client
        .get(format!("http://{}/metrics", app.metrics_addr))
        .send()
        .await
        .unwrap();
    assert!(metrics.status().is_success());

    // Export what has finished (the batch processor would wait seconds more).
    tokio::task::block_in_place(|| telemetry.flush());
    let wanted = [
        (GRPC_TRACE, "vfps.api.v1.PseudonymService/Create"),
        (GRPC_TRACE, "coalescer.wait"),
        (GRPC_TRACE, "coalescer.batch"),
        (HTTP_TRACE, "POST /v1/namespaces/{namespace}/pseudonyms"),
        (HTTP_TRACE, "coalescer.wait"),
        (HTTP_TRACE, "coalescer.batch"),
    ];
    let spans = collector
        .wait_for(Duration::from_secs(10), |spans| {
            wanted.iter().all(|(trace, name)| {
                spans
                    .iter()
                    .any(|s| s.trace_id == *trace && s.name == *name)
            })
        })
        .await;

    // The gRPC call: a server span whose parent is the caller's span.
    let grpc = in_trace(&spans, GRPC_TRACE);
    let server = named(&grpc, "vfps.api.v1.PseudonymService/Create");
    assert_eq!(server.parent_span_id, GRPC_PARENT, "{server:#?}");
    assert_eq!(server.kind, SpanKind::Server, "{server:#?}");
    assert_eq!(server.attribute("rpc.system"), Some("grpc"));
    assert_eq!(
        server.attribute("rpc.service"),
        Some("vfps.api.v1.PseudonymService")
    );
    assert_eq!(server.attribute("rpc.method"), Some("Create"));
    assert_eq!(server.attribute("rpc.grpc.status_code"), Some("0"));
    assert_eq!(
        server.resource.get("service.name").map(String::as_str),
        Some("vfps-under-test")
    );
    // The store operation (coalesced: in the call's span, no span of its own),
    // and the coalescer's wait and batch inside it.
    assert_eq!(server.attribute("vfps.attempts"), Some("1"));
    assert!(
        !grpc.iter().any(|s| s.name == "upsert_pseudonyms"),
        "{grpc:#?}"
    );
    let wait = named(&grpc, "coalescer.wait");
    assert_eq!(wait.parent_span_id, server.span_id, "{wait:#?}");
    let batch = named(&grpc, "coalescer.batch");
    assert_eq!(batch.parent_span_id, server.span_id, "{batch:#?}");
    let size: u64 = batch
        .attribute("vfps.batch.size")
        .expect("the batch span has its size")
        .parse()
        .unwrap();
    assert!(size >= 1, "{batch:#?}");

    // The REST call: a server span named by its route template.
    let rest = in_trace(&spans, HTTP_TRACE);
    let server = named(&rest, "POST /v1/namespaces/{namespace}/pseudonyms");
    assert_eq!(server.parent_span_id, HTTP_PARENT, "{server:#?}");
    assert_eq!(
        server.attribute("http.route"),
        Some("/v1/namespaces/{namespace}/pseudonyms")
    );
    assert_eq!(server.attribute("http.response.status_code"), Some("200"));
    named(&rest, "coalescer.batch");

    // An operation the coalescer does not batch is a span of its own.
    let namespace_call = spans
        .iter()
        .find(|s| s.name == "vfps.api.v1.NamespaceService/Create")
        .expect("the namespace's Create is traced");
    let create_namespace = named(
        &in_trace(&spans, &namespace_call.trace_id),
        "create_namespace",
    );
    assert_eq!(
        create_namespace.parent_span_id, namespace_call.span_id,
        "{create_namespace:#?}"
    );
    assert_eq!(create_namespace.attribute("vfps.attempts"), Some("1"));

    // Only the API calls made above have server spans: no health check, no
    // metrics scrape.
    let servers: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        servers,
        BTreeSet::from([
            "vfps.api.v1.NamespaceService/Create",
            "vfps.api.v1.PseudonymService/Create",
            "POST /v1/namespaces/{namespace}/pseudonyms",
        ]),
        "{spans:#?}"
    );

    // Nothing any span carries holds an original value or a pseudonym.
    for secret in [&original, &pseudonym, &other_original, &other_pseudonym] {
        for span in &spans {
            assert!(
                !span.texts().iter().any(|t| t.contains(secret.as_str())),
                "span {:?} carries personal data: {span:#?}",
                span.name
            );
        }
    }

    // Concurrent Creates share batches: every caller's trace holds its batch's
    // span, or its wait links to the batch span, which links back to the caller.
    let callers: Vec<String> = (0..24u64)
        .map(|i| format!("{:032x}", 0xc0ffee00 + i))
        .collect();
    let calls: Vec<_> = callers
        .iter()
        .enumerate()
        .map(|(i, trace)| {
            let mut client = PseudonymServiceClient::new(channel.clone());
            let mut request = Request::new(PseudonymServiceCreateRequest {
                namespace: "traced".into(),
                original_value: format!("{original}-{i}"),
            });
            request.metadata_mut().insert(
                "traceparent",
                MetadataValue::try_from(format!("00-{trace}-{GRPC_PARENT}-01")).unwrap(),
            );
            tokio::spawn(async move { client.create(request).await.map(|_| ()) })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    tokio::task::block_in_place(|| telemetry.flush());
    let spans = collector
        .wait_for(Duration::from_secs(10), |spans| {
            callers.iter().all(|t| {
                spans
                    .iter()
                    .any(|s| s.trace_id == *t && s.kind == SpanKind::Server)
            })
        })
        .await;
    let batches: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "coalescer.batch")
        .collect();
    let mut shared = 0;
    for trace in &callers {
        let mine = in_trace(&spans, trace);
        let call = named(&mine, "vfps.api.v1.PseudonymService/Create");
        let wait = named(&mine, "coalescer.wait");
        if mine.iter().any(|s| s.name == "coalescer.batch") {
            continue;
        }
        shared += 1;
        let batch = batches
            .iter()
            .find(|b| {
                wait.links
                    .contains(&(b.trace_id.clone(), b.span_id.clone()))
            })
            .unwrap_or_else(|| panic!("the wait links to no batch: {wait:#?}"));
        assert!(
            batch
                .links
                .contains(&(call.trace_id.clone(), call.span_id.clone())),
            "the batch links back to its caller: {batch:#?}"
        );
    }
    eprintln!(
        "{} concurrent Creates, {shared} of them in another caller's batch",
        callers.len()
    );
    for (i, _) in callers.iter().enumerate() {
        let secret = format!("{original}-{i}");
        assert!(
            !spans
                .iter()
                .any(|s| s.texts().iter().any(|t| t.contains(&secret))),
            "a span carries an original value"
        );
    }

    app.shutdown.cancel();
    app.handle.await.unwrap().unwrap();
    tokio::task::block_in_place(|| telemetry.shutdown(Duration::from_secs(5)));
}
