//! What authorization costs: Create/s with authorization off, on with a JWT
//! from a real OIDC issuer (the test kit's), and on with a database access
//! token — one run, the same PostgreSQL, the same closed-loop clients. Prints
//! each as a ratio against "off" (target ≥ 0.9: verified credentials are
//! cached, so a call pays a hash and a map lookup, not a signature check or a
//! database read).
//!
//! `BENCH_CLIENTS` (32) closed-loop clients for `BENCH_SECONDS` (10) per phase.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tonic::transport::Channel;
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest,
};
use vfps_server::config::Flags;
use vfps_testkit::oidc::{OidcIssuer, AUDIENCE};

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn request<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(t) = token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

/// Creates/s of `clients` closed-loop clients over `seconds`, after a warm-up.
async fn creates_per_second(grpc: &str, token: Option<&str>, clients: usize, seconds: u64) -> f64 {
    let channel = Channel::from_shared(grpc.to_owned())
        .unwrap()
        .connect_lazy();
    let token = token.map(str::to_owned);
    let round = |secs: u64| {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (stop, done, token) = (stop.clone(), done.clone(), token.clone());
                let mut client = PseudonymServiceClient::new(channel.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let r = client
                            .create(request(
                                PseudonymServiceCreateRequest {
                                    namespace: "bench".into(),
                                    original_value: uuid::Uuid::new_v4().to_string(),
                                },
                                token.as_deref(),
                            ))
                            .await;
                        assert!(r.is_ok(), "{r:?}");
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.await.unwrap();
            }
            done.load(Ordering::Relaxed) as f64 / secs as f64
        }
    };
    round(2).await;
    round(seconds).await
}

/// A server on a fresh database of `cluster`, with `extra` settings and the
/// `bench` namespace made by `admin`.
async fn server(
    cluster: &vfps_testkit::PgCluster,
    extra: &[(String, String)],
    admin: Option<&str>,
) -> (String, String, tokio_util::sync::CancellationToken) {
    let db = cluster.create_database().unwrap();
    let mut env = vec![
        (
            "ConnectionStrings__PostgreSQL".to_owned(),
            format!("{};Maximum Pool Size=32", db.connection_string),
        ),
        ("ForceRunDatabaseMigrations".into(), "true".into()),
        (
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into(),
        ),
    ];
    env.extend(extra.iter().cloned());
    let running = vfps_server::startup::spawn(env, Flags::default())
        .await
        .unwrap();
    let grpc = format!("http://{}", running.grpc_addr);
    let mut ns =
        NamespaceServiceClient::new(Channel::from_shared(grpc.clone()).unwrap().connect_lazy());
    for _ in 0..200 {
        let r = ns
            .create(request(
                NamespaceServiceCreateRequest {
                    name: "bench".into(),
                    pseudonym_generation_method: 5,
                    pseudonym_length: 32,
                    ..Default::default()
                },
                admin,
            ))
            .await;
        if r.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (
        grpc,
        format!("http://{}", running.http_addr),
        running.shutdown,
    )
}

#[tokio::main]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 32) as usize;
    let seconds = env_or("BENCH_SECONDS", 10);
    eprintln!(
        "benchmark: authorization off / JWT / database token, {clients} clients, {seconds} s each"
    );
    let cluster = vfps_testkit::PgCluster::start_with(
        "fsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n",
    )
    .unwrap();
    let issuer = OidcIssuer::start().await;
    let secured: Vec<(String, String)> = [
        ("Authorization__IsEnabled", "true"),
        ("Authorization__Authority", issuer.url.as_str()),
        ("Authorization__RequireHttpsMetadata", "false"),
        ("Authorization__Audience", AUDIENCE),
        ("Authorization__AdminRoles__0", "admin"),
        ("Authorization__NamespaceRules__0__Namespace", "bench"),
        ("Authorization__NamespaceRules__0__WriteRoles__0", "writer"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let admin = issuer.token("admin", &["admin"]);
    let rounds = env_or("BENCH_ROUNDS", 3) as usize;
    // Each phase on a fresh server and database; the order rotates every
    // round so that none is always first (a cold cluster) or last.
    let names = ["authorization off", "JWT", "database token"];
    let mut rates: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let variant = (round + k) % 3;
            eprintln!("round {}/{rounds}: {} ...", round + 1, names[variant]);
            let rate = match variant {
                0 => {
                    let (grpc, _, stop) = server(&cluster, &[], None).await;
                    let r = creates_per_second(&grpc, None, clients, seconds).await;
                    stop.cancel();
                    r
                }
                1 => {
                    let (grpc, _, stop) = server(&cluster, &secured, Some(&admin)).await;
                    let jwt = issuer.token("loader", &["writer"]);
                    let r = creates_per_second(&grpc, Some(&jwt), clients, seconds).await;
                    stop.cancel();
                    r
                }
                _ => {
                    let (grpc, http, stop) = server(&cluster, &secured, Some(&admin)).await;
                    let token = database_token(&http, &admin).await;
                    let r = creates_per_second(&grpc, Some(&token), clients, seconds).await;
                    stop.cancel();
                    r
                }
            };
            rates[variant].push(rate);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut off, mut jwt, mut token] = rates;
    let (off, jwt, token) = (median(&mut off), median(&mut jwt), median(&mut token));
    println!("| Create/s, {clients} clients, PostgreSQL, median of {rounds} | authorization off | JWT | **JWT / off** | database token | **token / off** |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| vfps (gRPC) | {off:.0} | {jwt:.0} | **{:.2}** | {token:.0} | **{:.2}** |",
        jwt / off,
        token / off
    );
}

/// A service-account token with write in `bench`, made through the admin API.
async fn database_token(http: &str, admin: &str) -> String {
    let created: serde_json::Value = reqwest::Client::new()
        .post(format!("{http}/v1/tokens"))
        .bearer_auth(admin)
        .json(&serde_json::json!({"kind": "service-account", "name": "bench", "grants": ["bench=write"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["secret"].as_str().unwrap().to_owned()
}
