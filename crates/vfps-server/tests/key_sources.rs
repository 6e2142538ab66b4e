#![allow(clippy::unwrap_used)]

//! The key sources end to end: `VFPS_KEYS=pkcs11:…` on a SoftHSM2 token
//! (`vfps keys init` makes the key on the token, a wrong PIN is refused,
//! named; the token's configuration is this process's environment) and
//! `VFPS_KEYS=aws-kms:…` against moto's KMS (a replica given another KMS
//! key is not ready, and says why). Each time the service seals originals
//! under it (the SQLite files hold none) and makes keyed pseudonyms; then
//! the wrapping key is rotated away (`vfps keys rewrap`: the token's to a
//! key file, one KMS key's to another) and the new one alone opens them.

use std::{process::Command, time::Duration};

use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_seals_under_a_key_on_a_pkcs11_token() {
    let token = vfps_testkit::softhsm::Token::new("vfps-server-test");
    let uri = token.uri("vfps-master");
    let vfps = env!("CARGO_BIN_EXE_vfps");

    // A wrong PIN (a process of its own: a process's login is the token's).
    let wrong = uri.replace(
        &format!("pin-source=file:{}", token.pin_file.display()),
        "pin-value=0000",
    );
    let out = Command::new(vfps)
        .args(["keys", "init", &wrong])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot log in (wrong PIN?)"), "{err}");
    assert!(!err.contains("0000"), "{err}");

    let out = Command::new(vfps)
        .args(["keys", "init", &uri])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(id.len(), 16, "{id}");
    let again = Command::new(vfps)
        .args(["keys", "init", &uri])
        .output()
        .unwrap();
    assert!(!again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("never replaced"),
        "{again:?}"
    );

    let sqlite = vfps_testkit::scratch_dir("pkcs11-sqlite").join("vfps.sqlite");
    let running = vfps_server::startup::spawn(
        vec![
            ("VFPS_SQLITE_PATH".into(), sqlite.display().to_string()),
            ("VFPS_KEYS".into(), uri.clone()),
        ],
        vfps_server::config::Flags::default(),
    )
    .await
    .expect("the server starts with a pkcs11 key source");
    let originals = exercise(&running).await;
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    sealed_under(&sqlite, &originals, &id);

    // The token's key rotated away to a key file: rewrapped, and the file
    // alone opens every namespace's keys.
    let file = vfps_testkit::scratch_dir("pkcs11-rewrap").join("vfps.keys");
    let file_id = vfps_keys::source::FileKey::init(&file).unwrap();
    let file_keys = format!("file:{}", file.display());
    let said = rewrap(
        &[("VFPS_SQLITE_PATH", sqlite.display().to_string())],
        &file_keys,
        &uri,
    );
    assert!(
        said.starts_with("rewrapped 2 key versions; 0 already"),
        "{said}"
    );
    let running = vfps_server::startup::spawn(
        vec![
            ("VFPS_SQLITE_PATH".into(), sqlite.display().to_string()),
            ("VFPS_KEYS".into(), file_keys),
        ],
        vfps_server::config::Flags::default(),
    )
    .await
    .unwrap();
    ready(&format!("http://{}", running.http_addr)).await;
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    sealed_under(&sqlite, &originals, &file_id);
}

