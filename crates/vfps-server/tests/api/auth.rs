//! Authorization on: bearer tokens from a real OIDC issuer (the test kit's)
//! and access tokens of the database, each role allowed and denied on each
//! operation over gRPC, REST and FHIR; bad tokens of every kind refused.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::{Code, Request};
use vfps_proto::v1::{
    NamespaceServiceCreateRequest, NamespaceServiceDeleteRequest, NamespaceServiceGetAllRequest,
    NamespaceServiceGetRequest, PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
    PseudonymServiceListRequest,
};
use vfps_testkit::oidc::{OidcIssuer, AUDIENCE};

use crate::helpers::{backend_env, spawn_app_with, Backend, TestApp};

const HEX: i32 = 5;

/// Authorization on, trusting `issuer`: `admin` manages namespaces; in
/// `research`, `reader` lists, `writer` creates, `trustee` re-identifies.
pub fn secured_env(backend: Backend, issuer: &OidcIssuer) -> Vec<(String, String)> {
    let mut env = backend_env(backend).0;
    for (k, v) in [
        ("Authorization__IsEnabled", "true"),
        ("Authorization__Authority", issuer.url.as_str()),
        ("Authorization__RequireHttpsMetadata", "false"),
        ("Authorization__Audience", AUDIENCE),
        ("Authorization__AdminRoles__0", "admin"),
        ("Authorization__NamespaceRules__0__Namespace", "research"),
        ("Authorization__NamespaceRules__0__ReadRoles__0", "reader"),
        ("Authorization__NamespaceRules__0__WriteRoles__0", "writer"),
        (
            "Authorization__NamespaceRules__0__ReverseLookupRoles__0",
            "trustee",
        ),
        ("VFPS_JWKS_REFRESH_INTERVAL", "1s"),
        ("VFPS_TOKEN_CACHE_DURATION", "1s"),
    ] {
        env.push((k.to_owned(), v.to_owned()));
    }
    env
}

pub fn authed<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut r = Request::new(message);
    if let Some(t) = token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    r.map(|_| Code::Ok).unwrap_or_else(|s| s.code())
}

pub(crate) async fn grpc_create_namespace(app: &TestApp, token: Option<&str>, name: &str) -> Code {
    code(
        app.namespaces
            .clone()
            .create(authed(
                NamespaceServiceCreateRequest {
                    name: name.into(),
                    pseudonym_generation_method: HEX,
                    pseudonym_length: 16,
                    ..Default::default()
                },
                token,
            ))
            .await,
    )
}

pub(crate) async fn grpc_create(
    app: &TestApp,
    token: Option<&str>,
    ns: &str,
    original: &str,
) -> Result<String, Code> {
    app.pseudonyms
        .clone()
        .create(authed(
            PseudonymServiceCreateRequest {
                namespace: ns.into(),
                original_value: original.into(),
            },
            token,
        ))
        .await
        .map(|r| r.into_inner().pseudonym.unwrap().pseudonym_value)
        .map_err(|s| s.code())
}

async fn grpc_get(app: &TestApp, token: Option<&str>, ns: &str, pseudonym: &str) -> Code {
    code(
        app.pseudonyms
            .clone()
            .get(authed(
                PseudonymServiceGetRequest {
                    namespace: ns.into(),
                    pseudonym_value: pseudonym.into(),
                },
                token,
            ))
            .await,
    )
}

async fn grpc_list(app: &TestApp, token: Option<&str>, ns: &str) -> Code {
    code(
        app.pseudonyms
            .clone()
            .list(authed(
                PseudonymServiceListRequest {
                    namespace: ns.into(),
                    ..Default::default()
                },
                token,
            ))
            .await,
    )
}

async fn grpc_delete(app: &TestApp, token: Option<&str>, ns: &str) -> Code {
    code(
        app.namespaces
            .clone()
            .delete(authed(
                NamespaceServiceDeleteRequest { name: ns.into() },
                token,
            ))
            .await,
    )
}

async fn grpc_namespace_names(app: &TestApp, token: Option<&str>) -> Result<Vec<String>, Code> {
    app.namespaces
        .clone()
        .get_all(authed(NamespaceServiceGetAllRequest {}, token))
        .await
        .map(|r| {
            r.into_inner()
                .namespaces
                .into_iter()
                .map(|n| n.name)
                .collect()
        })
        .map_err(|s| s.code())
}

