//! One contract, two stores: every test here runs against PostgreSQL (a fresh
//! database on the test kit's cluster) and against a temporary SQLite file.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use vfps_core::{
    now_micros, GenerationMethod, Namespace, NamespaceName, NamespaceSettings, NamespaceUid,
    OriginalValue, PageCursor, PseudonymValue,
};
use vfps_store::{
    coalesce::{Coalescer, Limits},
    postgres::PgStore,
    sqlite::SqliteStore,
    Candidate, Lookup, Store, Upsert, Upserted,
};

async fn postgres() -> Arc<dyn Store> {
    let db = vfps_testkit::shared().create_database().unwrap();
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    Arc::new(store)
}

async fn sqlite() -> Arc<dyn Store> {
    let dir = vfps_testkit::scratch_dir("store");
    Arc::new(SqliteStore::open(&dir.join("vfps.sqlite")).unwrap())
}

/// The uid the test namespaces and candidates share, unless a test says otherwise.
fn uid_of(name: &str) -> NamespaceUid {
    NamespaceUid(name.len() as i64 + 1)
}

fn namespace(name: &str, length: u32) -> Namespace {
    let now = now_micros();
    Namespace {
        name: NamespaceName::parse(name).unwrap(),
        uid: uid_of(name),
        description: "test".into(),
        settings: NamespaceSettings::parse(
            GenerationMethod::FullRandomHexEncoded,
            length,
            Some("p-".into()),
            None,
        )
        .unwrap(),
        created_at: now,
        last_updated_at: now,
    }
}

fn candidate(ns: &str, original: &str, pseudonym: &str) -> Candidate {
    Candidate {
        namespace: NamespaceName::parse(ns).unwrap(),
        namespace_uid: uid_of(ns),
        original: OriginalValue::parse(original).unwrap(),
        pseudonym: pseudonym.into(),
        created_at: now_micros(),
        sealed: None,
        moving: false,
    }
}

fn pv(raw: &str) -> PseudonymValue {
    PseudonymValue::parse(raw).unwrap()
}

fn limits(store: &dyn Store, max_batch: usize) -> Limits {
    Limits {
        workers: store.write_parallelism(),
        max_batch,
        max_queue: 4096,
    }
}

fn stored(u: &Upserted) -> &vfps_core::Pseudonym {
    match u {
        Upserted::Stored(p) => p,
        Upserted::Conflict => panic!("expected a stored pseudonym, got a conflict"),
    }
}

