//! Creates under a namespace delete of many rows, and Creates mixed with
//! namespace churn and invalid input.

use super::*;

/// Creates of fresh originals into `bench` by `clients` workers until `stop`;
/// returns when each succeeded, and how many valid Creates failed.
pub(super) async fn timed_creates(
    grpc: &str,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<Instant>, u64) {
    let chans = channels(grpc, 4);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (mut client, stop) = (chans[c % chans.len()].clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut failed) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                let r = client
                    .create(PseudonymServiceCreateRequest {
                        namespace: "bench".into(),
                        original_value: uuid::Uuid::new_v4().to_string(),
                    })
                    .await;
                match r {
                    Ok(_) => done.push(Instant::now()),
                    Err(_) => failed += 1,
                }
            }
            (done, failed)
        }));
    }
    let (mut done, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (d, f) = t.await.unwrap();
        done.extend(d);
        failed += f;
    }
    done.sort_unstable();
    (done, failed)
}

pub(super) fn rate_between(done: &[Instant], from: Instant, to: Instant) -> f64 {
    let n = done.iter().filter(|t| **t >= from && **t < to).count();
    n as f64 / (to - from).as_secs_f64()
}

/// Creates into `bench` while a namespace of `rows` pseudonyms is deleted.
pub(super) struct DeleteUnderLoad {
    pub(super) rows: u64,
    pub(super) delete: Duration,
    pub(super) before: f64,
    pub(super) during: f64,
    pub(super) failed: u64,
}

pub(super) async fn delete_under_load(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    rows: u64,
) -> DeleteUnderLoad {
    // Without caches: with them the delete's answer also waits the cache lease,
    // which would stretch the window measured.
    let (db, server) = postgres_server(cluster, clients, Vec::new()).await;
    let mut ns = NamespaceServiceClient::connect(server.grpc.clone())
        .await
        .unwrap();
    ns.create(NamespaceServiceCreateRequest {
        name: "big".into(),
        pseudonym_generation_method: 5,
        pseudonym_length: 32,
        ..Default::default()
    })
    .await
    .unwrap();
    eprintln!("[{clients} clients] filling namespace big with {rows} pseudonyms ...");
    cluster
        .psql(
            &db.name,
            &format!(
                "INSERT INTO pseudonyms SELECT 'big', 'o' || g, md5(g::text), now(), now() \
                 FROM generate_series(1, {rows}) g"
            ),
        )
        .unwrap();
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] Creates into bench while big is deleted ...");
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move { timed_creates(&grpc, clients, stop).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    ns.delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name: "big".into() })
        .await
        .unwrap();
    let ended = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, failed) = load.await.unwrap();
    drop(server);
    let left = cluster
        .psql(
            &db.name,
            "SELECT count(*) FROM pseudonyms WHERE namespace = 'big'",
        )
        .unwrap();
    assert_eq!(left.trim(), "0", "orphans of the deleted namespace");
    let window = (ended - started).max(Duration::from_millis(100));
    DeleteUnderLoad {
        rows,
        delete: ended - started,
        before: rate_between(&done, started - Duration::from_secs(2), started),
        during: rate_between(&done, started, started + window),
        failed,
    }
}

/// Creates mixed with namespace churn (side namespaces created, filled and
/// deleted) and invalid input (NUL characters, unknown namespaces, malformed
/// page tokens).
pub(super) struct Mixed {
    pub(super) creates: f64,
    pub(super) failed_valid: u64,
    pub(super) churn_cycles: u64,
    pub(super) bad_calls: u64,
    pub(super) bad_misanswered: u64,
}

pub(super) async fn mixed(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    seconds: u64,
) -> Mixed {
    let (_db, server) = postgres_server(cluster, clients, cached_reads()).await;
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] Creates with namespace churn and invalid input ...");
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move { timed_creates(&grpc, clients, stop).await }
    });
    let churn = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move {
            let channel = Channel::from_shared(grpc).unwrap().connect_lazy();
            let mut ns = NamespaceServiceClient::new(channel.clone());
            let mut ps = PseudonymServiceClient::new(channel);
            let mut cycles = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("side-{cycles}");
                ns.create(NamespaceServiceCreateRequest {
                    name: name.clone(),
                    pseudonym_generation_method: 3,
                    pseudonym_length: 36,
                    ..Default::default()
                })
                .await
                .unwrap();
                for i in 0..50 {
                    ps.create(PseudonymServiceCreateRequest {
                        namespace: name.clone(),
                        original_value: format!("s{i}"),
                    })
                    .await
                    .unwrap();
                }
                ns.delete(vfps_proto::v1::NamespaceServiceDeleteRequest { name })
                    .await
                    .unwrap();
                cycles += 1;
            }
            cycles
        }
    });
    let bad = tokio::spawn({
        let (grpc, stop) = (server.grpc.clone(), stop.clone());
        async move {
            let mut ps =
                PseudonymServiceClient::new(Channel::from_shared(grpc).unwrap().connect_lazy());
            let (mut calls, mut misanswered) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let nul = ps
                    .create(PseudonymServiceCreateRequest {
                        namespace: "bench".into(),
                        original_value: format!("bad\u{0}{calls}"),
                    })
                    .await;
                let unknown = ps
                    .create(PseudonymServiceCreateRequest {
                        namespace: "no-such-namespace".into(),
                        original_value: "x".into(),
                    })
                    .await;
                let token = ps
                    .list(vfps_proto::v1::PseudonymServiceListRequest {
                        namespace: "bench".into(),
                        page_size: 5,
                        page_token: "not a token".into(),
                        include_total_size: false,
                    })
                    .await;
                for (r, want) in [
                    (nul.err().map(|e| e.code()), tonic::Code::InvalidArgument),
                    (unknown.err().map(|e| e.code()), tonic::Code::NotFound),
                    (token.err().map(|e| e.code()), tonic::Code::InvalidArgument),
                ] {
                    calls += 1;
                    if r != Some(want) {
                        misanswered += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (calls, misanswered)
        }
    });
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, failed_valid) = load.await.unwrap();
    let churn_cycles = churn.await.unwrap();
    let (bad_calls, bad_misanswered) = bad.await.unwrap();
    drop(server);
    Mixed {
        creates: done.len() as f64 / seconds as f64,
        failed_valid,
        churn_cycles,
        bad_calls,
        bad_misanswered,
    }
}
