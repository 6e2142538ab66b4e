//! Key rotation online (`vfps keys rotate | status | reseal`, docs/privacy.md,
//! "Rotating keys"): a new key version is taken up by every replica for new
//! seals, the older versions' originals are re-sealed in the background,
//! and all along every original keeps its one pseudonym and opens.

use std::{
    collections::HashMap,
    process::{Command, Output},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Mutex;
use vfps_proto::v1::{PseudonymServiceGetRequest, PseudonymServiceListRequest};

use crate::{
    helpers::{backend_env, spawn_app_with, Backend, TestApp},
    sealed::{originals, write_every_way},
};

/// `vfps keys …` with the replicas' settings.
fn keys(env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vfps"))
        .arg("keys")
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "off")
        .output()
        .expect("vfps runs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every original of `namespace` with its pseudonym: List's pseudonyms,
/// each read back through `app` (which opens its sealed original;
/// anonymized entries are not answered).
async fn listed(app: &TestApp, namespace: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut token = String::new();
    loop {
        let page = app
            .pseudonyms
            .clone()
            .list(PseudonymServiceListRequest {
                namespace: namespace.into(),
                page_size: 500,
                page_token: token.clone(),
                include_total_size: false,
            })
            .await
            .unwrap()
            .into_inner();
        for p in page.pseudonyms {
            let read = app
                .pseudonyms
                .clone()
                .get(PseudonymServiceGetRequest {
                    namespace: namespace.into(),
                    pseudonym_value: p.pseudonym_value.clone(),
                })
                .await;
            match read {
                Ok(r) => {
                    let original = r.into_inner().pseudonym.unwrap().original_value.unwrap();
                    out.insert(original, p.pseudonym_value);
                }
                // An anonymized entry: listed, never answered.
                Err(e) if e.code() == tonic::Code::NotFound => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_under_creates_keeps_every_pseudonym_and_reseals_in_the_background() {
    let (mut env, _) = backend_env(Backend::Postgres);
    let key = vfps_testkit::scratch_dir("rotation").join("vfps.keys");
    vfps_keys::source::FileKey::init(&key).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
    env.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "100ms".into()));
    let a = Arc::new(spawn_app_with(env.clone()).await);
    let b = Arc::new(spawn_app_with(env.clone()).await);
    let before = originals(40);
    write_every_way(&a, &before).await;
    let sealed_before = listed(&a, "sealed").await;
    assert_eq!(sealed_before.len(), before.len() / 4);
    let status = stdout(&keys(&env, &["status"]));
    assert!(status.contains("sealed: newest key version 1"), "{status}");

    // Creates through both replicas, of new originals and of old ones,
    // while the rotation is taken up and the re-seal runs.
    let answered: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (a, b, answered, stop) = (a.clone(), b.clone(), answered.clone(), stop.clone());
        let old: Vec<String> = sealed_before.keys().cloned().collect();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(60)
            {
                let original = match i % 3 {
                    0 => old[i % old.len()].clone(),
                    _ => format!("during-rotation-{}", i / 2),
                };
                let app = if i.is_multiple_of(2) { &a } else { &b };
                let p = app.create("sealed", &original).await.unwrap();
                answered
                    .lock()
                    .await
                    .entry(original)
                    .or_default()
                    .push(p.pseudonym_value);
                i += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rotated = stdout(&keys(&env, &["rotate"]));
    for ns in ["sealed", "mii", "many"] {
        assert!(
            rotated.contains(&format!("{ns}: key version 2")),
            "{rotated}"
        );
    }
    // The replicas re-seal everything under version 2 by themselves.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = stdout(&keys(&env, &["status"]));
        if status.matches("(100.0 % under the newest)").count() == 3
            && status.matches("newest key version 2").count() == 3
        {
            break;
        }
        assert!(Instant::now() < deadline, "not re-sealed: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await.unwrap();

    // No original ever got a second pseudonym, the old ones kept theirs,
    // and every row opens to its original through either replica.
    let answered = answered.lock().await;
    assert!(answered.len() > 10, "{}", answered.len());
    for (original, pseudonyms) in answered.iter() {
        assert!(
            pseudonyms.iter().all(|p| p == &pseudonyms[0]),
            "two pseudonyms"
        );
        if let Some(p) = sealed_before.get(original) {
            assert_eq!(p, &pseudonyms[0]);
        }
    }
    for app in [&a, &b] {
        let now = listed(app, "sealed").await;
        for (original, p) in sealed_before.iter() {
            assert_eq!(now.get(original), Some(p));
        }
        for (original, pseudonyms) in answered.iter() {
            assert_eq!(now.get(original), Some(&pseudonyms[0]));
        }
    }
    let again = a.create("sealed", &before[0]).await.unwrap();
    assert_eq!(Some(&again.pseudonym_value), sealed_before.get(&before[0]));

    // A second rotation re-sealed here, in the foreground.
    let rotated = stdout(&keys(&env, &["rotate", "--namespace", "many"]));
    assert_eq!(rotated.trim(), "many: key version 3");
    let out = keys(&env, &["reseal", "--namespace", "many"]);
    stdout(&out);
    let status = stdout(&keys(&env, &["status", "--namespace", "many"]));
    assert!(
        status.contains("newest key version 3; sealed originals by version: v3 ")
            && status.contains("(100.0 % under the newest)"),
        "{status}"
    );
}

/// `vfps keys rotate` refuses, naming it, a namespace that does not exist
/// or keeps its originals plain, and refuses to run without a key source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_refuses_what_it_cannot_rotate_by_name() {
    let (mut env, _) = backend_env(Backend::Postgres);
    let app = spawn_app_with(env.clone()).await;
    app.namespace("plain", 3, 36).await;
    let out = keys(&env, &["rotate"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("VFPS_KEYS is not set"),
        "{out:?}"
    );
    let key = vfps_testkit::scratch_dir("rotation-refused").join("vfps.keys");
    vfps_keys::source::FileKey::init(&key).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
    for (name, why) in [
        ("plain", "namespace \"plain\" keeps its originals plain"),
        ("absent", "no namespace is named \"absent\""),
    ] {
        let out = keys(&env, &["rotate", "--namespace", name]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{out:?}"
        );
    }
}

/// A wrapping-key rotation: replicas run with the new key source and the
/// old one as `VFPS_KEYS_PREVIOUS` (keys wrapped by either open), `vfps keys
/// rewrap` rewraps every stored key under the new one, and then the new
/// source alone opens everything while the old one alone opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapping_key_rotation_rewraps_every_key_and_leaves_originals_as_they_are() {
    let (env, _) = backend_env(Backend::Postgres);
    let dir = vfps_testkit::scratch_dir("rewrap");
    let (old, new) = (dir.join("old.keys"), dir.join("new.keys"));
    vfps_keys::source::FileKey::init(&old).unwrap();
    let new_id = vfps_keys::source::FileKey::init(&new).unwrap();
    let with = |keys: &std::path::Path, previous: Option<&std::path::Path>| {
        let mut env = env.clone();
        env.push(("VFPS_KEYS".into(), format!("file:{}", keys.display())));
        if let Some(p) = previous {
            env.push(("VFPS_KEYS_PREVIOUS".into(), format!("file:{}", p.display())));
        }
        env
    };
    let before = spawn_app_with(with(&old, None)).await;
    before.namespace("sealed", 3, 36).await;
    let mut written = HashMap::new();
    for o in originals(10) {
        written.insert(
            before.create("sealed", &o).await.unwrap().pseudonym_value,
            o,
        );
    }
    // Rolled to the new source, the old one still opening its keys.
    let rolling = spawn_app_with(with(&new, Some(&old))).await;
    rolling.namespace("later", 3, 36).await;
    for (p, o) in &written {
        assert_eq!(&get(&rolling, "sealed", p).await, o);
    }
    let later = rolling.create("later", "made-while-rolling").await.unwrap();
    let out = stdout(&keys(&with(&new, Some(&old)), &["rewrap"]));
    assert_eq!(
        out.trim(),
        "rewrapped 1 key versions; 1 already were under the current key"
    );
    let status = stdout(&keys(&with(&new, None), &["status"]));
    assert!(
        status.ends_with(&format!("key versions wrapped by key {new_id}: 2\n")),
        "{status}"
    );
    let again = stdout(&keys(&with(&new, Some(&old)), &["rewrap"]));
    assert!(
        again.starts_with("rewrapped 0 key versions; 2 already"),
        "{again}"
    );
    // The new source alone opens every original; the old one alone nothing.
    let after = spawn_app_with(with(&new, None)).await;
    for (p, o) in &written {
        assert_eq!(&get(&after, "sealed", p).await, o);
    }
    assert_eq!(
        get(&after, "later", &later.pseudonym_value).await,
        "made-while-rolling"
    );
    let stale = crate::helpers::spawn_app_unready(with(&old, None)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = stale.get("/readyz").await.text().await.unwrap();
        if body.contains(&format!("wrapped by key {new_id}")) {
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The original of `pseudonym` in `namespace`, read through `app`.
async fn get(app: &TestApp, namespace: &str, pseudonym: &str) -> String {
    app.pseudonyms
        .clone()
        .get(PseudonymServiceGetRequest {
            namespace: namespace.into(),
            pseudonym_value: pseudonym.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap()
        .original_value
        .unwrap()
}

/// How many rows of `table` keep an original in plain text.
fn plain_rows(db: &str, table: &str) -> usize {
    vfps_testkit::shared()
        .psql(
            db,
            &format!(
                "SELECT count(*) FROM {table} WHERE original_sealed IS NULL \
                 AND length(original_value) <= {}",
                vfps_core::MAX_ORIGINAL_VALUE_BYTES
            ),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn sealed_rows(db: &str, table: &str) -> usize {
    vfps_testkit::shared()
        .psql(
            db,
            &format!("SELECT count(*) FROM {table} WHERE original_sealed IS NOT NULL"),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Creates of old and new originals through both replicas until `stop`;
/// every answer, by original.
fn creates_until(
    apps: [Arc<TestApp>; 2],
    old: Vec<String>,
    tag: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<HashMap<String, Vec<String>>> {
    tokio::spawn(async move {
        let mut answered: HashMap<String, Vec<String>> = HashMap::new();
        let started = Instant::now();
        let mut i = 0usize;
        while !stop.load(std::sync::atomic::Ordering::Relaxed)
            && started.elapsed() < Duration::from_secs(60)
        {
            let original = match i % 3 {
                0 => old[i % old.len()].clone(),
                _ => format!("{tag}-{}", i / 2),
            };
            let p = apps[i % 2].create("sealed", &original).await.unwrap();
            answered
                .entry(original)
                .or_default()
                .push(p.pseudonym_value);
            i += 1;
        }
        answered
    })
}

/// `vfps keys encrypt-existing` seals a plain database's originals online,
/// and `vfps keys decrypt-all` makes them plain again, each while two
/// replicas take Creates of new and existing originals: no original gets a
/// second pseudonym, every one opens, and no row of the old form is left;
/// a move the command did not finish is finished by the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn originals_are_sealed_and_made_plain_again_online() {
    let (env, db) = backend_env(Backend::Postgres);
    let db = db.unwrap();
    // Written before there was a key source: plain.
    let keyless = spawn_app_with(env.clone()).await;
    let before = originals(40);
    write_every_way(&keyless, &before).await;
    let known = listed(&keyless, "sealed").await;
    assert!(plain_rows(&db, "pseudonyms") > 0 && plain_rows(&db, "multi_pseudonyms") > 0);
    let key = vfps_testkit::scratch_dir("moving").join("vfps.keys");
    vfps_keys::source::FileKey::init(&key).unwrap();
    let mut env = env.clone();
    env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
    env.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "100ms".into()));
    // A move switched on and not yet carried out (its replicas look only
    // hourly): a replica that cached the namespace plain (namespace cache
    // on) writes sealed once refused, and every original not moved yet is found, and erased,
    // in its plain row.
    let mut slow = env.clone();
    slow.retain(|(k, _)| k != "VFPS_KEYS_REFRESH_INTERVAL");
    slow.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "1h".into()));
    slow.push((
        "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
        "true".into(),
    ));
    let c = spawn_app_with(slow).await;
    c.create("sealed", "cached-while-plain").await.unwrap();
    vfps_testkit::shared()
        .psql(
            &db,
            "UPDATE namespaces SET originals_sealed = true, originals_moving = true \
             WHERE name = 'sealed'",
        )
        .unwrap();
    c.create("sealed", "written-after-the-switch")
        .await
        .unwrap();
    let plain_of = |original: &str| -> String {
        vfps_testkit::shared()
            .psql(
                &db,
                &format!("SELECT count(*) FROM pseudonyms WHERE original_value = '{original}'"),
            )
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(plain_of("written-after-the-switch"), "0");
    assert_eq!(plain_of("cached-while-plain"), "1");
    for (original, p) in &known {
        assert_eq!(
            &c.create("sealed", original).await.unwrap().pseudonym_value,
            p
        );
    }
    c.pseudonyms
        .clone()
        .erase(vfps_proto::v1::PseudonymServiceEraseRequest {
            namespace: "sealed".into(),
            original_value: "cached-while-plain".into(),
            mode: vfps_proto::v1::ErasureMode::Anonymize as i32,
        })
        .await
        .unwrap();
    assert_eq!(plain_of("cached-while-plain"), "0");

    let a = Arc::new(spawn_app_with(env.clone()).await);
    let b = Arc::new(spawn_app_with(env.clone()).await);
    let old: Vec<String> = known.keys().cloned().collect();

    for (command, tag) in [
        ("encrypt-existing", "while-sealing"),
        ("decrypt-all", "while-opening"),
    ] {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = creates_until([a.clone(), b.clone()], old.clone(), tag, stop.clone());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let out = stdout(&keys(
            &env,
            &[command, "--namespace", "sealed", "--namespace", "mii"],
        ));
        assert!(out.contains("sealed: ") && out.contains("mii: "), "{out}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let answered = load.await.unwrap();
        assert!(answered.len() > 10, "{}", answered.len());
        for (original, pseudonyms) in &answered {
            assert!(
                pseudonyms.iter().all(|p| p == &pseudonyms[0]),
                "two pseudonyms"
            );
            if let Some(p) = known.get(original) {
                assert_eq!(p, &pseudonyms[0]);
            }
        }
        for app in [&a, &b] {
            let now = listed(app, "sealed").await;
            for (original, p) in known.iter() {
                assert_eq!(now.get(original), Some(p));
            }
            for (original, pseudonyms) in &answered {
                assert_eq!(now.get(original), Some(&pseudonyms[0]));
            }
        }
    }
    // Sealed again, then plain: every single-pseudonym row plain now but
    // the multi-pseudonym namespace's, which was never moved.
    assert_eq!(sealed_rows(&db, "pseudonyms"), 0);
    assert_eq!(sealed_rows(&db, "multi_pseudonyms"), 0);

    // A move started and left to the replicas: they finish it.
    vfps_testkit::shared()
        .psql(
            &db,
            "UPDATE namespaces SET originals_sealed = true, originals_moving = true \
             WHERE name = 'many'",
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let moving = vfps_testkit::shared()
            .psql(
                &db,
                "SELECT originals_moving FROM namespaces WHERE name = 'many'",
            )
            .unwrap();
        if moving.trim() == "f" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas did not finish the move"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(plain_rows(&db, "multi_pseudonyms"), 0);
    assert!(sealed_rows(&db, "multi_pseudonyms") > 0);
    // Found by their index now, through either replica.
    let status = stdout(&keys(&env, &["status", "--namespace", "many"]));
    assert!(status.contains("(100.0 % under the newest)"), "{status}");
}

/// A CSV job on a namespace whose originals are being sealed finds the
/// originals not moved yet in their plain rows (the same pseudonyms as
/// before), writes new ones sealed, and reads back what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_job_during_a_move_keeps_every_pseudonym() {
    use crate::jobs::{download, submit, wait_done, with_jobs_dir};
    let (mut env, db) = backend_env(Backend::Postgres);
    let db = db.unwrap();
    with_jobs_dir(&mut env);
    let keyless = spawn_app_with(env.clone()).await;
    keyless.namespace("subjects", 3, 36).await;
    let csv = |names: &[String]| {
        let mut s = String::from("id,name\r\n");
        for (i, n) in names.iter().enumerate() {
            s.push_str(&format!("{i},{n}\r\n"));
        }
        s
    };
    let known: Vec<String> = (0..30).map(|i| format!("known-{i}")).collect();
    let job = |direction: &str| crate::jobs::spec(direction, "subjects");
    let first = submit(
        &keyless,
        None,
        &csv(&known),
        job("CSV_JOB_DIRECTION_PSEUDONYMIZE"),
    )
    .await;
    wait_done(&keyless, None, &first).await;
    let before = download(&keyless, None, &first).await.text().await.unwrap();
    // Gone before the move: its runner would take the next job, and it
    // has no key source.
    keyless.shutdown.cancel();
    let _ = keyless.handle.await;
    vfps_testkit::shared()
        .psql(
            &db,
            "UPDATE namespaces SET originals_sealed = true, originals_moving = true \
             WHERE name = 'subjects'",
        )
        .unwrap();
    let key = vfps_testkit::scratch_dir("moving-jobs").join("vfps.keys");
    vfps_keys::source::FileKey::init(&key).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
    env.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "1h".into()));
    let app = spawn_app_with(env.clone()).await;
    let mut mixed = known.clone();
    mixed.extend((0..30).map(|i| format!("new-{i}")));
    let second = submit(
        &app,
        None,
        &csv(&mixed),
        job("CSV_JOB_DIRECTION_PSEUDONYMIZE"),
    )
    .await;
    let done = wait_done(&app, None, &second).await;
    assert_eq!(done["state"], "CSV_JOB_STATE_COMPLETED", "{done}");
    let after = download(&app, None, &second).await.text().await.unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(
        lines[..=known.len()],
        before.lines().collect::<Vec<_>>()[..]
    );
    assert_eq!(plain_rows(&db, "pseudonyms"), known.len());
    let back = submit(&app, None, &after, job("CSV_JOB_DIRECTION_DEPSEUDONYMIZE")).await;
    wait_done(&app, None, &back).await;
    let restored = download(&app, None, &back).await.text().await.unwrap();
    assert_eq!(restored, csv(&mixed));
    let out = stdout(&keys(
        &env,
        &["encrypt-existing", "--namespace", "subjects"],
    ));
    assert!(out.starts_with("subjects: 30 rows made sealed"), "{out}");
    assert_eq!(plain_rows(&db, "pseudonyms"), 0);
}

/// How many rows of `table` in `namespace` hold a blind index under key
/// version `version`.
fn indexed_under(db: &str, table: &str, namespace: &str, version: u32) -> usize {
    vfps_testkit::shared()
        .psql(
            db,
            &format!(
                "SELECT count(*) FROM {table} WHERE namespace = '{namespace}' \
                 AND original_value LIKE '~k{version}.%'"
            ),
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `vfps keys rotate --reindex` moves the blind indexes to the new key
/// version while two replicas take Creates of new and existing originals:
/// no original gets a second pseudonym, every one opens, no row keeps the
/// old index — and a replica that cached the namespace before the re-index
/// (its Creates refused until it reads it anew) writes none either. A
/// re-index switched on and not yet carried out finds every original in
/// its old-index row; the replicas finish it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reindex_under_creates_keeps_every_pseudonym() {
    let (mut env, db) = backend_env(Backend::Postgres);
    let db = db.unwrap();
    let key = vfps_testkit::scratch_dir("reindex").join("vfps.keys");
    vfps_keys::source::FileKey::init(&key).unwrap();
    env.push(("VFPS_KEYS".into(), format!("file:{}", key.display())));
    // Replicas that move no rows by themselves (one with the namespace
    // cache on), and the fast ones.
    let mut slow = env.clone();
    slow.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "1h".into()));
    let mut stale = slow.clone();
    stale.push((
        "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
        "true".into(),
    ));
    env.push(("VFPS_KEYS_REFRESH_INTERVAL".into(), "100ms".into()));
    let writer = spawn_app_with(slow.clone()).await;
    write_every_way(&writer, &originals(40)).await;
    let known = listed(&writer, "sealed").await;
    let c = spawn_app_with(stale).await;
    c.create("sealed", "cached-before-the-reindex")
        .await
        .unwrap();
    assert!(indexed_under(&db, "pseudonyms", "sealed", 1) > 0);

    // Switched on, not carried out: a fresh replica finds every original
    // by its old index.
    let out = stdout(&keys(&env, &["rotate", "--namespace", "sealed"]));
    assert_eq!(out.trim(), "sealed: key version 2");
    vfps_testkit::shared()
        .psql(
            &db,
            "UPDATE namespaces SET originals_moving = true, originals_moving_from_index = 1, \
             originals_index_version = 2 WHERE name = 'sealed'",
        )
        .unwrap();
    let fresh = spawn_app_with(slow).await;
    for (original, p) in &known {
        assert_eq!(
            &fresh
                .create("sealed", original)
                .await
                .unwrap()
                .pseudonym_value,
            p
        );
    }
    assert!(indexed_under(&db, "pseudonyms", "sealed", 1) > 0);

    // The fast replicas finish that one and take Creates while the others
    // are re-indexed.
    let a = Arc::new(spawn_app_with(env.clone()).await);
    let b = Arc::new(spawn_app_with(env.clone()).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let old: Vec<String> = known.keys().cloned().collect();
    let load = creates_until(
        [a.clone(), b.clone()],
        old,
        "while-reindexing",
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = stdout(&keys(
        &env,
        &[
            "rotate",
            "--reindex",
            "--namespace",
            "mii",
            "--namespace",
            "many",
        ],
    ));
    for ns in ["mii", "many"] {
        assert!(out.contains(&format!("{ns}: key version 2")), "{out}");
        assert!(
            out.contains(&format!("{ns}: ")) && out.contains(" re-indexed "),
            "{out}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while indexed_under(&db, "pseudonyms", "sealed", 1) > 0 {
        assert!(
            Instant::now() < deadline,
            "the replicas did not finish the re-index"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered = load.await.unwrap();
    // The replica that cached the namespace under index version 1.
    let late = c
        .create("sealed", "written-by-a-stale-replica")
        .await
        .unwrap();
    for (original, p) in &known {
        assert_eq!(
            &c.create("sealed", original).await.unwrap().pseudonym_value,
            p
        );
    }
    for (ns, table) in [
        ("sealed", "pseudonyms"),
        ("mii", "pseudonyms"),
        ("many", "multi_pseudonyms"),
    ] {
        assert_eq!(indexed_under(&db, table, ns, 1), 0, "{ns}");
        assert!(indexed_under(&db, table, ns, 2) > 0, "{ns}");
    }
    assert!(answered.len() > 10, "{}", answered.len());
    for (original, pseudonyms) in &answered {
        assert!(
            pseudonyms.iter().all(|p| p == &pseudonyms[0]),
            "two pseudonyms"
        );
        if let Some(p) = known.get(original) {
            assert_eq!(p, &pseudonyms[0]);
        }
    }
    for app in [&a, &b] {
        let now = listed(app, "sealed").await;
        for (original, p) in known.iter() {
            assert_eq!(now.get(original), Some(p));
        }
        for (original, pseudonyms) in &answered {
            assert_eq!(now.get(original), Some(&pseudonyms[0]));
        }
        assert_eq!(
            now.get("written-by-a-stale-replica"),
            Some(&late.pseudonym_value)
        );
    }
    let status = stdout(&keys(&env, &["status", "--namespace", "sealed"]));
    assert!(
        status.contains("blind indexes under key version 2\n") && !status.contains("being moved"),
        "{status}"
    );
}