async fn namespaces_round_trip(store: Arc<dyn Store>) {
    let ns = namespace("a", 8);
    store.create_namespace(&ns).await.unwrap();
    let err = store.create_namespace(&ns).await.unwrap_err();
    assert_eq!(err.kind, vfps_core::ErrorKind::AlreadyExists);
    assert_eq!(
        store.get_namespace(&ns.name).await.unwrap(),
        Some(ns.clone())
    );
    store.create_namespace(&namespace("b", 8)).await.unwrap();
    let all = store.list_namespaces().await.unwrap();
    assert_eq!(
        all.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    // Another incarnation's uid deletes nothing.
    assert!(!store
        .delete_namespace(&ns.name, Some(NamespaceUid(ns.uid.0 + 1)))
        .await
        .unwrap());
    assert!(store
        .delete_namespace(&ns.name, Some(ns.uid))
        .await
        .unwrap());
    assert!(!store
        .delete_namespace(&ns.name, Some(ns.uid))
        .await
        .unwrap());
    assert_eq!(store.get_namespace(&ns.name).await.unwrap(), None);
    // Without a uid: whatever incarnation there is.
    let b = NamespaceName::parse("b").unwrap();
    assert!(store.delete_namespace(&b, None).await.unwrap());
    assert!(!store.delete_namespace(&b, None).await.unwrap());
}

async fn upsert_returns_the_existing_pseudonym(store: Arc<dyn Store>) {
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    let first = store
        .upsert_pseudonyms(&[candidate("n", "o1", "p-1")])
        .await
        .unwrap();
    assert_eq!(stored(&first[0]).pseudonym_value, "p-1");
    let again = store
        .upsert_pseudonyms(&[candidate("n", "o1", "p-2"), candidate("n", "o2", "p-3")])
        .await
        .unwrap();
    assert_eq!(stored(&again[0]).pseudonym_value, "p-1");
    assert_eq!(stored(&again[1]).pseudonym_value, "p-3");
    let got = store
        .get_pseudonym(&NamespaceName::parse("n").unwrap(), &pv("p-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.original_value, "o1");
}

async fn a_colliding_pseudonym_is_a_conflict_and_a_missing_namespace_too(store: Arc<dyn Store>) {
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    store
        .upsert_pseudonyms(&[candidate("n", "o1", "p-1")])
        .await
        .unwrap();
    let r = store
        .upsert_pseudonyms(&[
            candidate("n", "o2", "p-1"),
            candidate("missing", "o3", "p-9"),
        ])
        .await
        .unwrap();
    assert_eq!(r, vec![Upserted::Conflict, Upserted::Conflict]);
    assert!(store
        .get_pseudonym(&NamespaceName::parse("missing").unwrap(), &pv("p-9"))
        .await
        .unwrap()
        .is_none());
}

async fn delete_cascades_to_pseudonyms(store: Arc<dyn Store>) {
    let ns = namespace("n", 8);
    store.create_namespace(&ns).await.unwrap();
    store
        .upsert_pseudonyms(&[candidate("n", "o1", "p-1")])
        .await
        .unwrap();
    store
        .delete_namespace(&ns.name, Some(ns.uid))
        .await
        .unwrap();
    store.create_namespace(&ns).await.unwrap();
    assert!(store
        .get_pseudonym(&ns.name, &pv("p-1"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        store.count_pseudonyms().await.unwrap(),
        vec![("n".to_owned(), 0)]
    );
}

/// Pages go in descending order of the pseudonym, whatever the originals'
/// order or the times the rows were made (docs/privacy.md): sequential
/// originals made in their order come out in the pseudonyms' order.
async fn list_pages_by_pseudonym_without_gaps(store: Arc<dyn Store>) {
    let ns = namespace("n", 8);
    store.create_namespace(&ns).await.unwrap();
    let t = now_micros();
    // Pseudonyms whose order is not the originals' (a fixed permutation).
    let batch: Vec<Candidate> = (0..23)
        .map(|i| Candidate {
            created_at: t + Duration::from_micros(i as u64),
            ..candidate("n", &format!("o{i:02}"), &format!("p{:02}", (i * 7) % 23))
        })
        .collect();
    store.upsert_pseudonyms(&batch).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_pseudonyms(&ns.name, 5, cursor.as_ref(), true)
            .await
            .unwrap();
        assert_eq!(page.total_size, Some(23));
        assert!(page.items.len() <= 5);
        seen.extend(page.items.iter().map(|p| p.pseudonym_value.clone()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..23).rev().map(|i| format!("p{i:02}")).collect();
    assert_eq!(
        seen, expected,
        "pages go by pseudonym, descending, once each"
    );
}

/// A page token is the last pseudonym of the page before it, nothing else:
/// a forged one (a pseudonym not in the namespace) pages on from its place
/// among the pseudonyms and compares no original.
async fn a_page_token_is_a_place_among_the_pseudonyms(store: Arc<dyn Store>) {
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    let t = now_micros();
    let batch: Vec<Candidate> = [("z", "pa"), ("a", "pc"), ("m", "pe")]
        .iter()
        .map(|(o, p)| Candidate {
            created_at: t,
            ..candidate("n", o, p)
        })
        .collect();
    store.upsert_pseudonyms(&batch).await.unwrap();
    let n = NamespaceName::parse("n").unwrap();
    for (token, expected) in [
        ("pe", &["pc", "pa"][..]),
        ("pd", &["pc", "pa"]),
        ("pa", &[]),
    ] {
        let cursor = PageCursor {
            pseudonym_value: token.into(),
        };
        let page = store
            .list_pseudonyms(&n, 10, Some(&cursor), false)
            .await
            .unwrap();
        let got: Vec<String> = page.items.into_iter().map(|i| i.pseudonym_value).collect();
        assert_eq!(got, expected, "after {token}");
    }
}

async fn concurrent_creates_through_the_coalescer_agree(store: Arc<dyn Store>) {
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    let coalescer = Coalescer::spawn(store.clone(), limits(store.as_ref(), 64), Arc::new(|_| {}));
    let mut tasks = Vec::new();
    for i in 0..400 {
        let c = coalescer.clone();
        tasks.push(tokio::spawn(async move {
            let original = format!("o{}", i % 40);
            let p = c
                .call(candidate("n", &original, &format!("p-{i}")))
                .await
                .unwrap();
            (original, stored(&p).pseudonym_value.clone())
        }));
    }
    let mut by_original = std::collections::HashMap::new();
    for t in tasks {
        let (o, p) = t.await.unwrap();
        let prev = by_original.entry(o).or_insert_with(|| p.clone());
        assert_eq!(*prev, p, "one original got two pseudonyms");
    }
    assert_eq!(by_original.len(), 40);
    assert_eq!(
        store.count_pseudonyms().await.unwrap(),
        vec![("n".to_owned(), 40)]
    );
}

/// Batched lookups answer in input order, each as `get_pseudonym` would: the row
/// of its own namespace, `None` for an unknown pseudonym or namespace, the same
/// row to every duplicate; also through the coalescer, many callers at once.
async fn batched_lookups_answer_each_caller_its_own_row(store: Arc<dyn Store>) {
    for ns in ["a", "bb"] {
        store.create_namespace(&namespace(ns, 8)).await.unwrap();
    }
    store
        .upsert_pseudonyms(&[
            candidate("a", "o1", "p-1"),
            candidate("a", "o2", "p-2"),
            candidate("bb", "o1", "p-1"),
        ])
        .await
        .unwrap();
    let lookup = |ns: &str, p: &str| Lookup {
        namespace: NamespaceName::parse(ns).unwrap(),
        pseudonym_value: pv(p),
    };
    let batch = [
        lookup("bb", "p-1"),
        lookup("a", "p-9"),
        lookup("a", "p-2"),
        lookup("zz", "p-1"),
        lookup("a", "p-1"),
        lookup("a", "p-2"),
    ];
    let rows = store.get_pseudonyms(&batch).await.unwrap();
    let seen: Vec<Option<(&str, &str, &str)>> = rows
        .iter()
        .map(|r| {
            r.as_ref().map(|p| {
                (
                    p.namespace.as_str(),
                    p.original_value.as_str(),
                    p.pseudonym_value.as_str(),
                )
            })
        })
        .collect();
    assert_eq!(
        seen,
        [
            Some(("bb", "o1", "p-1")),
            None,
            Some(("a", "o2", "p-2")),
            None,
            Some(("a", "o1", "p-1")),
            Some(("a", "o2", "p-2")),
        ]
    );
    assert!(store.get_pseudonyms(&[]).await.unwrap().is_empty());

    let coalescer: Coalescer<Lookup> =
        Coalescer::spawn(store.clone(), limits(store.as_ref(), 16), Arc::new(|_| {}));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let c = coalescer.clone();
        let l = batch[i % batch.len()].clone();
        tasks.push(tokio::spawn(async move { (i, c.call(l).await.unwrap()) }));
    }
    for t in tasks {
        let (i, got) = t.await.unwrap();
        assert_eq!(got, rows[i % batch.len()], "caller {i}");
    }
}

async fn a_healthy_store_is_writable(store: Arc<dyn Store>) {
    store.check_writable().await.unwrap();
    let s = store.pool_status();
    assert!(s.max_size >= 1);
}

async fn access_tokens_are_kept_by_hash_and_revoked_once(store: Arc<dyn Store>) {
    use vfps_core::access::{Grant, TokenHash, TokenKind, TokenRecord};
    let (record, secret) = TokenRecord::new(
        TokenKind::ServiceAccount,
        "loader",
        false,
        vec![Grant::parse("research=write,reverse-lookup").unwrap()],
        None,
    )
    .unwrap();
    store.insert_token(&record).await.unwrap();
    let again = store.insert_token(&record).await.unwrap_err();
    assert_eq!(again.kind, vfps_core::ErrorKind::AlreadyExists);
    let found = store.find_token(&secret.hash()).await.unwrap().unwrap();
    assert_eq!(found, record);
    assert_eq!(
        store
            .find_token(&TokenHash::of("vfps_sat_other"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.list_tokens().await.unwrap(), vec![record.clone()]);
    // Revoking twice keeps the first time; an unknown id is reported.
    let first = now_micros();
    assert!(store.revoke_token(&record.id, first).await.unwrap());
    assert!(store
        .revoke_token(&record.id, first + Duration::from_secs(5))
        .await
        .unwrap());
    assert!(!store.revoke_token("nope", first).await.unwrap());
    let revoked = store.find_token(&secret.hash()).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_at, Some(first));
    assert!(!revoked.usable(now_micros()));
    // The plaintext is nowhere in what is stored.
    let listed = format!("{:?}", store.list_tokens().await.unwrap());
    assert!(!listed.contains(&secret.expose()[9..]), "{listed}");
}

async fn created_counts_cover_exactly_their_window(store: Arc<dyn Store>) {
    let a = namespace("a", 16);
    store.create_namespace(&a).await.unwrap();
    store.create_namespace(&namespace("b", 16)).await.unwrap();
    let t0 = now_micros();
    let at = |i: u64| t0 + Duration::from_secs(i);
    let batch: Vec<Candidate> = (0..5)
        .map(|i| Candidate {
            created_at: at(i),
            ..candidate("a", &format!("o{i}"), &format!("p-{i}"))
        })
        .collect();
    store.upsert_pseudonyms(&batch).await.unwrap();
    let counts = |v: Vec<vfps_store::CreatedCount>| -> Vec<(String, i64)> {
        v.into_iter().map(|c| (c.namespace, c.count)).collect()
    };
    // (t0+1, t0+3]: o2 and o3; b has none but is listed.
    assert_eq!(
        counts(
            store
                .count_created(None, Some(at(1)), Some(at(3)))
                .await
                .unwrap()
        ),
        vec![("a".to_owned(), 2), ("b".to_owned(), 0)]
    );
    let only_a = store
        .count_created(Some(&a.name), None, Some(at(3)))
        .await
        .unwrap();
    assert_eq!(only_a.len(), 1);
    assert_eq!((only_a[0].count, only_a[0].uid), (4, a.uid));
    assert_eq!(
        store.count_pseudonyms().await.unwrap(),
        vec![("a".to_owned(), 5), ("b".to_owned(), 0)]
    );
}

/// A sign-out ends one key's sessions for good: the latest end counts, an
/// end is announced to the store's coherence (what was read before is
/// stale), and a row past its keeping time goes.
async fn ended_sessions_keep_the_latest_end_and_are_announced(store: Arc<dyn Store>) {
    use vfps_store::sessions::ended_name;
    let (a, b, old) = ([1u8; 32], [2u8; 32], [3u8; 32]);
    let t = now_micros();
    let later = t + Duration::from_secs(3600);
    assert!(store.sessions_ended(&[a, b]).await.unwrap().is_empty());
    let read_before = std::time::Instant::now();
    store.end_sessions(&a, t, later).await.unwrap();
    assert!(
        !store.coherence().fresh(&ended_name(&a), read_before),
        "an answer read before the end is still served"
    );
    assert_eq!(store.sessions_ended(&[a, b]).await.unwrap(), vec![(a, t)]);
    // An earlier end does not move it back; a later one moves it on.
    store
        .end_sessions(&a, t - Duration::from_secs(60), later)
        .await
        .unwrap();
    assert_eq!(store.sessions_ended(&[a]).await.unwrap(), vec![(a, t)]);
    let t2 = t + Duration::from_secs(5);
    store.end_sessions(&a, t2, later).await.unwrap();
    assert_eq!(store.sessions_ended(&[a]).await.unwrap(), vec![(a, t2)]);
    // A row no session can need any more goes with the next end.
    store
        .end_sessions(&old, t, t - Duration::from_secs(1))
        .await
        .unwrap();
    store.end_sessions(&b, t, later).await.unwrap();
    let mut found = store.sessions_ended(&[a, b, old]).await.unwrap();
    found.sort();
    assert_eq!(found, vec![(a, t2), (b, t)]);
}

/// A deleted entry is gone (its original may be pseudonymized anew); an
/// anonymized one resolves to no one and keeps its pseudonym from being
/// issued again; both are announced to the store's coherence.
async fn erasures_delete_or_unlink_one_entry(store: Arc<dyn Store>) {
    use vfps_store::{erasure::Erasure, Lookup};
    let ns = NamespaceName::parse("n").unwrap();
    let o = |raw: &str| OriginalValue::parse(raw).unwrap();
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    store
        .upsert_pseudonyms(&[
            candidate("n", "deleted", "p-1"),
            candidate("n", "anonymized", "p-2"),
            candidate("n", "also-anonymized", "p-3"),
            candidate("n", "kept", "p-4"),
        ])
        .await
        .unwrap();
    assert_eq!(
        store
            .find_pseudonym(&ns, &o("kept"))
            .await
            .unwrap()
            .unwrap()
            .pseudonym_value,
        "p-4"
    );

    let read_before = std::time::Instant::now();
    let erased = store
        .erase(&ns, &o("deleted"), Erasure::Delete)
        .await
        .unwrap();
    assert_eq!(erased.as_deref(), Some("p-1"));
    assert!(
        !store.coherence().fresh("n", read_before),
        "caches of the namespace stay fresh"
    );
    assert_eq!(
        store.find_pseudonym(&ns, &o("deleted")).await.unwrap(),
        None
    );
    assert_eq!(store.get_pseudonym(&ns, &pv("p-1")).await.unwrap(), None);
    assert_eq!(
        store
            .erase(&ns, &o("deleted"), Erasure::Delete)
            .await
            .unwrap(),
        None
    );
    let anew = store
        .upsert_pseudonyms(&[candidate("n", "deleted", "p-5")])
        .await
        .unwrap();
    assert_eq!(stored(&anew[0]).pseudonym_value, "p-5");

    for (original, pseudonym) in [("anonymized", "p-2"), ("also-anonymized", "p-3")] {
        let erased = store
            .erase(&ns, &o(original), Erasure::Anonymize)
            .await
            .unwrap();
        assert_eq!(erased.as_deref(), Some(pseudonym));
        assert_eq!(store.find_pseudonym(&ns, &o(original)).await.unwrap(), None);
        assert_eq!(
            store.get_pseudonym(&ns, &pv(pseudonym)).await.unwrap(),
            None
        );
    }
    let lookups: Vec<Lookup> = ["p-2", "p-3", "p-4"]
        .iter()
        .map(|p| Lookup {
            namespace: ns.clone(),
            pseudonym_value: pv(p),
        })
        .collect();
    let found = store.get_pseudonyms(&lookups).await.unwrap();
    assert_eq!(found[0], None);
    assert_eq!(found[1], None);
    assert_eq!(found[2].as_ref().unwrap().original_value, "kept");
    // The anonymized pseudonym is reserved: no other original gets it; the
    // original itself gets a new one.
    let reuse = store
        .upsert_pseudonyms(&[candidate("n", "someone-else", "p-2")])
        .await
        .unwrap();
    assert!(
        matches!(reuse[0], Upserted::Conflict),
        "p-2 was issued again"
    );
    let again = store
        .upsert_pseudonyms(&[candidate("n", "anonymized", "p-6")])
        .await
        .unwrap();
    assert_eq!(stored(&again[0]).pseudonym_value, "p-6");
}

/// A transaction's new pseudonyms: every one stored, or none.
async fn insert_together_stores_all_or_nothing(store: Arc<dyn Store>) {
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    store.create_namespace(&namespace("m", 8)).await.unwrap();
    let ns = NamespaceName::parse("n").unwrap();
    store
        .upsert_pseudonyms(&[candidate("n", "taken", "p-taken")])
        .await
        .unwrap();
    let none_of = |originals: &'static [&'static str]| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            for o in originals {
                let found = store
                    .find_pseudonym(&ns, &OriginalValue::parse(o).unwrap())
                    .await
                    .unwrap();
                assert_eq!(found, None, "{o} was stored by a refused batch");
            }
        }
    };
    let refused = [
        vec![candidate("n", "a", "p-a"), candidate("n", "taken", "p-x")],
        vec![candidate("n", "a", "p-a"), candidate("n", "b", "p-taken")],
        vec![candidate("n", "a", "p-a"), candidate("n", "a", "p-b")],
        vec![
            candidate("n", "a", "p-a"),
            Candidate {
                namespace_uid: NamespaceUid(12345),
                ..candidate("m", "b", "p-b")
            },
        ],
    ];
    for batch in refused {
        assert!(!store.insert_together(&batch).await.unwrap(), "{batch:?}");
        none_of(&["a", "b"]).await;
    }
    let both = [candidate("n", "a", "p-a"), candidate("m", "b", "p-b")];
    assert!(store.insert_together(&both).await.unwrap());
    let a = store
        .find_pseudonym(&ns, &OriginalValue::parse("a").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.pseudonym_value, "p-a");
    let b = store
        .get_pseudonym(&NamespaceName::parse("m").unwrap(), &pv("p-b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.original_value, "b");
}

/// The originals' identifier system: declared at creation and read back; else
/// adopted once by the first to name one, never changed after; another
/// incarnation or a missing namespace adopts nothing.
async fn an_original_system_is_declared_or_adopted_once(store: Arc<dyn Store>) {
    use vfps_core::OriginalSystem;
    let sys = |s: &str| OriginalSystem::parse(s).unwrap();
    let mut declared = namespace("declared", 8);
    declared.settings = declared
        .settings
        .with_original_system(Some(sys("https://a/pid")));
    store.create_namespace(&declared).await.unwrap();
    let read = store.get_namespace(&declared.name).await.unwrap().unwrap();
    assert_eq!(
        read.settings.original_system.as_deref(),
        Some("https://a/pid")
    );
    let after = store
        .adopt_original_system(&declared.name, declared.uid, &sys("https://b/sample"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.settings.original_system.as_deref(),
        Some("https://a/pid"),
        "a declaration is never changed"
    );

    let open = namespace("open", 8);
    store.create_namespace(&open).await.unwrap();
    assert_eq!(
        store
            .get_namespace(&open.name)
            .await
            .unwrap()
            .unwrap()
            .settings
            .original_system,
        None
    );
    let other = store
        .adopt_original_system(&open.name, NamespaceUid(999), &sys("https://c"))
        .await
        .unwrap();
    assert!(other.is_none(), "another incarnation adopts nothing");
    let first = store
        .adopt_original_system(&open.name, open.uid, &sys("https://b/sample"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.settings.original_system.as_deref(),
        Some("https://b/sample")
    );
    let second = store
        .adopt_original_system(&open.name, open.uid, &sys("https://a/pid"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.settings.original_system.as_deref(),
        Some("https://b/sample"),
        "the first adoption wins"
    );
    let gone = store
        .adopt_original_system(
            &NamespaceName::parse("gone").unwrap(),
            uid_of("gone"),
            &sys("x:y"),
        )
        .await
        .unwrap();
    assert!(gone.is_none());
}

/// A sealed namespace's row keeps what it was given: the blind index where
/// the original was, the ciphertext beside it, answered by every read and
/// dropped by anonymization (the pseudonym stays reserved, resolving to no
/// one); a multi-pseudonym row likewise.
async fn sealed_rows_keep_their_ciphertext_until_anonymized(store: Arc<dyn Store>) {
    use vfps_store::erasure::Erasure;
    let ns = NamespaceName::parse("n").unwrap();
    let mut n = namespace("n", 8);
    n.settings = n.settings.with_sealed(true);
    store.create_namespace(&n).await.unwrap();
    let sealed = |p: &str| format!("ciphertext of {p}").into_bytes();
    let batch: Vec<Candidate> = [("~k1.index-a", "p-a"), ("~k1.index-b", "p-b")]
        .iter()
        .map(|(index, p)| Candidate {
            sealed: Some(sealed(p)),
            ..candidate("n", index, p)
        })
        .collect();
    let stored_rows = store.upsert_pseudonyms(&batch).await.unwrap();
    assert_eq!(stored(&stored_rows[0]).original_sealed, Some(sealed("p-a")));
    // Found by its index, read back by pseudonym, alone or batched.
    let found = store
        .find_pseudonym(&ns, &OriginalValue::parse("~k1.index-b").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.original_sealed, Some(sealed("p-b")));
    let read = store.get_pseudonym(&ns, &pv("p-a")).await.unwrap().unwrap();
    assert_eq!(read.original_value, "~k1.index-a");
    assert_eq!(read.original_sealed, Some(sealed("p-a")));
    let again = store.upsert_pseudonyms(&batch[..1]).await.unwrap();
    assert_eq!(stored(&again[0]).original_sealed, Some(sealed("p-a")));
    // Anonymized: no ciphertext left in the row.
    store
        .erase(
            &ns,
            &OriginalValue::parse("~k1.index-a").unwrap(),
            Erasure::Anonymize,
        )
        .await
        .unwrap();
    assert_eq!(store.get_pseudonym(&ns, &pv("p-a")).await.unwrap(), None);
    // Every row of a multi-pseudonym namespace its own ciphertext.
    let mut m = namespace("m", 8);
    m.settings = m.settings.with_multi(true).unwrap().with_sealed(true);
    store.create_namespace(&m).await.unwrap();
    assert!(
        store
            .get_namespace(&m.name)
            .await
            .unwrap()
            .unwrap()
            .settings
            .sealed
    );
    let added = store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &OriginalValue::parse("~k1.index-m").unwrap(),
            &["p-1".to_owned(), "p-2".to_owned()],
            &[sealed("p-1"), sealed("p-2")],
            now_micros(),
        )
        .await
        .unwrap();
    let seals: Vec<Option<Vec<u8>>> = added.into_iter().map(|p| p.original_sealed).collect();
    assert_eq!(seals, [Some(sealed("p-1")), Some(sealed("p-2"))]);
}

/// A namespace incarnation's wrapped keys: stored once a version (a second
/// writer's are refused, and read the first's), newest version first, and
/// rewrapped by compare-and-set on the key that wrapped them.
async fn namespace_keys_are_stored_once_a_version(store: Arc<dyn Store>) {
    use vfps_store::keys::StoredKeys;
    let keys = |version: u32, by: &str| StoredKeys {
        uid: NamespaceUid(42),
        version,
        data: vec![1, 2, 3],
        index: vec![4, 5, 6],
        wrapped_by: by.into(),
    };
    assert!(store
        .namespace_keys(NamespaceUid(42))
        .await
        .unwrap()
        .is_empty());
    assert!(store.put_namespace_keys(&keys(1, "first")).await.unwrap());
    assert!(!store.put_namespace_keys(&keys(1, "second")).await.unwrap());
    assert!(store.put_namespace_keys(&keys(2, "first")).await.unwrap());
    let read = store.namespace_keys(NamespaceUid(42)).await.unwrap();
    assert_eq!(read, vec![keys(2, "first"), keys(1, "first")]);
    // Rewrapped only where still wrapped by the key named.
    let rewrapped = StoredKeys {
        data: vec![7, 8, 9],
        ..keys(1, "next")
    };
    assert!(!store
        .rewrap_namespace_keys(&rewrapped, "second")
        .await
        .unwrap());
    assert!(store
        .rewrap_namespace_keys(&rewrapped, "first")
        .await
        .unwrap());
    assert!(!store
        .rewrap_namespace_keys(&rewrapped, "first")
        .await
        .unwrap());
    let read = store.namespace_keys(NamespaceUid(42)).await.unwrap();
    assert_eq!(read, vec![keys(2, "first"), rewrapped]);
    assert!(store
        .namespace_keys(NamespaceUid(43))
        .await
        .unwrap()
        .is_empty());
}

/// Sealed rows found by the key version they are not under, in pages, and
/// replaced only where their ciphertext is still the one read (a row
/// re-sealed or anonymized in between is left as it is), in both tables.
async fn sealed_rows_are_resealed_only_where_unchanged(store: Arc<dyn Store>) {
    use vfps_store::erasure::Erasure;
    use vfps_store::keys::{Resealed, SealedTable, Which};
    let ns = NamespaceName::parse("n").unwrap();
    let mut n = namespace("n", 8);
    n.settings = n.settings.with_sealed(true);
    store.create_namespace(&n).await.unwrap();
    let under = |v: u32, p: &str| {
        let mut s = vec![1u8];
        s.extend_from_slice(&v.to_le_bytes());
        s.extend_from_slice(format!("ciphertext of {p}").as_bytes());
        s
    };
    let batch: Vec<Candidate> = (0..5)
        .map(|i| Candidate {
            sealed: Some(under(if i == 2 { 2 } else { 1 }, &format!("p-{i}"))),
            ..candidate("n", &format!("~k1.index-{i}"), &format!("p-{i}"))
        })
        .collect();
    store.upsert_pseudonyms(&batch).await.unwrap();
    assert_eq!(store.sealed_versions(&ns).await.unwrap(), [(1, 4), (2, 1)]);
    let page = |after: Option<&'static str>| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            store
                .sealed_rows(
                    &ns,
                    SealedTable::Pseudonyms,
                    Which::NotSealedUnder(2),
                    after,
                    2,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.pseudonym)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(None).await, ["p-0", "p-1"]);
    assert_eq!(page(Some("p-1")).await, ["p-3", "p-4"]);
    assert!(page(Some("p-4")).await.is_empty());
    // p-3 anonymized and p-4 re-sealed by someone else since they were read.
    store
        .erase(
            &ns,
            &OriginalValue::parse("~k1.index-3").unwrap(),
            Erasure::Anonymize,
        )
        .await
        .unwrap();
    let other = [Resealed {
        pseudonym: "p-4".into(),
        old: under(1, "p-4"),
        new: under(2, "p-4 by another"),
    }];
    assert_eq!(
        store
            .reseal(&ns, SealedTable::Pseudonyms, &other)
            .await
            .unwrap(),
        1
    );
    let mine: Vec<Resealed> = ["p-0", "p-1", "p-3", "p-4"]
        .iter()
        .map(|p| Resealed {
            pseudonym: (*p).into(),
            old: under(1, p),
            new: under(2, p),
        })
        .collect();
    assert_eq!(
        store
            .reseal(&ns, SealedTable::Pseudonyms, &mine)
            .await
            .unwrap(),
        2
    );
    let read = store.get_pseudonym(&ns, &pv("p-4")).await.unwrap().unwrap();
    assert_eq!(read.original_sealed, Some(under(2, "p-4 by another")));
    let read = store.get_pseudonym(&ns, &pv("p-0")).await.unwrap().unwrap();
    assert_eq!(read.original_sealed, Some(under(2, "p-0")));
    assert!(page(None).await.is_empty());
    assert_eq!(store.sealed_versions(&ns).await.unwrap(), [(2, 4)]);
    // The multi-pseudonym table likewise.
    let mut m = namespace("m", 8);
    m.settings = m.settings.with_multi(true).unwrap().with_sealed(true);
    store.create_namespace(&m).await.unwrap();
    store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &OriginalValue::parse("~k1.index-m").unwrap(),
            &["q-1".to_owned(), "q-2".to_owned()],
            &[under(1, "q-1"), under(3, "q-2")],
            now_micros(),
        )
        .await
        .unwrap();
    let old = store
        .sealed_rows(
            &m.name,
            SealedTable::Multi,
            Which::NotSealedUnder(3),
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].pseudonym, "q-1");
    let redo = [Resealed {
        pseudonym: "q-1".into(),
        old: old[0].sealed.clone(),
        new: under(3, "q-1"),
    }];
    assert_eq!(
        store
            .reseal(&m.name, SealedTable::Multi, &redo)
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.sealed_versions(&m.name).await.unwrap(), [(3, 2)]);
}

/// Moving a namespace's originals to the other form: once started, a row
/// of the old form is refused (a replica that still writes it is told to
/// read the namespace anew) and one of the new form stored; the old rows
/// are found and moved only where still as read; the move ends once.
async fn a_move_of_originals_fences_the_old_form(store: Arc<dyn Store>) {
    use vfps_store::keys::{Rekeyed, SealedTable};
    let n = namespace("n", 8);
    let ns = n.name.clone();
    store.create_namespace(&n).await.unwrap();
    store
        .upsert_pseudonyms(&[candidate("n", "o-a", "p-a"), candidate("n", "o-b", "p-b")])
        .await
        .unwrap();
    assert!(store.move_originals(&ns, n.uid, true).await.unwrap());
    assert!(!store
        .move_originals(&ns, vfps_core::NamespaceUid(n.uid.0 + 1), true)
        .await
        .unwrap());
    let now = store.get_namespace(&ns).await.unwrap().unwrap().settings;
    assert!(now.sealed && now.moving);
    // The old form refused, the new one stored.
    let old = store
        .upsert_pseudonyms(&[candidate("n", "o-c", "p-c")])
        .await
        .unwrap();
    assert!(matches!(old[0], Upserted::Conflict));
    // The new form by a writer that does not know of the move: refused too.
    let unaware = Candidate {
        sealed: Some(b"ct-d".to_vec()),
        ..candidate("n", "~k1.d", "p-d")
    };
    let refused = store
        .upsert_pseudonyms(std::slice::from_ref(&unaware))
        .await
        .unwrap();
    assert!(matches!(refused[0], Upserted::Conflict));
    let sealed = Candidate {
        moving: true,
        ..unaware
    };
    let new = store.upsert_pseudonyms(&[sealed]).await.unwrap();
    assert_eq!(
        stored(&new[0]).original_sealed.as_deref(),
        Some(&b"ct-d"[..])
    );
    // The plain rows, moved where unchanged.
    let plain = store
        .plain_rows(&ns, SealedTable::Pseudonyms, None, 10)
        .await
        .unwrap();
    let found: Vec<(&str, &str)> = plain
        .iter()
        .map(|r| (r.pseudonym.as_str(), r.original.as_str()))
        .collect();
    assert_eq!(found, [("p-a", "o-a"), ("p-b", "o-b")]);
    let moved = |p: &str, old: &str, new: &str| Rekeyed {
        pseudonym: p.into(),
        old_value: old.into(),
        old_sealed: None,
        new_value: new.into(),
        new_sealed: Some(format!("ct-{p}").into_bytes()),
    };
    let rows = [
        moved("p-a", "o-a", "~k1.a"),
        moved("p-b", "o-stale", "~k1.b"),
        // A new form some row holds already: left alone.
        moved("p-b", "o-b", "~k1.d"),
    ];
    assert_eq!(
        store
            .rekey(&ns, SealedTable::Pseudonyms, &rows)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .find_pseudonym(&ns, &OriginalValue::parse("~k1.a").unwrap())
            .await
            .unwrap()
            .unwrap()
            .pseudonym_value,
        "p-a"
    );
    let rows = [moved("p-b", "o-b", "~k1.b")];
    assert_eq!(
        store
            .rekey(&ns, SealedTable::Pseudonyms, &rows)
            .await
            .unwrap(),
        1
    );
    assert!(store
        .plain_rows(&ns, SealedTable::Pseudonyms, None, 10)
        .await
        .unwrap()
        .is_empty());
    // Ended once; started again only to move the other way.
    assert!(!store.moved(&ns, n.uid, false).await.unwrap());
    assert!(store.moved(&ns, n.uid, true).await.unwrap());
    assert!(!store.moved(&ns, n.uid, true).await.unwrap());
    assert!(!store.move_originals(&ns, n.uid, true).await.unwrap());
    let now = store.get_namespace(&ns).await.unwrap().unwrap().settings;
    assert!(now.sealed && !now.moving);
    assert!(store.move_originals(&ns, n.uid, false).await.unwrap());
    // A multi-pseudonym namespace refuses the old form too.
    let m = {
        let mut m = namespace("m", 8);
        m.settings = m.settings.with_multi(true).unwrap();
        m
    };
    store.create_namespace(&m).await.unwrap();
    assert!(store.move_originals(&m.name, m.uid, true).await.unwrap());
    let refused = store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &OriginalValue::parse("o-m").unwrap(),
            &["q-1".to_owned()],
            &[],
            now_micros(),
        )
        .await
        .unwrap();
    assert!(refused.is_empty());
}

/// A re-index: once switched on, only rows indexed under the new key
/// version are inserted (and only by a writer that knows of the move); the
/// rows under the old one are found by it; it starts once, and not while
/// another move runs.
async fn a_reindex_fences_the_old_index(store: Arc<dyn Store>) {
    use vfps_store::keys::{Rekeyed, SealedTable, Which};
    let mut n = namespace("n", 8);
    n.settings = n.settings.with_sealed(true);
    let ns = n.name.clone();
    store.create_namespace(&n).await.unwrap();
    let sealed = |original: &str, p: &str| Candidate {
        sealed: Some(format!("ct-{p}").into_bytes()),
        ..candidate("n", original, p)
    };
    store
        .upsert_pseudonyms(&[sealed("~k1.a", "p-a"), sealed("~k1.b", "p-b")])
        .await
        .unwrap();
    assert!(!store.reindex_originals(&ns, n.uid, 1).await.unwrap());
    assert!(store.reindex_originals(&ns, n.uid, 2).await.unwrap());
    assert!(!store.reindex_originals(&ns, n.uid, 3).await.unwrap());
    let now = store.get_namespace(&ns).await.unwrap().unwrap().settings;
    assert_eq!(
        (now.index_version, now.moving_from_index, now.moving),
        (2, Some(1), true)
    );
    // Neither the old index, nor the new one from a writer unaware.
    for c in [
        Candidate {
            moving: true,
            ..sealed("~k1.c", "p-c")
        },
        sealed("~k2.c", "p-c"),
    ] {
        let r = store.upsert_pseudonyms(&[c]).await.unwrap();
        assert!(matches!(r[0], Upserted::Conflict));
    }
    let r = store
        .upsert_pseudonyms(&[Candidate {
            moving: true,
            ..sealed("~k2.c", "p-c")
        }])
        .await
        .unwrap();
    assert_eq!(stored(&r[0]).pseudonym_value, "p-c");
    let old = store
        .sealed_rows(
            &ns,
            SealedTable::Pseudonyms,
            Which::NotIndexedUnder(2),
            None,
            10,
        )
        .await
        .unwrap();
    let found: Vec<(&str, &str)> = old
        .iter()
        .map(|r| (r.pseudonym.as_str(), r.value.as_str()))
        .collect();
    assert_eq!(found, [("p-a", "~k1.a"), ("p-b", "~k1.b")]);
    let rows: Vec<Rekeyed> = old
        .iter()
        .map(|r| Rekeyed {
            pseudonym: r.pseudonym.clone(),
            old_value: r.value.clone(),
            old_sealed: Some(r.sealed.clone()),
            new_value: r.value.replace("~k1.", "~k2."),
            new_sealed: Some(r.sealed.clone()),
        })
        .collect();
    assert_eq!(
        store
            .rekey(&ns, SealedTable::Pseudonyms, &rows)
            .await
            .unwrap(),
        2
    );
    assert!(store
        .sealed_rows(
            &ns,
            SealedTable::Pseudonyms,
            Which::NotIndexedUnder(2),
            None,
            10
        )
        .await
        .unwrap()
        .is_empty());
    // A plain move cannot start over a re-index; ending it ends both.
    assert!(!store.move_originals(&ns, n.uid, false).await.unwrap());
    assert!(store.moved(&ns, n.uid, true).await.unwrap());
    let now = store.get_namespace(&ns).await.unwrap().unwrap().settings;
    assert_eq!(
        (now.index_version, now.moving_from_index, now.moving),
        (2, None, false)
    );
    let r = store
        .upsert_pseudonyms(&[sealed("~k2.d", "p-d")])
        .await
        .unwrap();
    assert_eq!(stored(&r[0]).pseudonym_value, "p-d");
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod on_postgres {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(postgres().await).await })*
        }
        mod on_sqlite {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(sqlite().await).await })*
        }
    };
}

