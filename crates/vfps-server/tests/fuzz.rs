//! Fuzzing on stable Rust: property-based generators for every parser that
//! reads what a caller or an operator sends — the Npgsql connection string,
//! page tokens, REST JSON bodies, FHIR Parameters, bearer headers and the
//! formats of access tokens and grants. Each input must be answered (parsed,
//! or refused with the documented error kind), never with a panic.
//!
//! `VFPS_FUZZ_CASES` is the total number of inputs (default 24,000, which
//! `cargo test` runs in seconds); `scripts/fuzz.sh` runs a million or more in
//! release mode. Prints the count per target and in total.

#![allow(clippy::unwrap_used)]

use std::{
    process::ExitCode,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use proptest::{
    prelude::*,
    test_runner::{Config, TestRunner},
};
use vfps_core::{
    access::{database_token_kind, Grant, TokenKind, TokenSecret},
    ErrorKind, PageCursor,
};

/// Strings a parser may meet: printable, unicode, control characters, the
/// separators each format uses.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,64}",
        "[ -~]{0,200}",
        prop::collection::vec(any::<char>(), 0..80).prop_map(|c| c.into_iter().collect()),
        "[=;,:'\"\\\\ a-zA-Z0-9\u{0}-\u{1f}*_.-]{0,120}",
    ]
}

fn npgsql() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("Host"),
        Just("Server"),
        Just("Port"),
        Just("Database"),
        Just("Username"),
        Just("User ID"),
        Just("Password"),
        Just("SSL Mode"),
        Just("Root Certificate"),
        Just("Target Session Attributes"),
        Just("Timeout"),
        Just("Command Timeout"),
        Just("Maximum Pool Size"),
        Just("Keepalive"),
        Just("Application Name"),
        Just("unknown key"),
    ];
    let value = prop_oneof![
        text(),
        "[0-9-]{0,12}",
        "[a-z0-9.,:-]{0,40}",
        Just("'quoted;value'".to_owned()),
        Just("\"a=b\"".to_owned()),
    ];
    prop_oneof![
        prop::collection::vec((key, value), 0..10).prop_map(|pairs| pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")),
        text(),
    ]
}

fn json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
        prop_oneof![
            Just("Parameters"),
            Just("namespace"),
            Just("originalValue"),
            Just("valueString"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("resourceType".to_owned()),
            Just("parameter".to_owned()),
            Just("name".to_owned()),
            Just("valueString".to_owned()),
            Just("originalValue".to_owned()),
            Just("original_value".to_owned()),
            Just("namespace".to_owned()),
            text(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bodies as sent: JSON documents, almost-JSON, and raw bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        json().prop_map(|v| v.to_string().into_bytes()),
        json().prop_map(|v| {
            let mut b = v.to_string().into_bytes();
            b.truncate(b.len() / 2);
            b
        }),
        prop::collection::vec(any::<u8>(), 0..256),
    ]
}

fn bearer_header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (
            prop_oneof![
                Just("Bearer"),
                Just("bearer"),
                Just("Basic"),
                Just(""),
                Just("BEARER")
            ],
            "[ \t]{0,3}",
            text()
        )
            .prop_map(|(s, sp, t)| format!("{s}{sp}{t}").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..9000),
    ]
}

fn token_like() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop_oneof![
                Just("vfps_sat_"),
                Just("vfps_pat_"),
                Just("vfps_xyz_"),
                Just("")
            ],
            "[A-Za-z0-9_/+=-]{0,60}"
        )
            .prop_map(|(p, r)| format!("{p}{r}")),
        Just(()).prop_map(|()| TokenSecret::mint(TokenKind::ServiceAccount)
            .expose()
            .to_owned()),
        text(),
    ]
}

struct Target {
    name: &'static str,
    inputs: AtomicU64,
}

fn run<S: Strategy>(
    target: &Target,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value),
) -> Result<(), String>
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    });
    runner
        .run(&strategy, |input| {
            target.inputs.fetch_add(1, Ordering::Relaxed);
            check(input);
            Ok(())
        })
        .map_err(|e| format!("{}: {e}", target.name))
}

fn main() -> ExitCode {
    // `cargo test -- --list` and friends: nothing to list, nothing to run.
    if std::env::args().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let total: u64 = std::env::var("VFPS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24_000);
    let targets = [
        "npgsql connection string",
        "page token",
        "REST JSON body",
        "FHIR Parameters",
        "bearer header",
        "token and grant formats",
    ]
    .map(|name| Target {
        name,
        inputs: AtomicU64::new(0),
    });
    let per = u32::try_from((total / targets.len() as u64).max(1)).unwrap_or(u32::MAX);
    let started = Instant::now();
    let refused = |kind: ErrorKind| assert_eq!(kind, ErrorKind::InvalidArgument);
    let results = [
        run(&targets[0], per, npgsql(), |s| {
            if let Err(e) = vfps_store::postgres::npgsql::parse(&s, None, Some("pw-from-env")) {
                // A refusal never repeats a password back.
                assert!(!e.to_string().contains("pw-from-env"));
            }
        }),
        run(
            &targets[1],
            per,
            prop_oneof![
                text(),
                "[ -~]{1,80}".prop_map(|p| PageCursor { pseudonym_value: p }.encode()),
            ],
            |s| match PageCursor::decode(&s) {
                Ok(c) => assert_eq!(PageCursor::decode(&c.encode()).unwrap(), c),
                Err(e) => refused(e.kind),
            },
        ),
        run(&targets[2], per, body(), |b| {
            let parsed = vfps_server::http::rest_body::<
                vfps_proto::v1::PseudonymServiceCreateRequest,
            >(&axum::body::Bytes::from(b));
            if let Err(e) = parsed {
                refused(e.kind);
            }
        }),
        run(&targets[3], per, body(), |b| {
            if let Err(e) = vfps_server::fhir::create_parameters(&b) {
                refused(e.kind);
            }
        }),
        run(
            &targets[4],
            per,
            bearer_header(),
            |h| match vfps_server::auth::bearer(vfps_server::auth::AuthHeader::One(&h)) {
                Ok(t) => assert!(!t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic())),
                Err(e) => assert_eq!(e.kind, ErrorKind::Unauthenticated),
            },
        ),
        run(&targets[5], per, (token_like(), text()), |(t, g)| {
            if let Some(kind) = database_token_kind(&t) {
                assert!(t.starts_with(kind.prefix()) && t.len() == 52);
            }
            match Grant::parse(&g) {
                Ok(grant) => assert_eq!(Grant::parse(&grant.to_string()).unwrap(), grant),
                Err(e) => refused(e.kind),
            }
        }),
    ];
    let mut all = 0;
    for t in &targets {
        let n = t.inputs.load(Ordering::Relaxed);
        all += n;
        println!("fuzz: {:<26} {n:>9} inputs", t.name);
    }
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    println!(
        "fuzz: {all} generated inputs in {:.1} s, {} failing target(s)",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    for f in &failures {
        eprintln!("fuzz: FAILED {f}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
