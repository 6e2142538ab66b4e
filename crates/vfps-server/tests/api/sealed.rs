//! Originals sealed at rest (`VFPS_KEYS`, docs/privacy.md): with a key
//! source every path works as before, and nothing the database keeps —
//! its tables as read back, its files — holds an original in plain text.
//! (The SQLite suite runs whole with a key file; these look at the bytes.)

use serde_json::{json, Value};

use crate::{
    helpers::{backend_env, spawn_app_with, Backend, TestApp},
    mii::{identifier, parameters, post},
};

const UUID4: i32 = 3;
const SYSTEM: &str = "https://example.org/patient";

/// Originals that are easy to find in bytes.
pub(crate) fn originals(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("plain-original-{i:05}")).collect()
}

/// Every way an original reaches the store: Create, `$pseudonymize`, a
/// transaction Bundle, `$pseudonymize-multiple`; each answered and looked
/// up back.
pub(crate) async fn write_every_way(app: &TestApp, originals: &[String]) {
    app.namespace("sealed", UUID4, 36).await;
    crate::mii::namespace(app, "mii", UUID4, 36, true).await;
    app.namespaces
        .clone()
        .create(vfps_proto::v1::NamespaceServiceCreateRequest {
            name: "many".into(),
            pseudonym_generation_method: UUID4,
            pseudonym_length: 36,
            multi_pseudonym: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let (a, rest) = originals.split_at(originals.len() / 4);
    let (b, rest) = rest.split_at(rest.len() / 3);
    let (c, d) = rest.split_at(rest.len() / 2);
    for o in a {
        let p = app.create("sealed", o).await.unwrap();
        assert_eq!(p.original_value.as_deref(), Some(o.as_str()));
        let back: Value = app
            .get_json(&format!(
                "/v1/namespaces/sealed/pseudonyms/{}",
                p.pseudonym_value
            ))
            .await;
        assert_eq!(back["pseudonym"]["originalValue"], json!(o), "{back}");
        // Created again: the same pseudonym (found by its blind index).
        let again = app.create("sealed", o).await.unwrap();
        assert_eq!(again.pseudonym_value, p.pseudonym_value);
    }
    for o in b {
        let (status, answer) = post(
            app,
            None,
            "$pseudonymize",
            &parameters(&[
                ("context", identifier(SYSTEM, "mii")),
                ("original", identifier(SYSTEM, o)),
            ]),
        )
        .await;
        assert!(status.is_success(), "{answer}");
    }
    let entries: Vec<Value> = c
        .iter()
        .map(|o| {
            json!({"request": {"method": "POST", "url": "$pseudonymize"},
                   "resource": parameters(&[("context", identifier(SYSTEM, "mii")),
                                            ("original", identifier(SYSTEM, o))])})
        })
        .collect();
    let (status, answer) = post(
        app,
        None,
        "",
        &json!({"resourceType": "Bundle", "type": "transaction", "entry": entries}),
    )
    .await;
    assert!(status.is_success(), "{answer}");
    for o in d {
        let mut body = parameters(&[
            ("context", identifier(SYSTEM, "many")),
            ("original", identifier(SYSTEM, o)),
        ]);
        body["parameter"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "count", "valueInteger": 2}));
        let (status, answer) = post(app, None, "$pseudonymize-multiple", &body).await;
        assert!(status.is_success(), "{answer}");
        // count 0 answers both, found by the index.
        let mut read = parameters(&[
            ("context", identifier(SYSTEM, "many")),
            ("original", identifier(SYSTEM, o)),
        ]);
        read["parameter"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "count", "valueInteger": 0}));
        let (status, all) = post(app, None, "$pseudonymize-multiple", &read).await;
        assert!(status.is_success(), "{all}");
        assert_eq!(all.to_string().matches("\"pseudonym\"").count(), 2, "{all}");
    }
    // The MII originals resolve back, and an erasure finds its row.
    let (status, answer) = post(
        app,
        None,
        "$de-pseudonymize",
        &parameters(&[
            ("context", identifier(SYSTEM, "mii")),
            (
                "pseudonym",
                identifier(SYSTEM, &mii_pseudonym(app, &b[0]).await),
            ),
        ]),
    )
    .await;
    assert!(status.is_success(), "{answer}");
    assert!(answer.to_string().contains(&b[0]), "{answer}");
    let (status, answer) = post(
        app,
        None,
        "$delete-pseudonym",
        &parameters(&[
            ("context", identifier(SYSTEM, "mii")),
            ("original", identifier(SYSTEM, &b[1])),
        ]),
    )
    .await;
    assert!(status.is_success(), "{answer}");
}