pub(crate) async fn rest(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut r = app
        .http_client
        .request(method, format!("{}{path}", app.http));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let response = r.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn fhir_parameters(ns: &str, original: &str) -> Value {
    json!({"resourceType": "Parameters", "parameter": [
        {"name": "namespace", "valueString": ns},
        {"name": "originalValue", "valueString": original},
    ]})
}

async fn each_role_is_allowed_exactly_its_operations(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let app = spawn_app_with(secured_env(backend, &issuer)).await;
    let [admin, reader, writer, trustee, stranger] =
        ["admin", "reader", "writer", "trustee", "stranger"]
            .map(|role| issuer.token(&format!("{role}-subject"), &[role]));
    let (admin, reader, writer, trustee, stranger) = (
        Some(admin.as_str()),
        Some(reader.as_str()),
        Some(writer.as_str()),
        Some(trustee.as_str()),
        Some(stranger.as_str()),
    );

    // Namespaces: admin only.
    assert_eq!(
        grpc_create_namespace(&app, None, "research").await,
        Code::Unauthenticated
    );
    assert_eq!(
        grpc_create_namespace(&app, writer, "research").await,
        Code::PermissionDenied
    );
    assert_eq!(
        grpc_create_namespace(&app, admin, "research").await,
        Code::Ok
    );
    assert_eq!(
        grpc_create_namespace(&app, admin, "scratch").await,
        Code::Ok
    );

    // Create: write.
    let p = grpc_create(&app, writer, "research", "subject-1")
        .await
        .unwrap();
    for who in [None, reader, trustee, admin, stranger] {
        let want = if who.is_none() {
            Code::Unauthenticated
        } else {
            Code::PermissionDenied
        };
        assert_eq!(
            grpc_create(&app, who, "research", "subject-2").await,
            Err(want)
        );
    }
    // Reverse lookup: reverse-lookup only; List: read only.
    assert_eq!(grpc_get(&app, trustee, "research", &p).await, Code::Ok);
    assert_eq!(grpc_list(&app, reader, "research").await, Code::Ok);
    for who in [writer, reader, admin, stranger] {
        assert_eq!(
            grpc_get(&app, who, "research", &p).await,
            Code::PermissionDenied
        );
    }
    for who in [writer, trustee, admin, stranger] {
        assert_eq!(
            grpc_list(&app, who, "research").await,
            Code::PermissionDenied
        );
    }
    assert_eq!(
        grpc_get(&app, None, "research", &p).await,
        Code::Unauthenticated
    );
    // A namespace without a rule: nobody but admins even sees it.
    assert_eq!(
        grpc_create(&app, writer, "scratch", "x").await,
        Err(Code::PermissionDenied)
    );
    assert_eq!(
        grpc_namespace_names(&app, admin).await.unwrap(),
        ["research", "scratch"]
    );
    assert_eq!(
        grpc_namespace_names(&app, writer).await.unwrap(),
        ["research"]
    );
    assert!(grpc_namespace_names(&app, stranger)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        grpc_namespace_names(&app, None).await,
        Err(Code::Unauthenticated)
    );
    let get_ns = |who| {
        let app = &app;
        async move {
            code(
                app.namespaces
                    .clone()
                    .get(authed(
                        NamespaceServiceGetRequest {
                            name: "research".into(),
                        },
                        who,
                    ))
                    .await,
            )
        }
    };
    assert_eq!(get_ns(reader).await, Code::Ok);
    assert_eq!(get_ns(stranger).await, Code::PermissionDenied);
    assert_eq!(
        grpc_delete(&app, trustee, "scratch").await,
        Code::PermissionDenied
    );
    assert_eq!(grpc_delete(&app, admin, "scratch").await, Code::Ok);

    // REST: the same decisions, as 401 and 403.
    use reqwest::Method;
    let body = json!({"originalValue": "subject-3"});
    let path = "/v1/namespaces/research/pseudonyms";
    assert_eq!(
        rest(&app, Method::POST, path, None, Some(body.clone()))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        rest(&app, Method::POST, path, reader, Some(body.clone()))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (status, created) = rest(&app, Method::POST, path, writer, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let (status, error) = rest(&app, Method::GET, &format!("{path}/{p}"), writer, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error["code"], 7, "{error}");
    assert_eq!(
        rest(&app, Method::GET, &format!("{path}/{p}"), trustee, None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        rest(&app, Method::GET, path, reader, None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        rest(&app, Method::GET, path, writer, None).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        rest(
            &app,
            Method::DELETE,
            "/v1/namespaces/research",
            writer,
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    let ns_body =
        json!({"name": "rest-made", "pseudonymGenerationMethod": HEX, "pseudonymLength": 8});
    assert_eq!(
        rest(
            &app,
            Method::POST,
            "/v1/namespaces",
            None,
            Some(json!("not even an object"))
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        rest(
            &app,
            Method::POST,
            "/v1/namespaces",
            writer,
            Some(ns_body.clone())
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        rest(&app, Method::POST, "/v1/namespaces", admin, Some(ns_body))
            .await
            .0,
        StatusCode::OK
    );

    // Two Authorization headers: neither counts (which one would is a guess).
    let r = app
        .http_client
        .get(format!("{}/v1/namespaces", app.http))
        .header("authorization", format!("Bearer {}", admin.unwrap()))
        .header("authorization", "Bearer not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // A 401 names the scheme (RFC 6750).
    let r = app
        .http_client
        .get(format!("{}/v1/namespaces", app.http))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");

    // FHIR: an OperationOutcome with the status.
    let url = "/v1/fhir/$create-pseudonym";
    let (status, outcome) = rest(
        &app,
        Method::POST,
        url,
        None,
        Some(fhir_parameters("research", "s")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(outcome["resourceType"], "OperationOutcome");
    assert_eq!(outcome["issue"][0]["code"], "login");
    let (status, outcome) = rest(
        &app,
        Method::POST,
        url,
        trustee,
        Some(fhir_parameters("research", "s")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(outcome["issue"][0]["code"], "forbidden");
    let (status, ok) = rest(
        &app,
        Method::POST,
        url,
        writer,
        Some(fhir_parameters("research", "s")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ok}");

    // Health, readiness and metrics stay open.
    assert!(app.get("/readyz").await.status().is_success());
    assert!(app.get("/livez").await.status().is_success());
    assert!(app.metrics_text().await.contains("vfps_audit_events_total"));
}

async fn bad_jwts_are_refused(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let app = spawn_app_with(secured_env(backend, &issuer)).await;
    let admin = issuer.token("root", &["admin"]);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    let valid = issuer.claims("w", &["writer"]);
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut c = valid.clone();
        edit(&mut c);
        c
    };
    let now = valid["iat"].as_u64().unwrap();
    let refused = [
        (
            "expired",
            issuer.sign(&with(&|c| c["exp"] = json!(now - 120))),
        ),
        (
            "not yet valid",
            issuer.sign(&with(&|c| c["nbf"] = json!(now + 120))),
        ),
        (
            "wrong issuer",
            issuer.sign(&with(&|c| c["iss"] = json!("https://evil.example"))),
        ),
        (
            "wrong audience",
            issuer.sign(&with(&|c| c["aud"] = json!("another-service"))),
        ),
        (
            "no exp",
            issuer.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            })),
        ),
        ("alg none", issuer.unsigned(&valid)),
        (
            "HS256 with the public key",
            issuer.hs256_with_public_key(&valid),
        ),
        ("forged signature", issuer.forged(&valid)),
        ("garbage", "not.a.jwt".to_owned()),
    ];
    for (what, token) in &refused {
        let e = app
            .pseudonyms
            .clone()
            .create(authed(
                PseudonymServiceCreateRequest {
                    namespace: "research".into(),
                    original_value: "x".into(),
                },
                Some(token),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{what}: {e:?}");
        assert!(
            !e.message().contains(token.as_str()),
            "{what}: the token is echoed"
        );
    }
    // Within the leeway (30 s), a just-expired token still works.
    let lenient = issuer.sign(&with(&|c| c["exp"] = json!(now - 5)));
    assert!(grpc_create(&app, Some(&lenient), "research", "y")
        .await
        .is_ok());

    // A key rotation: the new kid is unknown, the JWKS is fetched again (once
    // the refresh interval, 1 s here, has passed since the last fetch), and
    // the token verifies.
    let fetched = issuer.jwks_fetches();
    issuer.rotate();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rotated = issuer.token("w", &["writer"]);
    assert!(grpc_create(&app, Some(&rotated), "research", "z")
        .await
        .is_ok());
    assert_eq!(issuer.jwks_fetches(), fetched + 1);
    // Made-up kids do not make the service fetch more than once per interval.
    let before = issuer.jwks_fetches();
    let (_, rest_of_token) = rotated.split_once('.').unwrap();
    for i in 0..20 {
        use base64::Engine as _;
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": format!("made-up-{i}")});
        let token = format!(
            "{}.{rest_of_token}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(header.to_string())
        );
        assert_eq!(
            grpc_create(&app, Some(&token), "research", "w").await,
            Err(Code::Unauthenticated)
        );
    }
    assert!(
        issuer.jwks_fetches() <= before + 1,
        "{} fetches",
        issuer.jwks_fetches() - before
    );
}

async fn database_tokens_carry_grants_and_revocation_reaches_every_replica(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    let env = secured_env(backend, &issuer);
    // Two replicas on one database.
    let a = spawn_app_with(env.clone()).await;
    let b = if backend == Backend::Postgres {
        Some(spawn_app_with(env).await)
    } else {
        None
    };
    // An admin grants only what it holds: here writing and re-identifying.
    let admin = issuer.token("root", &["admin", "writer", "trustee"]);
    assert_eq!(
        grpc_create_namespace(&a, Some(&admin), "research").await,
        Code::Ok
    );
    use reqwest::Method;
    let (status, created) = rest(
        &a,
        Method::POST,
        "/v1/tokens",
        Some(&admin),
        Some(json!({"kind": "service-account", "name": "loader", "grants": ["research=write,reverse-lookup"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    let id = created["token"]["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("vfps_sat_"));
    // Listing never shows the secret or its hash.
    let (_, listed) = rest(&a, Method::GET, "/v1/tokens", Some(&admin), None).await;
    assert_eq!(listed["tokens"][0]["id"], id.as_str());
    assert!(!listed.to_string().contains(&secret[9..]));
    // Non-admins may not manage tokens.
    let (status, _) = rest(&a, Method::GET, "/v1/tokens", Some(&secret), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let replica = b.as_ref().unwrap_or(&a);
    let p = grpc_create(replica, Some(&secret), "research", "subject")
        .await
        .unwrap();
    assert_eq!(
        grpc_get(replica, Some(&secret), "research", &p).await,
        Code::Ok
    );
    assert_eq!(
        grpc_list(replica, Some(&secret), "research").await,
        Code::PermissionDenied
    );
    assert_eq!(
        grpc_create_namespace(replica, Some(&secret), "x").await,
        Code::PermissionDenied
    );
    // A token-shaped string that is not one.
    let unknown = format!("vfps_sat_{}", "A".repeat(43));
    assert_eq!(
        grpc_get(replica, Some(&unknown), "research", &p).await,
        Code::Unauthenticated
    );

    // Revoked through A: refused by the other replica within the cache bound (1 s here).
    let revoked_at = Instant::now();
    let (status, _) = rest(
        &a,
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    loop {
        match grpc_get(replica, Some(&secret), "research", &p).await {
            Code::Unauthenticated => break,
            Code::Ok => assert!(
                revoked_at.elapsed() < Duration::from_secs(3),
                "a revoked token still works after {:?}",
                revoked_at.elapsed()
            ),
            other => panic!("unexpected {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = rest(
        &a,
        Method::DELETE,
        "/v1/tokens/nosuchtoken",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// While the identity provider fails, tokens (anyone's: no credential is
/// needed to send one) make vfps fetch its keys at most once per refresh
/// interval, not once per call; calls are UNAVAILABLE meanwhile, and served
/// once the provider is back.
async fn a_failing_identity_provider_is_not_hammered(backend: Backend) {
    let issuer = OidcIssuer::start().await;
    issuer.fail(true);
    let app = spawn_app_with(secured_env(backend, &issuer)).await;
    let token = issuer.token("w", &["writer"]);
    for i in 0..20 {
        assert_eq!(
            grpc_create(&app, Some(&token), "research", &format!("o{i}")).await,
            Err(Code::Unavailable)
        );
    }
    assert_eq!(
        issuer.jwks_fetches(),
        1,
        "one fetch per refresh interval (1 s)"
    );
    issuer.fail(false);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let admin = issuer.token("root", &["admin"]);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    assert!(grpc_create(&app, Some(&token), "research", "o")
        .await
        .is_ok());
}

/// With authorization off every caller is an anonymous admin: a token it
/// could mint would outlive the switch to authorization on.
async fn the_token_admin_api_is_refused_while_authorization_is_off(backend: Backend) {
    use reqwest::Method;
    let app = spawn_app_with(backend_env(backend).0).await;
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/tokens",
            Some(json!({"kind": "service-account", "name": "backdoor", "admin": true})),
        ),
        (Method::GET, "/v1/tokens", None),
        (Method::DELETE, "/v1/tokens/someid", None),
    ] {
        let (status, answer) = rest(&app, method.clone(), path, None, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert_eq!(answer["code"], 9, "FAILED_PRECONDITION: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("Authorization__IsEnabled"),
            "{answer}"
        );
    }
}

async fn reflection_can_be_switched_off(backend: Backend) {
    let mut env = backend_env(backend).0;
    env.push(("VFPS_GRPC_REFLECTION".into(), "false".into()));
    let off = spawn_app_with(env).await;
    assert_eq!(reflection(&off).await, Err(Code::Unimplemented));
    let on = spawn_app_with(backend_env(backend).0).await;
    assert_eq!(reflection(&on).await, Ok(()));
}

/// Whether the v1 reflection service answers a list of services.
async fn reflection(app: &TestApp) -> Result<(), Code> {
    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, ServerReflectionRequest,
    };
    let channel = tonic::transport::Channel::from_shared(app.grpc.clone())
        .unwrap()
        .connect_lazy();
    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .map_err(|s| s.code())?
        .into_inner();
    stream.message().await.map_err(|s| s.code())?;
    Ok(())
}

crate::on_both_backends!(
    each_role_is_allowed_exactly_its_operations,
    bad_jwts_are_refused,
    database_tokens_carry_grants_and_revocation_reaches_every_replica,
    the_token_admin_api_is_refused_while_authorization_is_off,
    a_failing_identity_provider_is_not_hammered,
    reflection_can_be_switched_off,
);

/// An access token of the database used for the first time while the
/// database restarts is held inside the call's deadline, as the call's own
/// store operations are: its lookup is retried, not answered `UNAVAILABLE`
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_token_checked_while_the_database_restarts_is_held_inside_the_deadline() {
    let issuer = OidcIssuer::start().await;
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env =
        crate::helpers::on_postgres(secured_env(Backend::Sqlite, &issuer), &db.connection_string);
    let app = spawn_app_with(env).await;
    let admin = issuer.token("root", &["admin", "writer"]);
    assert_eq!(
        grpc_create_namespace(&app, Some(&admin), "research").await,
        Code::Ok
    );
    let (status, created) = rest(
        &app,
        reqwest::Method::POST,
        "/v1/tokens",
        Some(&admin),
        Some(json!({"kind": "service-account", "name": "loader", "grants": ["research=write"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();

    cluster.stop_server().unwrap();
    let call = {
        let app_pseudonyms = app.pseudonyms.clone();
        tokio::spawn(async move {
            app_pseudonyms
                .clone()
                .create(authed(
                    PseudonymServiceCreateRequest {
                        namespace: "research".into(),
                        original_value: "held".into(),
                    },
                    Some(&secret),
                ))
                .await
                .map(|_| ())
                .map_err(|s| (s.code(), s.message().to_owned()))
        })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !call.is_finished(),
        "the token's check must wait for the database, not fail the call: {:?}",
        call.await
    );
    cluster.start_server().unwrap();
    let result = call.await.unwrap();
    assert!(result.is_ok(), "{result:?}");
}