#[path = "contract/jobs.rs"]
mod jobs;
#[path = "contract/multi.rs"]
mod multi;

contract!(
    namespaces_round_trip,
    upsert_returns_the_existing_pseudonym,
    a_colliding_pseudonym_is_a_conflict_and_a_missing_namespace_too,
    delete_cascades_to_pseudonyms,
    list_pages_by_pseudonym_without_gaps,
    a_page_token_is_a_place_among_the_pseudonyms,
    concurrent_creates_through_the_coalescer_agree,
    batched_lookups_answer_each_caller_its_own_row,
    a_healthy_store_is_writable,
    deleting_a_namespace_during_creates_leaves_no_orphans,
    access_tokens_are_kept_by_hash_and_revoked_once,
    created_counts_cover_exactly_their_window,
    ended_sessions_keep_the_latest_end_and_are_announced,
    erasures_delete_or_unlink_one_entry,
    insert_together_stores_all_or_nothing,
    an_original_system_is_declared_or_adopted_once,
    sealed_rows_keep_their_ciphertext_until_anonymized,
    namespace_keys_are_stored_once_a_version,
    sealed_rows_are_resealed_only_where_unchanged,
    a_move_of_originals_fences_the_old_form,
    a_reindex_fences_the_old_index,
);

/// Npgsql's `Search Path` (upstream's chart: `database.schema`): the tables live in
/// that schema, which the migrations create, and every session works in it.
#[tokio::test]
async fn a_search_path_puts_the_tables_in_its_schema() {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let cs = format!("{};Search Path=vfps_app", db.connection_string);
    let opts = vfps_store::postgres::npgsql::parse(&cs, None, None)
        .unwrap()
        .options;
    assert_eq!(opts.first_schema().as_deref(), Some("vfps_app"));
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    let tables = cluster
        .psql(
            &db.name,
            "SELECT string_agg(schemaname || '.' || tablename, ',' ORDER BY tablename) FROM pg_tables WHERE tablename IN ('namespaces', 'pseudonyms')",
        )
        .unwrap();
    assert_eq!(tables.trim(), "vfps_app.namespaces,vfps_app.pseudonyms");
    store
        .create_namespace(&namespace("in-schema", 16))
        .await
        .unwrap();
    assert!(store
        .get_namespace(&NamespaceName::parse("in-schema").unwrap())
        .await
        .unwrap()
        .is_some());
    let bad = vfps_store::postgres::npgsql::parse("Host=x;Search Path= ", None, None);
    assert!(bad.is_err());
}