async fn mii_pseudonym(app: &TestApp, original: &str) -> String {
    let (_, answer) = post(
        app,
        None,
        "$pseudonymize",
        &parameters(&[
            ("context", identifier(SYSTEM, "mii")),
            ("original", identifier(SYSTEM, original)),
        ]),
    )
    .await;
    vfps_fhir_value(&answer, "pseudonym")
}

/// The `value` of the named parameter's identifier.
fn vfps_fhir_value(parameters: &Value, name: &str) -> String {
    crate::mii::named(parameters, name)["valueIdentifier"]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{parameters}"))
        .to_owned()
}

/// Every file under `dir`, concatenated.
fn bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(bytes_under(&path));
        } else if let Ok(b) = std::fs::read(&path) {
            out.extend(b);
        }
    }
    out
}

fn found_in(haystack: &[u8], originals: &[String]) -> Vec<String> {
    originals
        .iter()
        .filter(|o| haystack.windows(o.len()).any(|w| w == o.as_bytes()))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_hold_no_original_with_a_key_source() {
    let (env, _) = backend_env(Backend::Sqlite);
    let file =
        std::path::PathBuf::from(&env.iter().find(|(k, _)| k == "VFPS_SQLITE_PATH").unwrap().1);
    let app = spawn_app_with(env).await;
    let originals = originals(40);
    write_every_way(&app, &originals).await;
    let bytes = bytes_under(file.parent().unwrap());
    assert!(bytes.len() > 10_000, "the database's files were read");
    assert_eq!(found_in(&bytes, &originals), Vec::<String>::new());
    // Without a key source the same search finds them: it can fail.
    let (mut env, _) = backend_env(Backend::Sqlite);
    env.retain(|(k, _)| k != "VFPS_KEYS");
    let file =
        std::path::PathBuf::from(&env.iter().find(|(k, _)| k == "VFPS_SQLITE_PATH").unwrap().1);
    let plain = spawn_app_with(env).await;
    write_every_way(&plain, &originals).await;
    let found = found_in(&bytes_under(file.parent().unwrap()), &originals);
    assert!(found.len() >= originals.len() / 2, "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_holds_no_original_with_a_key_source_and_says_so_without_one() {
    let (mut env, db) = backend_env(Backend::Postgres);
    let db = db.unwrap();
    let keys = vfps_testkit::scratch_dir("sealed-pg").join("vfps.keys");
    vfps_keys::source::FileKey::init(&keys).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", keys.display())));
    let app = spawn_app_with(env.clone()).await;
    let originals = originals(40);
    write_every_way(&app, &originals).await;
    // Every table as text (what pg_dump writes).
    let cluster = vfps_testkit::shared();
    let mut dumped = String::new();
    for table in [
        "pseudonyms",
        "multi_pseudonyms",
        "namespaces",
        "namespace_keys",
    ] {
        dumped.push_str(
            &cluster
                .psql(&db, &format!("SELECT t::text FROM {table} t"))
                .unwrap(),
        );
    }
    assert!(dumped.contains("~k1."), "rows keep their blind index");
    assert_eq!(
        found_in(dumped.as_bytes(), &originals),
        Vec::<String>::new()
    );
    // A replica without the key source answers a sealed namespace's rows
    // with a refusal that says why, never a wrong original.
    env.retain(|(k, _)| k != "VFPS_KEYS");
    let keyless = spawn_app_with(env).await;
    let e = keyless.create("sealed", &originals[0]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("VFPS_KEYS"), "{}", e.message());
}

/// `vfps keys init` writes a key file once (0600, its id printed); `serve`
/// refuses a key file others may read, naming it and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_file_is_made_once_and_kept_private() {
    use std::{os::unix::fs::PermissionsExt, process::Command};
    let path = vfps_testkit::scratch_dir("keys-cli").join("vfps.keys");
    let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["keys", "init"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap();
    assert_eq!(id.trim().len(), 16, "{id}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["keys", "init"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!again.status.success());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (mut env, _) = backend_env(Backend::Sqlite);
    env.retain(|(k, _)| k != "VFPS_KEYS");
    env.push(("VFPS_KEYS".into(), format!("file:{}", path.display())));
    let refused = vfps_server::startup::spawn(env, vfps_server::config::Flags::default())
        .await
        .err()
        .expect("serve refuses a key file others may read");
    let said = format!("{refused:#}");
    assert!(
        said.contains("chmod 600") && said.contains("vfps.keys"),
        "{said}"
    );
}

const HMAC: i32 = 7;

async fn keyed_namespace(app: &TestApp, name: &str) -> Result<(), tonic::Status> {
    app.namespaces
        .clone()
        .create(vfps_proto::v1::NamespaceServiceCreateRequest {
            name: name.into(),
            pseudonym_generation_method: HMAC,
            pseudonym_length: 64,
            pseudonym_deletion_allowed: Some(true),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// The keyed method (HMAC-SHA-256 under the namespace's key): deterministic
/// within a namespace, across replicas and after a delete, different in
/// another namespace, not SHA-256 of the original, and refused where there
/// is no key source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_pseudonyms_follow_their_namespace_key_and_need_one() {
    use sha2::Digest;
    use vfps_proto::v1::{ErasureMode, PseudonymServiceEraseRequest};
    // PostgreSQL: two replicas on one database.
    let (mut env, _) = backend_env(Backend::Postgres);
    let keys = vfps_testkit::scratch_dir("keyed-pg").join("vfps.keys");
    vfps_keys::source::FileKey::init(&keys).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", keys.display())));
    let app = spawn_app_with(env.clone()).await;
    keyed_namespace(&app, "keyed").await.unwrap();
    keyed_namespace(&app, "other").await.unwrap();
    let p = app
        .create("keyed", "patient-1")
        .await
        .unwrap()
        .pseudonym_value;
    assert_eq!(p.len(), 64);
    assert!(
        p.chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()),
        "{p}"
    );
    let sha: String = sha2::Sha256::digest("patient-1")
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    assert_ne!(p, sha);
    assert_ne!(
        p,
        app.create("other", "patient-1")
            .await
            .unwrap()
            .pseudonym_value
    );
    // Deleted and made again: the same pseudonym, as SHA-256's would be.
    let erase = |mode: ErasureMode| PseudonymServiceEraseRequest {
        namespace: "keyed".into(),
        original_value: "patient-1".into(),
        mode: mode as i32,
    };
    app.pseudonyms
        .clone()
        .erase(erase(ErasureMode::Delete))
        .await
        .unwrap();
    assert_eq!(
        app.create("keyed", "patient-1")
            .await
            .unwrap()
            .pseudonym_value,
        p
    );
    // A second replica on the same database and key source makes a new
    // original's pseudonym as the first would.
    let second = spawn_app_with(env.clone()).await;
    let q = second
        .create("keyed", "patient-2")
        .await
        .unwrap()
        .pseudonym_value;
    app.pseudonyms
        .clone()
        .erase(PseudonymServiceEraseRequest {
            original_value: "patient-2".into(),
            ..erase(ErasureMode::Delete)
        })
        .await
        .unwrap();
    assert_eq!(
        app.create("keyed", "patient-2")
            .await
            .unwrap()
            .pseudonym_value,
        q
    );
    // Anonymizing cannot cut a link the key holder can recompute.
    let e = app
        .pseudonyms
        .clone()
        .erase(erase(ErasureMode::Anonymize))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("whoever holds its key"),
        "{}",
        e.message()
    );
    // No key source: such a namespace cannot be made, nor used.
    let mut keyless_env = env;
    keyless_env.retain(|(k, _)| k != "VFPS_KEYS");
    let keyless = spawn_app_with(keyless_env).await;
    let e = keyed_namespace(&keyless, "keyless").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message()
            .contains("PSEUDONYM_GENERATION_METHOD_HMAC_SHA256_HEX_ENCODED")
            && e.message().contains("VFPS_KEYS"),
        "{}",
        e.message()
    );
    let e = keyless.create("keyed", "patient-3").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("VFPS_KEYS"), "{}", e.message());
}

/// The configured initial namespaces are sealed where there is a key
/// source, as those created through the API are (they were not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_namespaces_are_sealed_too() {
    let (mut env, _) = backend_env(Backend::Sqlite);
    env.push(("Init__v1__Namespaces__0__Name".into(), "initial".into()));
    let file =
        std::path::PathBuf::from(&env.iter().find(|(k, _)| k == "VFPS_SQLITE_PATH").unwrap().1);
    let app = spawn_app_with(env).await;
    let originals = originals(5);
    for o in &originals {
        app.create("initial", o).await.unwrap();
    }
    let bytes = bytes_under(file.parent().unwrap());
    assert_eq!(found_in(&bytes, &originals), Vec::<String>::new());
}

