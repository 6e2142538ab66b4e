//! `VFPS_KEYS=pkcs11:…` end to end, on a SoftHSM2 token: `vfps keys init`
//! makes the key on the token, the service seals originals under it (the
//! SQLite files hold none) and makes keyed pseudonyms, and a wrong PIN is
//! refused at start, named. One test: the token's configuration is this
//! process's environment.

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
    let http = reqwest::Client::new();
    let base = format!("http://{}", running.http_addr);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready = http.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    running.shutdown.cancel();
    running.handle.await.unwrap().unwrap();
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
    // What wrapped the namespaces' keys is the token's key, by its id.
    assert!(
        bytes.windows(id.len()).any(|w| w == id.as_bytes()),
        "key id {id} not stored"
    );
}
