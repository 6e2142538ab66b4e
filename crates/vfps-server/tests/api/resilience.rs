//! Database outages and concurrency across processes.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Request};
use vfps_proto::v1::{
    pseudonym_service_client::PseudonymServiceClient, PseudonymServiceCreateRequest,
};

use crate::helpers::{spawn_app_with, ServerProcess};

fn create_request(
    namespace: &str,
    original: &str,
    timeout: Duration,
) -> Request<PseudonymServiceCreateRequest> {
    let mut r = Request::new(PseudonymServiceCreateRequest {
        namespace: namespace.into(),
        original_value: original.into(),
    });
    r.set_timeout(timeout);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_is_unavailable_then_calls_succeed_after_restart() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string.replace("Timeout=2", "Timeout=1"),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
    ];
    let app = spawn_app_with(env).await;
    app.namespace("n", 5, 16).await;
    let before = app.create("n", "kept").await.unwrap();

    cluster.stop_server().unwrap();
    let mut client = app.pseudonyms.clone();
    let err = client
        .create(create_request("n", "during-outage", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let health = app.get("/healthz").await;
    assert_eq!(health.status(), 503, "/healthz reports the database");
    let ready = app.get("/readyz").await;
    assert_eq!(
        ready.status(),
        200,
        "within the grace period the replica stays ready"
    );
    let live = app.get("/livez").await;
    assert_eq!(live.status(), 200, "liveness never depends on the database");

    cluster.start_server().unwrap();
    let after = client
        .create(create_request("n", "kept", Duration::from_secs(10)))
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap();
    assert_eq!(after.pseudonym_value, before.pseudonym_value);
    app.wait_ready().await;
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(r#"code="UNAVAILABLE",method="PseudonymService/Create",transport="grpc""#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"code="INTERNAL""#),
        "a database outage is never INTERNAL"
    );
    // The Create during the outage was retried until its deadline, each retry
    // counted by its cause (refused connections; timeouts while it restarts).
    let retries: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("vfps_store_retries_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(retries >= 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_held_inside_its_deadline_while_the_database_restarts() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string.clone(),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
    ];
    let app = spawn_app_with(env).await;
    app.namespace("n", 5, 16).await;
    cluster.stop_server().unwrap();
    let mut client = app.pseudonyms.clone();
    let call = tokio::spawn(async move {
        client
            .create(create_request("n", "held", Duration::from_secs(15)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !call.is_finished(),
        "the call must wait for the database, not fail"
    );
    cluster.start_server().unwrap();
    let result = call.await.unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_creates_through_two_processes_give_one_pseudonym_per_original() {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string.clone(),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        (
            "Init__v1__Namespaces__0__Name".to_owned(),
            "shared".to_owned(),
        ),
        (
            "Init__v1__Namespaces__0__PseudonymGenerationMethod".to_owned(),
            "5".to_owned(),
        ),
        (
            "Init__v1__Namespaces__0__PseudonymLength".to_owned(),
            "32".to_owned(),
        ),
    ];
    let (a, b) = tokio::join!(ServerProcess::start(&env), ServerProcess::start(&env));
    let clients = [
        PseudonymServiceClient::connect(a.grpc.clone())
            .await
            .unwrap(),
        PseudonymServiceClient::connect(b.grpc.clone())
            .await
            .unwrap(),
    ];
    let mut calls = Vec::new();
    for i in 0..1200 {
        let mut client = clients[i % 2].clone();
        let original = format!("subject-{}", i % 120);
        calls.push(tokio::spawn(async move {
            let p = client
                .create(create_request("shared", &original, Duration::from_secs(30)))
                .await
                .map(|r| r.into_inner().pseudonym.unwrap().pseudonym_value);
            (original, p)
        }));
    }
    let mut by_original: HashMap<String, String> = HashMap::new();
    for call in calls {
        let (original, p) = call.await.unwrap();
        let p = p.unwrap_or_else(|e| panic!("a concurrent Create failed: {e:?}"));
        let first = by_original.entry(original).or_insert_with(|| p.clone());
        assert_eq!(*first, p, "one original received two pseudonyms");
    }
    assert_eq!(by_original.len(), 120);
    let rows = cluster
        .psql(
            &db.name,
            "SELECT count(*), count(DISTINCT pseudonym_value) FROM pseudonyms",
        )
        .unwrap();
    assert_eq!(rows.trim(), "120|120");
}

/// Polls `path` every 100 ms for `during`; returns the statuses seen.
async fn statuses(app: &crate::helpers::TestApp, path: &str, during: Duration) -> Vec<u16> {
    let end = tokio::time::Instant::now() + during;
    let mut seen = Vec::new();
    while tokio::time::Instant::now() < end {
        seen.push(app.get(path).await.status().as_u16());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_outlasts_a_database_outage_shorter_than_the_grace_but_not_a_longer_one() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            db.connection_string.replace("Timeout=2", "Timeout=0.5"),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ("VFPS_READINESS_DATABASE_GRACE".to_owned(), "3s".to_owned()),
        ("VFPS_MAX_CALL_DEADLINE".to_owned(), "10s".to_owned()),
    ];
    let app = spawn_app_with(env).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Channel::from_shared(app.grpc.clone())
            .unwrap()
            .connect_lazy(),
    );
    let grpc_serving =
        |r: Result<tonic::Response<tonic_health::pb::HealthCheckResponse>, tonic::Status>| {
            r.unwrap().into_inner().status
                == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        };

    // Shorter than the grace: ready throughout, while /healthz reports the outage.
    cluster.stop_server().unwrap();
    let ready = statuses(&app, "/readyz", Duration::from_millis(1500)).await;
    assert!(ready.iter().all(|s| *s == 200), "{ready:?}");
    assert_eq!(app.get("/healthz").await.status(), 503);
    assert!(grpc_serving(
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
    ));
    cluster.start_server().unwrap();
    let healthy = statuses(&app, "/healthz", Duration::from_millis(1500)).await;
    assert_eq!(healthy.last(), Some(&200), "{healthy:?}");

    // Longer than the grace: not ready after it, ready again once the database is.
    cluster.stop_server().unwrap();
    let ready = statuses(&app, "/readyz", Duration::from_millis(4500)).await;
    assert_eq!(ready.first(), Some(&200), "{ready:?}");
    assert_eq!(ready.last(), Some(&503), "{ready:?}");
    let body = app.get("/readyz").await.text().await.unwrap();
    assert!(body.contains("unreachable"), "{body}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while grpc_serving(
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await,
    ) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gRPC health never followed readiness"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.start_server().unwrap();
    app.wait_ready().await;
}

/// A Create that meets a stopped database is retried until its deadline; its
/// trace (exported by the real binary to a collector in this test) shows every
/// retry with its reason on the call's span, and the call's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_shows_its_retries_and_their_reasons_in_its_trace() {
    let collector = vfps_testkit::otlp::Collector::start().await.unwrap();
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env: Vec<(String, String)> = [
        (
            "ConnectionStrings__PostgreSQL",
            db.connection_string.replace("Timeout=2", "Timeout=1"),
        ),
        ("ForceRunDatabaseMigrations", "true".into()),
        ("Tracing__IsEnabled", "true".into()),
        ("Tracing__RootSampler", "AlwaysOnSampler".into()),
        ("Tracing__Otlp__Endpoint", collector.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let server = ServerProcess::start(&env).await;
    let channel = channel_with_namespace_n(&server).await;
    let mut client = PseudonymServiceClient::new(channel);
    // Caches the namespace: the Create below goes straight to its upsert.
    client
        .create(create_request("n", "before", Duration::from_secs(5)))
        .await
        .unwrap();

    cluster.stop_server().unwrap();
    let err = client
        .create(create_request("n", "during-outage", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let failed = |s: &vfps_testkit::otlp::ReceivedSpan| {
        s.name == "vfps.api.v1.PseudonymService/Create"
            && s.attribute("rpc.grpc.status_code") == Some("14")
    };
    let spans = collector
        .wait_for(Duration::from_secs(10), |spans| spans.iter().any(failed))
        .await;
    let call = spans
        .iter()
        .find(|s| failed(s))
        .unwrap_or_else(|| panic!("no failed Create span: {spans:#?}"));
    assert_eq!(call.status_code, 2, "the call's span failed: {call:#?}");
    let retries: Vec<_> = call.events.iter().filter(|(n, _)| n == "retry").collect();
    assert!(!retries.is_empty(), "no retry event: {call:#?}");
    for (_, attributes) in &retries {
        assert!(
            ["unavailable", "timeout"]
                .contains(&attributes.get("reason").map(String::as_str).unwrap_or("")),
            "a retry names its reason: {call:#?}"
        );
        assert!(attributes.contains_key("attempt") && attributes.contains_key("backoff_ms"));
    }
    let attempts: usize = call.attribute("vfps.attempts").unwrap().parse().unwrap();
    assert_eq!(attempts, retries.len() + 1, "{call:#?}");
    assert!(call.attribute("error.type").is_some(), "{call:#?}");
    drop(server);
}

/// A TCP proxy to PostgreSQL that, once armed, forwards the next `COMMIT`,
/// withholds the answer and closes both sides: a commit whose acknowledgement
/// was lost, as when the connection breaks in a failover.
struct CommitCutter {
    port: u16,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CommitCutter {
    async fn start(upstream_port: u16) -> Self {
        use std::sync::{atomic::AtomicBool, atomic::AtomicU64, Arc};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await
                else {
                    continue;
                };
                tokio::spawn(Self::pump(client, server, a.clone(), c.clone()));
            }
        });
        Self { port, armed, cuts }
    }

    async fn pump(
        client: tokio::net::TcpStream,
        server: tokio::net::TcpStream,
        armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        cuts: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        use std::sync::{atomic::AtomicBool, atomic::Ordering::SeqCst, Arc};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let withhold = Arc::new(AtomicBool::new(false));
        let w = withhold.clone();
        let back = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = sr.read(&mut buf).await {
                if n == 0 || w.load(SeqCst) || cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = cr.read(&mut buf).await {
            let commit = buf[..n].windows(6).any(|w| w == b"COMMIT");
            if commit && armed.swap(false, SeqCst) {
                withhold.store(true, SeqCst);
                cuts.fetch_add(1, SeqCst);
                let _ = sw.write_all(&buf[..n]).await;
                // The client sees its side close when the answer comes; the
                // database's side stays open until it has surely committed.
                tokio::time::sleep(Duration::from_millis(300)).await;
                break;
            }
            if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        back.abort();
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn cuts(&self) -> u64 {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A namespace Create or Delete that committed, but whose acknowledgement the
/// connection lost, is retried by the server; the retry must recognise the
/// call's own write instead of answering `ALREADY_EXISTS` or `NOT_FOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_change_whose_commit_acknowledgement_was_lost_is_answered_as_done() {
    use vfps_proto::v1::{NamespaceServiceCreateRequest, NamespaceServiceDeleteRequest};
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let cutter = CommitCutter::start(cluster.port()).await;
    let env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            format!(
                "{};SSL Mode=Disable",
                db.connection_string.replace(
                    &format!("Port={}", cluster.port()),
                    &format!("Port={}", cutter.port)
                )
            ),
        ),
        ("ForceRunDatabaseMigrations".to_owned(), "true".to_owned()),
        ("VFPS_METRICS_COUNT_INTERVAL".to_owned(), "1h".to_owned()),
    ];
    let app = spawn_app_with(env).await;
    let mut namespaces = app.namespaces.clone();
    cutter.arm();
    let created = namespaces
        .create(NamespaceServiceCreateRequest {
            name: "n".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 16,
            ..Default::default()
        })
        .await;
    assert_eq!(cutter.cuts(), 1, "the commit's answer was withheld");
    assert!(created.is_ok(), "{created:?}");
    assert!(app.create("n", "o").await.is_ok(), "and it exists");

    cutter.arm();
    let deleted = namespaces
        .delete(NamespaceServiceDeleteRequest { name: "n".into() })
        .await;
    assert_eq!(cutter.cuts(), 2, "the commit's answer was withheld");
    assert!(deleted.is_ok(), "{deleted:?}");
    assert_eq!(
        app.create("n", "o").await.unwrap_err().code(),
        Code::NotFound,
        "and it is gone"
    );
}

/// A stalled server (a stop-the-world pause, a frozen node) comes back to a
/// connection full of streams its callers have cancelled at their deadlines.
/// Those resets must not make the server drop the connection (HTTP/2's rapid
/// reset defence, `ENHANCE_YOUR_CALM`), failing the calls still waiting on it
/// with `RESOURCE_EXHAUSTED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cancelled_during_a_stall_do_not_fail_the_calls_still_waiting() {
    let (env, _) = crate::helpers::backend_env(crate::helpers::Backend::Sqlite);
    let server = ServerProcess::start(&env).await;
    let channel = channel_with_namespace_n(&server).await;
    let client = PseudonymServiceClient::new(channel);
    let call = |original: String, timeout: Duration| {
        let mut c = client.clone();
        tokio::spawn(async move {
            c.create(create_request("n", &original, timeout))
                .await
                .map(|_| ())
                .map_err(|s| s.code())
        })
    };
    server.signal("STOP");
    let cancelled: Vec<_> = (0..200)
        .map(|i| call(format!("cancelled-{i}"), Duration::from_millis(300)))
        .collect();
    // Their deadlines pass and the client resets their streams meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let waiting: Vec<_> = (0..20)
        .map(|i| call(format!("waiting-{i}"), Duration::from_secs(20)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("CONT");
    for c in cancelled {
        // tonic's own timeout says Cancelled.
        let code = c.await.unwrap();
        assert!(
            matches!(code, Err(Code::Cancelled | Code::DeadlineExceeded)),
            "{code:?}"
        );
    }
    let mut codes = HashMap::new();
    for w in waiting {
        *codes.entry(w.await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(codes, HashMap::from([(Ok(()), 20)]), "{codes:?}");
}

/// The same stall seen by REST callers over HTTP/2 (h2c, prior knowledge): the
/// HTTP port must not drop the connection either when it comes back to the
/// streams its callers cancelled meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_calls_cancelled_during_a_stall_do_not_fail_the_calls_still_waiting() {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;

    let (env, _) = crate::helpers::backend_env(crate::helpers::Backend::Sqlite);
    let server = ServerProcess::start(&env).await;
    drop(channel_with_namespace_n(&server).await);
    let authority = server.http.trim_start_matches("http://").to_owned();
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let call = |original: String, timeout: Duration| {
        let mut sender = sender.clone();
        let request =
            hyper::Request::post(format!("http://{authority}/v1/namespaces/n/pseudonyms"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(format!(
                    r#"{{"originalValue":"{original}"}}"#
                ))))
                .unwrap();
        tokio::spawn(async move {
            tokio::time::timeout(timeout, async move {
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                if status == 200 {
                    Ok(())
                } else {
                    Err(format!("{status}: {:?}", body.to_bytes()))
                }
            })
            .await
            .unwrap_or_else(|_| Err("deadline".to_owned()))
        })
    };
    server.signal("STOP");
    let cancelled: Vec<_> = (0..200)
        .map(|i| call(format!("cancelled-{i}"), Duration::from_millis(300)))
        .collect();
    // Their deadlines pass and the client resets their streams meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let waiting: Vec<_> = (0..20)
        .map(|i| call(format!("waiting-{i}"), Duration::from_secs(20)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("CONT");
    for c in cancelled {
        assert_eq!(c.await.unwrap(), Err("deadline".to_owned()));
    }
    let mut outcomes = HashMap::new();
    for w in waiting {
        *outcomes.entry(w.await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(outcomes, HashMap::from([(Ok(()), 20)]), "{outcomes:?}");
}

/// A channel to `server` and a namespace `n` (HEX, 16) created through it.
async fn channel_with_namespace_n(server: &ServerProcess) -> tonic::transport::Channel {
    let channel = tonic::transport::Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    vfps_proto::v1::namespace_service_client::NamespaceServiceClient::new(channel.clone())
        .create(vfps_proto::v1::NamespaceServiceCreateRequest {
            name: "n".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 16,
            ..Default::default()
        })
        .await
        .unwrap();
    channel
}
