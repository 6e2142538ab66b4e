//! P10's checks fed what vfps does now (random, unordered) and what the
//! revealing layout does (a host tag and a clock, orders that follow the
//! originals, siblings made together): the first passes, each leak fails.

use rand::{rngs::StdRng, Rng, SeedableRng};

use super::*;
use crate::history::Entry;

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn random(rng: &mut StdRng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The revealing layout: a host tag, then a character that follows the
/// clock (`tick`), then random.
fn revealing(rng: &mut StdRng, host: &str, tick: usize) -> String {
    format!(
        "{host}{}{}",
        char::from(ALPHABET[tick % ALPHABET.len()]),
        random(rng, 20)
    )
}

fn ledger(pseudonyms: impl Iterator<Item = String>) -> Vec<Entry> {
    pseudonyms
        .enumerate()
        .map(|(i, p)| Entry {
            slot: i as u64,
            second: i as u64 / 10,
            status: Status::Ok,
            original: format!("o{i}"),
            pseudonym: Some(p),
            code: None,
            acked_unix_ms: Some(1_000_000 + i as u64),
        })
        .collect()
}

fn probe(rng: &mut StdRng, make: &mut dyn FnMut(&mut StdRng, Round, usize) -> String) -> Observed {
    let mut made = Vec::new();
    for round in [Round::Early, Round::Late] {
        for replica in 0..3 {
            made.push(Made {
                method: "base64url".into(),
                round,
                replica,
                pseudonyms: (0..400).map(|_| make(rng, round, replica)).collect(),
            });
        }
    }
    Observed {
        methods: vec!["base64url".into()],
        made,
        ..Default::default()
    }
}

#[test]
fn random_pseudonyms_pass_the_time_and_replica_tests() {
    let mut rng = StdRng::seed_from_u64(1);
    let entries = ledger((0..2000).map(|_| random(&mut rng, 24)));
    let observed = probe(&mut rng, &mut |rng, _, _| random(rng, 24));
    let v = time_and_replica(&entries, Some(&observed));
    assert_eq!(v.validity, Validity::Valid, "{v:?}");
    assert!(v.summary.contains("position tests"), "{}", v.summary);
}

#[test]
fn a_clock_in_the_pseudonym_fails_the_time_test() {
    let mut rng = StdRng::seed_from_u64(2);
    // The revealing layout's clock character: one value for the first
    // 65 seconds of ticks, the next after.
    let entries = ledger((0..2000).map(|i| revealing(&mut rng, "tag", i / 1000)));
    let v = time_and_replica(&entries, None);
    assert_eq!(v.validity, Validity::Invalid, "{v:?}");
    assert!(
        v.evidence[0].contains("the ledger, acknowledged early vs late: position 3"),
        "{:?}",
        v.evidence
    );
    // The probe's rounds tell it too.
    let observed = probe(&mut rng, &mut |rng, round, _| {
        revealing(rng, "tag", round as usize)
    });
    let v = time_and_replica(&[], Some(&observed));
    assert_eq!(v.validity, Validity::Invalid, "{v:?}");
    assert!(
        v.evidence[0].contains("early vs late round"),
        "{:?}",
        v.evidence
    );
}

#[test]
fn a_host_tag_fails_the_replica_test() {
    let mut rng = StdRng::seed_from_u64(3);
    let hosts = ["Abc", "Xyz", "Qrs"];
    let observed = probe(&mut rng, &mut |rng, _, replica| {
        format!("{}{}", hosts[replica], random(rng, 20))
    });
    let v = time_and_replica(&[], Some(&observed));
    assert_eq!(v.validity, Validity::Invalid, "{v:?}");
    assert!(
        v.evidence.iter().all(|e| e.contains("replica vs replica")),
        "{:?}",
        v.evidence
    );
    // Positions 0-2, nothing else.
    assert_eq!(v.evidence.len(), 3, "{:?}", v.evidence);
}

#[test]
fn without_the_probe_the_ledger_alone_is_judged() {
    let mut rng = StdRng::seed_from_u64(8);
    assert!(check(&ledger((0..100).map(|_| random(&mut rng, 24))), None).is_empty());
    let v = check(&ledger((0..1000).map(|_| random(&mut rng, 24))), None);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].validity, Validity::Valid, "{v:?}");
    let leaky = check(
        &ledger((0..1000).map(|i| revealing(&mut rng, "tag", i / 500))),
        None,
    );
    assert_eq!(leaky[0].validity, Validity::Invalid);
}

#[test]
fn a_method_the_probe_missed_is_undecided() {
    let mut rng = StdRng::seed_from_u64(4);
    let mut observed = probe(&mut rng, &mut |rng, _, _| random(rng, 24));
    observed.methods.push("uuid4".into());
    let v = time_and_replica(&[], Some(&observed));
    assert_eq!(v.validity, Validity::Unknown, "{v:?}");
    assert!(v.evidence.iter().any(|e| e.contains("uuid4")));
    let nothing = time_and_replica(&[], None);
    assert_eq!(nothing.validity, Validity::Unknown);
}

