//! Multi-pseudonym namespaces: many pseudonyms per original, in a table of
//! their own, read and erased with the single-pseudonym ones.

use vfps_store::erasure::Erasure;

use super::*;

fn multi_namespace(name: &str) -> Namespace {
    let mut ns = namespace(name, 8);
    ns.settings = ns.settings.with_multi(true).unwrap();
    ns
}

fn values(rows: &[vfps_core::Pseudonym]) -> Vec<&str> {
    rows.iter().map(|p| p.pseudonym_value.as_str()).collect()
}

fn strings(raw: &[&str]) -> Vec<String> {
    raw.iter().map(|s| (*s).to_owned()).collect()
}

/// Pseudonyms are added to an original, each unique in its namespace; only
/// a live multi-pseudonym incarnation takes them, and the single-pseudonym
/// paths take none for it.
async fn an_original_gets_many_pseudonyms_each_unique(store: Arc<dyn Store>) {
    let m = multi_namespace("m");
    store.create_namespace(&m).await.unwrap();
    store.create_namespace(&namespace("s", 8)).await.unwrap();
    let read = store.get_namespace(&m.name).await.unwrap().unwrap();
    assert!(read.settings.multi, "the setting is stored");
    assert!(
        !store
            .get_namespace(&NamespaceName::parse("s").unwrap())
            .await
            .unwrap()
            .unwrap()
            .settings
            .multi
    );
    let a = OriginalValue::parse("a").unwrap();
    let t = now_micros();
    let added = store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &a,
            &strings(&["p-3", "p-1", "p-2"]),
            &[],
            t,
        )
        .await
        .unwrap();
    assert_eq!(values(&added), ["p-3", "p-1", "p-2"], "in input order");
    assert!(added.iter().all(|p| p.original_value == "a"));
    // A taken pseudonym (by this original or another) and a repeated one are
    // skipped.
    let b = OriginalValue::parse("b").unwrap();
    let added = store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &b,
            &strings(&["p-1", "p-4", "p-4"]),
            &[],
            now_micros(),
        )
        .await
        .unwrap();
    assert_eq!(values(&added), ["p-4"]);
    // Another incarnation, a single-pseudonym namespace, a missing one: none.
    for (name, uid) in [
        (&m.name, NamespaceUid(999)),
        (&NamespaceName::parse("s").unwrap(), uid_of("s")),
        (&NamespaceName::parse("gone").unwrap(), uid_of("gone")),
    ] {
        let added = store
            .add_pseudonyms(name, uid.into(), &a, &strings(&["p-9"]), &[], now_micros())
            .await
            .unwrap();
        assert!(added.is_empty(), "{name} took a multi pseudonym");
    }
    // The single-pseudonym writes skip a multi-pseudonym namespace.
    let upserted = store
        .upsert_pseudonyms(&[candidate("m", "c", "p-9")])
        .await
        .unwrap();
    assert!(matches!(upserted[0], Upserted::Conflict));
    assert!(!store
        .insert_new_pseudonyms(&[candidate("m", "c", "p-9")])
        .await
        .unwrap());
    assert!(!store
        .insert_together(&[candidate("m", "c", "p-9")])
        .await
        .unwrap());

    let of_a = store.pseudonyms_of(&m.name, &a, 10).await.unwrap();
    assert_eq!(
        values(&of_a),
        ["p-1", "p-2", "p-3"],
        "oldest first, then by pseudonym"
    );
    let first_two = store.pseudonyms_of(&m.name, &a, 2).await.unwrap();
    assert_eq!(values(&first_two), ["p-1", "p-2"], "at most the limit");
    assert!(store
        .pseudonyms_of(&m.name, &OriginalValue::parse("c").unwrap(), 10)
        .await
        .unwrap()
        .is_empty());
    // Reverse lookups find both kinds, one by one and batched.
    let got = store
        .get_pseudonym(&m.name, &pv("p-2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.original_value, "a");
    store
        .upsert_pseudonyms(&[candidate("s", "x", "p-1")])
        .await
        .unwrap();
    let lookups: Vec<Lookup> = [("m", "p-4"), ("s", "p-1"), ("m", "p-1"), ("m", "p-9")]
        .iter()
        .map(|(n, p)| Lookup {
            namespace: NamespaceName::parse(n).unwrap(),
            pseudonym_value: pv(p),
        })
        .collect();
    let found: Vec<Option<String>> = store
        .get_pseudonyms(&lookups)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.map(|p| p.original_value))
        .collect();
    assert_eq!(
        found,
        [Some("b".into()), Some("x".into()), Some("a".into()), None]
    );
    let counts = store.count_pseudonyms().await.unwrap();
    assert_eq!(counts, vec![("m".to_owned(), 4), ("s".to_owned(), 1)]);
}