/// `vfps keys rewrap` from `previous` to `keys` with `env`: its stdout.
fn rewrap(env: &[(&str, String)], keys: &str, previous: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["keys", "rewrap"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("VFPS_KEYS", keys)
        .env("VFPS_KEYS_PREVIOUS", previous)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The SQLite files next to `sqlite` hold none of `originals`, and name the
/// key `id` that wrapped the namespaces' keys.
fn sealed_under(sqlite: &std::path::Path, originals: &[String], id: &str) {
    let mut bytes = Vec::new();
    for e in std::fs::read_dir(sqlite.parent().unwrap())
        .unwrap()
        .flatten()
    {
        bytes.extend(std::fs::read(e.path()).unwrap_or_default());
    }
    assert!(bytes.len() > 10_000, "the database's files were read");
    let found: Vec<&String> = originals
        .iter()
        .filter(|o| bytes.windows(o.len()).any(|w| w == o.as_bytes()))
        .collect();
    assert!(found.is_empty(), "originals in the SQLite files: {found:?}");
    assert!(
        bytes.windows(id.len()).any(|w| w == id.as_bytes()),
        "key id {id} not stored"
    );
}

/// `/readyz` once it answers why the key source fails: 503, that reason.
async fn unready_for_keys(running: &vfps_server::startup::Running) -> String {
    let base = format!("http://{}", running.http_addr);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = reqwest::get(format!("{base}/readyz")).await.unwrap();
        let (status, body) = (r.status(), r.text().await.unwrap());
        if body.contains("key source") {
            assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ready(base: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = reqwest::get(format!("{base}/readyz")).await;
        if r.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A random and a keyed namespace, 20 originals each made and read back:
/// the originals.
async fn exercise(running: &vfps_server::startup::Running) -> Vec<String> {
    let http = reqwest::Client::new();
    let base = format!("http://{}", running.http_addr);
    ready(&base).await;
    let post = |path: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http.post(path).json(&body).send().await.unwrap();
            let status = r.status();
            let body: Value = r.json().await.unwrap();
            assert!(status.is_success(), "{status} {body}");
            body
        }
    };
    for (name, method, length) in [
        ("random", "PSEUDONYM_GENERATION_METHOD_UUID4", 36),
        (
            "keyed",
            "PSEUDONYM_GENERATION_METHOD_HMAC_SHA256_HEX_ENCODED",
            64,
        ),
    ] {
        post(
            format!("{base}/v1/namespaces"),
            json!({"name": name, "pseudonymGenerationMethod": method, "pseudonymLength": length}),
        )
        .await;
    }
    let originals: Vec<String> = (0..20).map(|i| format!("hsm-original-{i:04}")).collect();
    for o in &originals {
        for ns in ["random", "keyed"] {
            let made = post(
                format!("{base}/v1/namespaces/{ns}/pseudonyms"),
                json!({"originalValue": o}),
            )
            .await;
            let p = made["pseudonym"]["pseudonymValue"]
                .as_str()
                .unwrap()
                .to_owned();
            let back: Value = http
                .get(format!("{base}/v1/namespaces/{ns}/pseudonyms/{p}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(back["pseudonym"]["originalValue"], json!(o), "{back}");
        }
    }
    originals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_seals_under_a_kms_key() {
    let moto = vfps_testkit::moto::Moto::start();
    let arn = moto.kms_key();
    // `vfps keys init` makes no KMS key (nor a file named after one).
    let dir = vfps_testkit::scratch_dir("kms-init");
    let out = Command::new(env!("CARGO_BIN_EXE_vfps"))
        .args(["keys", "init", &format!("aws-kms:{arn}")])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("made in KMS"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let sqlite = vfps_testkit::scratch_dir("kms-sqlite").join("vfps.sqlite");
    let env = |arn: &str| {
        let mut env = moto.env();
        env.push(("VFPS_SQLITE_PATH".into(), sqlite.display().to_string()));
        env.push(("VFPS_KEYS".into(), format!("aws-kms:{arn}")));
        env
    };
    let running = vfps_server::startup::spawn(env(&arn), vfps_server::config::Flags::default())
        .await
        .expect("the server starts with an aws-kms key source");
    let originals = exercise(&running).await;
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    sealed_under(&sqlite, &originals, &arn);
    // Another KMS key: not ready, and why.
    let other = moto.kms_key();
    let later = moto.kms_key();
    let running = vfps_server::startup::spawn(env(&other), vfps_server::config::Flags::default())
        .await
        .unwrap();
    let body = unready_for_keys(&running).await;
    assert!(body.contains(&arn) && body.contains(&other), "{body}");
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    // KMS unreachable: not ready either, and why.
    let mut unreachable = env(&arn);
    let port = vfps_testkit::free_port().unwrap();
    for (k, v) in &mut unreachable {
        if k == "AWS_ENDPOINT_URL_KMS" {
            *v = format!("http://127.0.0.1:{port}");
        }
    }
    let running = vfps_server::startup::spawn(unreachable, vfps_server::config::Flags::default())
        .await
        .unwrap();
    let body = unready_for_keys(&running).await;
    assert!(
        body.contains("KMS Decrypt") && body.contains(&port.to_string()),
        "{body}"
    );
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    // The KMS key rotated away to another: rewrapped through KMS (Decrypt
    // under the old key, Encrypt under the new), and the new one alone
    // opens every namespace's keys.
    let mut with_moto: Vec<(&str, String)> =
        vec![("VFPS_SQLITE_PATH", sqlite.display().to_string())];
    let moto_env = moto.env();
    with_moto.extend(moto_env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let said = rewrap(
        &with_moto,
        &format!("aws-kms:{later}"),
        &format!("aws-kms:{arn}"),
    );
    assert!(
        said.starts_with("rewrapped 2 key versions; 0 already"),
        "{said}"
    );
    let running = vfps_server::startup::spawn(env(&later), vfps_server::config::Flags::default())
        .await
        .unwrap();
    ready(&format!("http://{}", running.http_addr)).await;
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
    sealed_under(&sqlite, &originals, &later);
}
