//! The audit trail, the logs that must not leak, and `vfps tokens …`: the real
//! binary with authorization on, its stderr read line by line.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{json, Value};
use tonic::{transport::Channel, Code};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    NamespaceServiceDeleteRequest, PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
    PseudonymServiceListRequest,
};
use vfps_testkit::oidc::OidcIssuer;

use crate::{
    auth::{authed, secured_env},
    helpers::{Backend, ServerProcess},
};

const HEX: i32 = 5;

/// Every operation, allowed, denied and failing, with authorization on; then
/// no log line holds an original, a pseudonym or a credential, and the audit
/// trail has one event per reverse lookup, List and delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_hold_no_value_pseudonym_or_token_and_the_audit_trail_is_complete() {
    let issuer = OidcIssuer::start().await;
    let mut env = secured_env(Backend::Sqlite, &issuer);
    env.push(("RUST_LOG".into(), "debug".into()));
    env.push((
        "Authorization__NamespaceRules__0__EraseRoles__0".into(),
        "eraser".into(),
    ));
    let log_path = vfps_testkit::scratch_dir("audit").join("vfps.log");
    let server = ServerProcess::start_logging(&env, &log_path).await;
    let channel = Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect_lazy();
    let mut namespaces = NamespaceServiceClient::new(channel.clone());
    let mut pseudonyms = PseudonymServiceClient::new(channel);
    // An admin that holds what it grants below.
    // Deleting a namespace with pseudonyms erases them: it needs erase too.
    let admin = issuer.token("admin-person", &["admin", "trustee", "eraser"]);
    let writer = issuer.token("writer-person", &["writer"]);
    let trustee = issuer.token("trustee-person", &["trustee"]);
    let reader = issuer.token("reader-person", &["reader"]);
    let mut secrets: Vec<String> = vec![
        admin.clone(),
        writer.clone(),
        trustee.clone(),
        reader.clone(),
    ];

    namespaces
        .create(authed(
            NamespaceServiceCreateRequest {
                name: "research".into(),
                pseudonym_generation_method: HEX,
                pseudonym_length: 16,
                ..Default::default()
            },
            Some(&admin),
        ))
        .await
        .unwrap();
    let originals: Vec<String> = (0..5).map(|i| format!("ORIGINAL-VALUE-{i}-zq")).collect();
    let mut pseudonym_values = Vec::new();
    for o in &originals {
        let p = pseudonyms
            .create(authed(
                PseudonymServiceCreateRequest {
                    namespace: "research".into(),
                    original_value: o.clone(),
                },
                Some(&writer),
            ))
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap();
        pseudonym_values.push(p.pseudonym_value);
    }
    // Refused and failing calls carry values too.
    for (token, original) in [
        (Some(reader.as_str()), "ORIGINAL-DENIED-zq"),
        (None, "ORIGINAL-UNAUTHENTICATED-zq"),
        (Some(writer.as_str()), "ORIGINAL-WITH-NUL-\0-zq"),
        (Some("Bearer-garbage-TOKEN-zq"), "ORIGINAL-BAD-TOKEN-zq"),
    ] {
        let r = pseudonyms
            .create(authed(
                PseudonymServiceCreateRequest {
                    namespace: "research".into(),
                    original_value: original.into(),
                },
                token,
            ))
            .await;
        assert!(r.is_err());
    }
    secrets.push("Bearer-garbage-TOKEN-zq".into());
    // Reverse lookups: allowed, denied, and one of a pseudonym that is not there.
    let get = |token: Option<String>, value: String| {
        let mut client = pseudonyms.clone();
        async move {
            client
                .get(authed(
                    PseudonymServiceGetRequest {
                        namespace: "research".into(),
                        pseudonym_value: value,
                    },
                    token.as_deref(),
                ))
                .await
                .map(|_| Code::Ok)
                .unwrap_or_else(|s| s.code())
        }
    };
    assert_eq!(
        get(Some(trustee.clone()), pseudonym_values[0].clone()).await,
        Code::Ok
    );
    assert_eq!(
        get(Some(writer.clone()), pseudonym_values[1].clone()).await,
        Code::PermissionDenied
    );
    assert_eq!(
        get(None, pseudonym_values[2].clone()).await,
        Code::Unauthenticated
    );
    assert_eq!(
        get(Some(trustee.clone()), "PSEUDONYM-GUESS-zq".into()).await,
        Code::NotFound
    );
    pseudonym_values.push("PSEUDONYM-GUESS-zq".into());
    // A value put in the namespace field is not a namespace: never written.
    let r = pseudonyms
        .get(authed(
            PseudonymServiceGetRequest {
                namespace: "ORIGINAL-AS-NAMESPACE-zq\n".into(),
                pseudonym_value: "x".into(),
            },
            Some(&trustee),
        ))
        .await;
    assert_eq!(r.unwrap_err().code(), Code::PermissionDenied);
    let listed = pseudonyms
        .list(authed(
            PseudonymServiceListRequest {
                namespace: "research".into(),
                ..Default::default()
            },
            Some(&reader),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.pseudonyms.len(), 5);
    // A database token, made and used over REST.
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}/v1/tokens", server.http))
        .bearer_auth(&admin)
        .json(
            &json!({"kind": "personal", "name": "someone", "grants": ["research=reverse-lookup"]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pat = created["secret"].as_str().unwrap().to_owned();
    let pat_id = created["token"]["id"].as_str().unwrap().to_owned();
    secrets.push(pat.clone());
    let r = http
        .get(format!(
            "{}/v1/namespaces/research/pseudonyms/{}",
            server.http, pseudonym_values[3]
        ))
        .bearer_auth(&pat)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    namespaces
        .delete(authed(
            NamespaceServiceDeleteRequest {
                name: "research".into(),
            },
            Some(&admin),
        ))
        .await
        .unwrap();
    drop(server);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        text.lines().count() > 10,
        "too few log lines to judge:\n{text}"
    );
    for line in text.lines() {
        for needle in originals.iter().chain(&pseudonym_values).chain(&secrets) {
            assert!(
                !line.contains(needle.as_str()),
                "a log line leaks {needle:?}:\n{line}"
            );
        }
        for s in &secrets {
            // Not even a JWT's signature part.
            if let Some((_, sig)) = s.rsplit_once('.') {
                assert!(
                    !line.contains(sig),
                    "a log line leaks a token signature:\n{line}"
                );
            }
        }
        assert!(
            !line.contains("-zq"),
            "a log line holds a test value:\n{line}"
        );
    }
    let audit: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "vfps::audit")
        .collect();
    let summary: Vec<String> = audit
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {}",
                e["operation"].as_str().unwrap_or("?"),
                e["subject"].as_str().unwrap_or("?"),
                e["namespace"].as_str().unwrap_or("?"),
                e["outcome"].as_str().unwrap_or("?"),
                e["items"]
            )
        })
        .collect();
    let token_subject = format!("token:{pat_id}");
    // A JWT's caller is typed by its issuer.
    let jwt = |sub: &str| format!("jwt:{}#{sub}", issuer.url);
    let expected = [
        format!(
            "PseudonymService/Get {} research allowed 1",
            jwt("trustee-person")
        ),
        format!(
            "PseudonymService/Get {} research denied 0",
            jwt("writer-person")
        ),
        "PseudonymService/Get unauthenticated research denied 0".to_owned(),
        format!(
            "PseudonymService/Get {} research failed 0",
            jwt("trustee-person")
        ),
        format!(
            "PseudonymService/Get {} <invalid> denied 0",
            jwt("trustee-person")
        ),
        format!(
            "PseudonymService/List {} research allowed 5",
            jwt("reader-person")
        ),
        format!("Tokens/Create {}  allowed 1", jwt("admin-person")),
        format!("PseudonymService/Get {token_subject} research allowed 1"),
        format!(
            "NamespaceService/Delete {} research allowed 5",
            jwt("admin-person")
        ),
        format!(
            "Pseudonyms/Erase {} research allowed 5",
            jwt("admin-person")
        ),
    ];
    assert_eq!(summary, expected, "{audit:#?}");
    assert!(audit.iter().all(|e| e["timestamp"].is_string()));
    // The mint names the minter, the token and what it grants.
    assert_eq!(audit[6]["token"], pat_id.as_str());
    assert_eq!(audit[6]["grants"], "research=reverse-lookup");
    assert_eq!(audit[7]["token_id"], pat_id.as_str());
}