#[tokio::test]
async fn postgres_migrations_are_idempotent_and_need_no_superuser() {
    let db = vfps_testkit::shared().create_database().unwrap();
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    let (a, b) = tokio::join!(store.migrate(), store.migrate());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a.applied.len() + b.applied.len(),
        vfps_store::migrate::POSTGRES.len(),
        "exactly one run applies each version"
    );
    let third = store.migrate().await.unwrap();
    assert!(third.applied.is_empty());
    let every: Vec<i64> = vfps_store::migrate::POSTGRES
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(third.already_applied, every);
}

#[tokio::test]
async fn a_tampered_migration_checksum_stops_the_migration() {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    cluster
        .psql(&db.name, "UPDATE vfps_schema_migrations SET checksum = 'x'")
        .unwrap();
    let e = store.migrate().await.unwrap_err();
    assert!(e.message.contains("checksum"), "{e}");
}

#[tokio::test]
async fn a_stopped_database_is_unavailable_and_recovers_after_restart() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    store.check_writable().await.unwrap();
    cluster.stop_server().unwrap();
    let e = store.check_writable().await.unwrap_err();
    assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e}");
    let e = store.list_namespaces().await.unwrap_err();
    assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e}");
    cluster.start_server().unwrap();
    store.check_writable().await.unwrap();
}