fn order_sample(kind: OrderKind, n: u64, ordered: bool, rng: &mut StdRng) -> Order {
    let pairs: Vec<(u64, String)> = (0..n)
        .map(|i| {
            let p = if ordered {
                format!("{i:06}{}", random(rng, 8))
            } else {
                random(rng, 16)
            };
            (i, p)
        })
        .collect();
    Order::of(kind, format!("{kind:?} sample"), pairs)
}

fn orders(rng: &mut StdRng, ordered: Option<OrderKind>) -> Observed {
    let mut samples = Vec::new();
    for kind in [OrderKind::Job, OrderKind::Bundle, OrderKind::ListPage] {
        for n in [1, 5, 25, 100, 300] {
            samples.push(order_sample(kind, n, ordered == Some(kind) && n == 25, rng));
        }
    }
    Observed {
        orders: samples,
        ..Default::default()
    }
}

#[test]
fn unordered_samples_pass_and_each_ordered_kind_fails() {
    let mut rng = StdRng::seed_from_u64(5);
    let v = order(Some(&orders(&mut rng, None)));
    assert_eq!(v.validity, Validity::Valid, "{v:?}");
    for kind in [OrderKind::Job, OrderKind::Bundle, OrderKind::ListPage] {
        let v = order(Some(&orders(&mut rng, Some(kind))));
        assert_eq!(v.validity, Validity::Invalid, "{kind:?}: {v:?}");
        assert_eq!(v.evidence.len(), 1, "{:?}", v.evidence);
        assert!(
            v.evidence[0].contains("tau 1.000 over 25"),
            "{:?}",
            v.evidence
        );
    }
    // A listing in reverse (newest first of originals made in order) too.
    let mut reversed = orders(&mut rng, None);
    reversed.orders.push(Order::of(
        OrderKind::ListPage,
        "newest first".into(),
        (0..25u64).map(|i| (i, 25 - i)).collect(),
    ));
    assert_eq!(order(Some(&reversed)).validity, Validity::Invalid);
}

#[test]
fn without_bundles_or_list_pages_order_is_undecided() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut observed = orders(&mut rng, None);
    observed.orders.retain(|o| o.kind == OrderKind::Job);
    assert_eq!(order(Some(&observed)).validity, Validity::Unknown);
    assert_eq!(order(None).validity, Validity::Unknown);
}

fn pairs(rng: &mut StdRng, n: usize, shared: usize, same_time: bool, t0: i64) -> Vec<PairSeen> {
    (0..n)
        .map(|i| {
            let prefix = random(rng, shared);
            let t = t0 + i as i64 * 1000;
            PairSeen {
                a: format!("{prefix}{}", random(rng, 20)),
                b: format!("{prefix}{}", random(rng, 20)),
                shown: Some((t, if same_time { t } else { t + 7 })),
            }
        })
        .collect()
}

#[test]
fn siblings_like_strangers_pass_and_shared_prefixes_or_times_fail() {
    let mut rng = StdRng::seed_from_u64(7);
    let day = 86_400_000_000i64;
    let observed = |siblings, strangers| Observed {
        siblings: Siblings {
            siblings,
            strangers,
        },
        ..Default::default()
    };
    // Both shown the day: alike.
    let same_day = |rng: &mut StdRng| {
        let mut p = pairs(rng, 200, 0, true, 0);
        for x in &mut p {
            x.shown = Some((day, day));
        }
        p
    };
    let fine = observed(same_day(&mut rng), same_day(&mut rng));
    let v = siblings(Some(&fine));
    assert_eq!(v.validity, Validity::Valid, "{v:?}");
    // Made together with a tag and a clock: ten characters in common.
    let tagged = observed(pairs(&mut rng, 200, 10, true, 0), same_day(&mut rng));
    let v = siblings(Some(&tagged));
    assert_eq!(v.validity, Validity::Invalid, "{v:?}");
    assert!(
        v.evidence[0].contains("longer prefixes"),
        "{:?}",
        v.evidence
    );
    // Shown to the microsecond: siblings alike, strangers apart.
    let timed = observed(
        pairs(&mut rng, 200, 0, true, 0),
        pairs(&mut rng, 200, 0, false, 0),
    );
    let v = siblings(Some(&timed));
    assert_eq!(v.validity, Validity::Invalid, "{v:?}");
    assert!(v.evidence[0].contains("same time"), "{:?}", v.evidence);
    // Too few pairs: undecided.
    let few = observed(
        pairs(&mut rng, 5, 0, true, 0),
        pairs(&mut rng, 5, 0, true, 0),
    );
    assert_eq!(siblings(Some(&few)).validity, Validity::Unknown);
}

#[test]
fn common_prefixes_count_characters() {
    assert_eq!(common_prefix("abcd", "abxd"), 2);
    assert_eq!(common_prefix("äb", "äc"), 1);
    assert_eq!(common_prefix("", "a"), 0);
}