fn vfps_tokens(sqlite: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .arg("tokens")
        .args(args)
        .env("VFPS_SQLITE_PATH", sqlite)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_tokens_command_creates_lists_and_revokes_and_names_bad_input() {
    let sqlite = vfps_testkit::scratch_dir("tokens-cli").join("vfps.sqlite");
    let (ok, secret, err) = vfps_tokens(
        &sqlite,
        &[
            "create",
            "--name",
            "etl",
            "--grant",
            "research=write",
            "--expires-in",
            "720h",
        ],
    );
    assert!(ok, "{err}");
    let secret = secret.trim();
    assert!(
        secret.starts_with("vfps_sat_") && secret.len() == 52,
        "{secret}"
    );
    assert!(!err.contains(secret), "the secret goes to stdout only");
    let (ok, listed, err) = vfps_tokens(&sqlite, &["list"]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["name"], "etl");
    assert_eq!(listed[0]["grants"], json!(["research=write"]));
    assert!(listed[0]["expiresAt"].is_string() && listed[0]["revokedAt"].is_null());
    assert!(!listed.to_string().contains(&secret[9..]));
    let id = listed[0]["id"].as_str().unwrap();
    let (ok, _, err) = vfps_tokens(&sqlite, &["revoke", id]);
    assert!(ok, "{err}");
    let (_, listed, _) = vfps_tokens(&sqlite, &["list"]);
    assert!(serde_json::from_str::<Value>(&listed).unwrap()[0]["revokedAt"].is_string());

    // Bad input: a non-zero exit and a message naming the value.
    for (args, named) in [
        (
            vec!["create", "--name", "x", "--grant", "research=own"],
            "\"own\"",
        ),
        (
            vec!["create", "--name", "x", "--kind", "robot"],
            "\"robot\"",
        ),
        (
            vec!["create", "--name", "", "--grant", "a=read"],
            "token name",
        ),
        (vec!["revoke", "nosuchtoken"], "\"nosuchtoken\""),
        (vec!["revoke", "../etc"], "letters and digits"),
    ] {
        let (ok, _, err) = vfps_tokens(&sqlite, &args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(named), "{args:?}: {err}");
    }
}