/// A replica whose key source does not open the stored keys (another
/// deployment's key file) is not ready, and says why; with the right one it
/// is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_open_the_keys_is_not_ready_and_says_why() {
    let (env, _) = backend_env(Backend::Postgres);
    let dir = vfps_testkit::scratch_dir("wrong-key");
    let (right, wrong) = (dir.join("right.keys"), dir.join("wrong.keys"));
    vfps_keys::source::FileKey::init(&right).unwrap();
    vfps_keys::source::FileKey::init(&wrong).unwrap();
    let with = |env: &Vec<(String, String)>, key: &std::path::Path| {
        let mut env = env.clone();
        env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
        env
    };
    let app = spawn_app_with(with(&env, &right)).await;
    app.namespace("sealed", UUID4, 36).await;
    app.create("sealed", "patient-1").await.unwrap();
    let other = crate::helpers::spawn_app_unready(with(&env, &wrong)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let body = loop {
        let r = other.get("/readyz").await;
        let status = r.status();
        let body = r.text().await.unwrap();
        if body.contains("key source") {
            assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        body.contains("namespace sealed") && body.contains("wrapped by key"),
        "{body}"
    );
    // The right key source: ready.
    let again = spawn_app_with(with(&env, &right)).await;
    assert_eq!(again.get("/readyz").await.status(), reqwest::StatusCode::OK);
}

/// A Get opens a sealed row with the namespace this replica has cached,
/// whatever the cache settings; a row of a newer incarnation (the namespace
/// deleted and made again through another replica) does not open under the
/// cached one, and is read through the namespace read anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_get_through_a_replica_that_cached_an_older_incarnation() {
    use vfps_proto::v1::{NamespaceServiceDeleteRequest, PseudonymServiceGetRequest};
    let (mut env, _) = backend_env(Backend::Postgres);
    let keys = vfps_testkit::scratch_dir("sealed-incarnation").join("vfps.keys");
    vfps_keys::source::FileKey::init(&keys).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", keys.display())));
    let (a, b) = (spawn_app_with(env.clone()).await, spawn_app_with(env).await);
    a.namespace("again", UUID4, 36).await;
    let first = a
        .create("again", "patient-1")
        .await
        .unwrap()
        .pseudonym_value;
    let get = |app: &TestApp, p: String| {
        let mut client = app.pseudonyms.clone();
        async move {
            client
                .get(PseudonymServiceGetRequest {
                    namespace: "again".into(),
                    pseudonym_value: p,
                })
                .await
                .map(|r| r.into_inner().pseudonym.unwrap())
        }
    };
    let got = get(&a, first).await.unwrap();
    assert_eq!(got.original_value.as_deref(), Some("patient-1"));
    b.namespaces
        .clone()
        .delete(NamespaceServiceDeleteRequest {
            name: "again".into(),
        })
        .await
        .unwrap();
    b.namespace("again", UUID4, 36).await;
    let second = b
        .create("again", "patient-2")
        .await
        .unwrap()
        .pseudonym_value;
    let got = get(&a, second).await.unwrap();
    assert_eq!(got.original_value.as_deref(), Some("patient-2"));
}