/// List pages over many pseudonyms of one original, many sharing a time,
/// without gaps or repeats, by pseudonym descending; the token's pseudonym is
/// the position.
async fn multi_pseudonyms_page_by_pseudonym_without_gaps(store: Arc<dyn Store>) {
    let m = multi_namespace("m");
    store.create_namespace(&m).await.unwrap();
    let a = OriginalValue::parse("a").unwrap();
    let t = now_micros();
    for step in 0..5u64 {
        let batch: Vec<String> = (0..7).map(|i| format!("p-{step}{i}")).collect();
        store
            .add_pseudonyms(
                &m.name,
                m.uid.into(),
                &a,
                &batch,
                &[],
                t + Duration::from_micros(step),
            )
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<PageCursor> = None;
    loop {
        let page = store
            .list_multi_pseudonyms(&m.name, 4, cursor.as_ref(), true)
            .await
            .unwrap();
        assert_eq!(page.total_size, Some(35));
        assert!(page.items.len() <= 4);
        seen.extend(page.items.iter().map(|p| p.pseudonym_value.clone()));
        match page.next {
            Some(next) => cursor = Some(PageCursor::decode(&next.encode()).unwrap()),
            None => break,
        }
    }
    let mut expected = seen.clone();
    expected.sort_by(|a, b| b.cmp(a));
    expected.dedup();
    assert_eq!(seen, expected, "ordered by pseudonym desc, once each");
    assert_eq!(seen.len(), 35);
    // The single-pseudonym listing has none of them.
    let single = store
        .list_pseudonyms(&m.name, 10, None, true)
        .await
        .unwrap();
    assert_eq!(single.total_size, Some(0));
}

/// An erasure takes every pseudonym of the original: deleted, or
/// anonymized and kept reserved; deleting the namespace takes the rest.
async fn erasing_a_multi_original_takes_all_its_pseudonyms(store: Arc<dyn Store>) {
    let m = multi_namespace("m");
    store.create_namespace(&m).await.unwrap();
    let o = |raw: &str| OriginalValue::parse(raw).unwrap();
    let t = now_micros();
    for (original, pseudonyms) in [
        ("anonymized", ["p-1", "p-2", "p-3"]),
        ("deleted", ["p-4", "p-5", "p-6"]),
        ("kept", ["p-7", "p-8", "p-9"]),
    ] {
        store
            .add_pseudonyms(
                &m.name,
                m.uid.into(),
                &o(original),
                &strings(&pseudonyms),
                &[],
                t,
            )
            .await
            .unwrap();
    }
    let read_before = std::time::Instant::now();
    let erased = store
        .erase(&m.name, &o("anonymized"), Erasure::Anonymize)
        .await
        .unwrap();
    assert!(erased.is_some());
    assert!(!store.coherence().fresh("m", read_before));
    for p in ["p-1", "p-2", "p-3"] {
        assert_eq!(store.get_pseudonym(&m.name, &pv(p)).await.unwrap(), None);
    }
    assert!(store
        .pseudonyms_of(&m.name, &o("anonymized"), 10)
        .await
        .unwrap()
        .is_empty());
    // Reserved: never issued again, to anyone.
    let again = store
        .add_pseudonyms(
            &m.name,
            m.uid.into(),
            &o("other"),
            &strings(&["p-1", "p-2"]),
            &[],
            t,
        )
        .await
        .unwrap();
    assert!(again.is_empty(), "an anonymized pseudonym was issued again");
    // Still listed (without any original at the API), each unlinked from the
    // others: no two share a stored original.
    let page = store
        .list_multi_pseudonyms(&m.name, 100, None, true)
        .await
        .unwrap();
    assert_eq!(page.total_size, Some(9));
    let mut markers: Vec<&str> = page
        .items
        .iter()
        .filter(|p| vfps_core::is_anonymized(&p.original_value))
        .map(|p| p.original_value.as_str())
        .collect();
    assert_eq!(markers.len(), 3);
    markers.sort();
    markers.dedup();
    assert_eq!(markers.len(), 3, "anonymized pseudonyms stay linked");

    let erased = store
        .erase(&m.name, &o("deleted"), Erasure::Delete)
        .await
        .unwrap();
    assert!(erased.is_some());
    for p in ["p-4", "p-5", "p-6"] {
        assert_eq!(store.get_pseudonym(&m.name, &pv(p)).await.unwrap(), None);
    }
    assert_eq!(
        store
            .erase(&m.name, &o("deleted"), Erasure::Delete)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        values(&store.pseudonyms_of(&m.name, &o("kept"), 10).await.unwrap()),
        ["p-7", "p-8", "p-9"]
    );
    assert_eq!(
        store.count_pseudonyms().await.unwrap(),
        vec![("m".to_owned(), 6)]
    );

    assert!(store.delete_namespace(&m.name, Some(m.uid)).await.unwrap());
    let fresh = NamespaceUid(77);
    store
        .create_namespace(&Namespace {
            uid: fresh,
            ..multi_namespace("m")
        })
        .await
        .unwrap();
    assert_eq!(
        store.get_pseudonym(&m.name, &pv("p-7")).await.unwrap(),
        None
    );
    assert!(store
        .pseudonyms_of(&m.name, &o("kept"), 10)
        .await
        .unwrap()
        .is_empty());
    let page = store
        .list_multi_pseudonyms(&m.name, 10, None, true)
        .await
        .unwrap();
    assert_eq!(page.total_size, Some(0));
    // The pseudonyms of the deleted incarnation are free in the new one.
    let added = store
        .add_pseudonyms(
            &m.name,
            fresh.into(),
            &o("kept"),
            &strings(&["p-1", "p-7"]),
            &[],
            t,
        )
        .await
        .unwrap();
    assert_eq!(values(&added), ["p-1", "p-7"]);
}

contract!(
    an_original_gets_many_pseudonyms_each_unique,
    multi_pseudonyms_page_by_pseudonym_without_gaps,
    erasing_a_multi_original_takes_all_its_pseudonyms,
);