#[tokio::test]
async fn a_read_only_connection_is_unavailable_and_discarded() {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let store = store_with_namespace_n(&db).await;
    // Simulate a demoted primary: new sessions default to read-only.
    set_read_only(&db, true);
    cluster
        .psql(
            "postgres",
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
                db.name
            ),
        )
        .unwrap();
    // The terminated pooled connection and then the read-only one are both transient.
    for _ in 0..3 {
        let e = store
            .upsert_pseudonyms(&[candidate("n", "o", "p-1")])
            .await
            .unwrap_err();
        assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e}");
    }
    set_read_only(&db, false);
    // A discarded read-only connection is not reused: the next call works.
    let r = store
        .upsert_pseudonyms(&[candidate("n", "o", "p-1")])
        .await
        .unwrap();
    assert_eq!(stored(&r[0]).pseudonym_value, "p-1");
}

/// A host that accepts TCP connections and never answers them: a paused
/// server, as its clients see it (its kernel completes the handshake).
fn silent_host() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Npgsql bounds one host's whole connection (start-up, authentication, the
/// read-write check) by `Timeout`, then tries the next; a host that did not
/// answer is tried last for `Host Recheck Seconds`. Before, a silent first
/// host held every new connection until the pool's create budget and the
/// listed primary behind it was never reached.
#[tokio::test]
async fn a_silent_first_host_costs_one_timeout_and_is_tried_last_afterwards() {
    let cluster = vfps_testkit::shared();
    let db = cluster.create_database().unwrap();
    let (_silent, silent_port) = silent_host();
    let listed = db.connection_string.replacen(
        "Host=127.0.0.1;",
        &format!("Host=127.0.0.1:{silent_port},127.0.0.1;Timeout=1;Target Session Attributes=read-write;"),
        1,
    );
    assert_ne!(listed, db.connection_string, "the test kit's Host changed");
    let opts = vfps_store::postgres::npgsql::parse(&listed, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    let started = std::time::Instant::now();
    store.migrate().await.unwrap();
    let first = started.elapsed();
    assert!(
        first >= Duration::from_millis(900) && first < Duration::from_secs(3),
        "the silent host cost {first:?}, not one Timeout"
    );
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    // New connections (more than one at once) go to the primary first now.
    let started = std::time::Instant::now();
    let calls = (0..4).map(|i| {
        let store = &store;
        async move {
            store
                .upsert_pseudonyms(&[candidate("n", &format!("o-{i}"), &format!("p-{i}"))])
                .await
        }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "new connections waited for the silent host again: {:?}",
        started.elapsed()
    );
}

/// A store on `db` (its connection string as the test kit gives it),
/// migrated, with the namespace `n`.
async fn store_with_namespace_n(db: &vfps_testkit::TestDatabase) -> PgStore {
    let opts = vfps_store::postgres::npgsql::parse(&db.connection_string, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    store.migrate().await.unwrap();
    store.create_namespace(&namespace("n", 8)).await.unwrap();
    store
}

/// Sets whether new sessions of `db` default to read-only: a standby, as the
/// read-write check sees it, or (off) the same server promoted.
fn set_read_only(db: &vfps_testkit::TestDatabase, on: bool) {
    let on = if on { "on" } else { "off" };
    vfps_testkit::shared()
        .psql(
            "postgres",
            &format!(
                "ALTER DATABASE {} SET default_transaction_read_only = {on}",
                db.name
            ),
        )
        .unwrap();
}

/// A standby promoted while connections wait out a paused former primary:
/// they go to the promoted host within a quarter second, not after
/// `Timeout`, even when no new connection is attempted meanwhile (every pool
/// slot waiting, as under load). Before, each such connection held its pool
/// slot on the paused host for the whole `Timeout` and then failed its call.
#[tokio::test]
async fn connections_waiting_on_a_paused_host_go_to_a_standby_promoted_meanwhile() {
    let db = vfps_testkit::shared().create_database().unwrap();
    drop(store_with_namespace_n(&db).await);
    let (_silent, silent_port) = silent_host();
    let listed = db
        .connection_string
        .replacen(
            "Host=127.0.0.1;",
            &format!(
                "Host=127.0.0.1,127.0.0.1:{silent_port};Target Session Attributes=read-write;"
            ),
            1,
        )
        .replacen("Timeout=2;", "Timeout=5;", 1);
    assert!(
        listed.contains(&format!(":{silent_port};")) && listed.contains("Timeout=5;"),
        "the test kit's connection string changed: {listed}"
    );
    let opts = vfps_store::postgres::npgsql::parse(&listed, None, None)
        .unwrap()
        .options;
    let store = PgStore::new(&opts).unwrap();
    // The listed standby refuses writes, the paused former primary is found
    // silent: this call fails after one Timeout, and the paused host is now
    // known offline (tried last).
    set_read_only(&db, true);
    let e = store
        .upsert_pseudonyms(&[candidate("n", "o-0", "p-0")])
        .await
        .unwrap_err();
    assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e}");
    // Calls whose connections are waiting on the paused host when the
    // standby is promoted, and no call after: one of them has to find it.
    let started = std::time::Instant::now();
    let waiting = (1..=3).map(|i| {
        let store = &store;
        async move {
            store
                .upsert_pseudonyms(&[candidate("n", &format!("o-{i}"), &format!("p-{i}"))])
                .await
        }
    });
    let promoted_meanwhile = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        set_read_only(&db, false);
    };
    let (waited, ()) = tokio::join!(futures::future::join_all(waiting), promoted_meanwhile);
    let took = started.elapsed();
    for (i, r) in (1..).zip(waited) {
        let r = r.unwrap_or_else(|e| panic!("call {i}, waiting on the paused host, failed: {e}"));
        assert_eq!(stored(&r[0]).pseudonym_value, format!("p-{i}"));
    }
    assert!(
        took < Duration::from_secs(3),
        "the waiting calls took {took:?}: they waited out the paused host's Timeout (5 s)"
    );
}

/// Signals processes by id (`kill -s <signal>`); quiet about those gone.
fn signal(signal: &str, pids: &[String]) {
    if pids.is_empty() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .args(["-s", signal])
        .args(pids)
        .status();
}

/// Backends stopped by a test, continued (and ended) however it ends: the
/// test kit's cluster is shared.
struct Stopped(Vec<String>);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal("CONT", &self.0);
        signal("TERM", &self.0);
    }
}

/// A store on a fresh database of the test kit's cluster with its monitor
/// running, a namespace `n` and one pseudonym made: a pooled connection and
/// the monitor's, both answering.
async fn monitored_store() -> (PgStore, vfps_testkit::TestDatabase) {
    let db = vfps_testkit::shared().create_database().unwrap();
    let store = store_with_namespace_n(&db).await;
    store.spawn_monitor().unwrap();
    store
        .upsert_pseudonyms(&[candidate("n", "o-1", "p-1")])
        .await
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while sessions_of(&db).len() < 2 {
        assert!(std::time::Instant::now() < until, "no monitor connection");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The monitor's first probes (it probes every 250 ms once connected).
    tokio::time::sleep(Duration::from_secs(1)).await;
    (store, db)
}

/// The backends serving `db`'s sessions.
fn sessions_of(db: &vfps_testkit::TestDatabase) -> Vec<String> {
    vfps_testkit::shared()
        .psql(
            "postgres",
            &format!(
                "SELECT pid FROM pg_stat_activity WHERE datname = '{}' \
                 AND pid <> pg_backend_pid()",
                db.name
            ),
        )
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A paused primary (or one replaced by a failover) keeps the pool's idle
/// connections open: its kernel still answers. Once the monitor's probe finds
/// it silent, those connections are closed instead of handed out, and a call
/// gets a fresh one — before, it got the stopped one and hung until its
/// deadline.
#[tokio::test]
async fn connections_to_a_primary_that_stopped_answering_are_not_handed_out_again() {
    let (store, db) = monitored_store().await;
    // Every session stopped; the server still accepts new ones.
    let stopped = Stopped(sessions_of(&db));
    signal("STOP", &stopped.0);
    // The monitor's probe gives up after 2 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Within 5 s, where the stopped connection held it for the whole
    // Command Timeout (10 s here).
    let call = tokio::time::timeout(
        Duration::from_secs(5),
        store.upsert_pseudonyms(&[candidate("n", "o-2", "p-2")]),
    )
    .await;
    assert!(
        matches!(call, Ok(Ok(_))),
        "a call after the monitor found the primary silent: {call:?}"
    );
    drop(stopped);
}

/// A statement already sent to a primary that then stops answering ends as
/// unavailable once the monitor finds it silent (its probe gives up after
/// 2 s), not at the Command Timeout (10 s here), and the next call gets a
/// fresh connection.
#[tokio::test]
async fn a_statement_in_flight_on_a_primary_that_stopped_answering_ends_when_the_monitor_finds_it()
{
    let (store, db) = monitored_store().await;
    let stopped = Stopped(sessions_of(&db));
    signal("STOP", &stopped.0);
    let started = std::time::Instant::now();
    let call = tokio::time::timeout(
        Duration::from_secs(6),
        store.upsert_pseudonyms(&[candidate("n", "o-2", "p-2")]),
    )
    .await;
    let e = match call {
        Ok(Err(e)) => e,
        other => panic!(
            "the statement on the stopped connection: {other:?} after {:?}",
            started.elapsed()
        ),
    };
    assert_eq!(e.kind, vfps_core::ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("stopped answering"), "{e}");
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        store.upsert_pseudonyms(&[candidate("n", "o-2", "p-2")]),
    )
    .await;
    assert!(matches!(next, Ok(Ok(_))), "the next call: {next:?}");
    drop(stopped);
}

async fn deleting_a_namespace_during_creates_leaves_no_orphans(store: Arc<dyn Store>) {
    let ns = namespace("n", 16);
    store.create_namespace(&ns).await.unwrap();
    let coalescer = Coalescer::spawn(store.clone(), limits(store.as_ref(), 16), Arc::new(|_| {}));
    let mut tasks = Vec::new();
    for i in 0..600 {
        let c = coalescer.clone();
        tasks.push(tokio::spawn(async move {
            let _ = c
                .call(candidate("n", &format!("o{i}"), &format!("p-{i}")))
                .await;
        }));
        if i == 200 {
            assert!(store
                .delete_namespace(&ns.name, Some(ns.uid))
                .await
                .unwrap());
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Recreated, the namespace must start empty: nothing was left behind.
    store.create_namespace(&ns).await.unwrap();
    let page = store
        .list_pseudonyms(&ns.name, 1000, None, true)
        .await
        .unwrap();
    assert_eq!(
        page.total_size,
        Some(0),
        "orphaned pseudonyms survived the delete"
    );
}
