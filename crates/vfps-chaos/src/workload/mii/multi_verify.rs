//! After settling (and before anything writes in the multi-pseudonym
//! namespace), a bounded set of multi originals asked of every replica:
//! `$de-pseudonymize` of each of its acknowledged pseudonyms, and
//! `$pseudonymize-multiple` with `count` 0 (which writes nothing). Erased
//! originals first (P8), then live ones, within [`MAX_LOOKUPS`] calls.
//! What each answered goes to `erasures-verify.json` (`Observed::multi`)
//! and `checker::multi` judges it.

use futures::StreamExt;

use super::{
    ask::{from_reply, http, Replica},
    fhir,
    multi::found_of,
};
use crate::history::{
    multi::MultiHistory,
    verified::{MultiReplicaSeen, MultiSeen, OriginalSeen},
};

/// Verification calls at most (each pseudonym and each `count` 0 on each
/// replica is one).
pub const MAX_LOOKUPS: usize = 3_000;

/// The originals to ask `replicas` replicas about, with their acknowledged
/// pseudonyms: every erased one (any answer) first, then live ones, while
/// their calls fit in [`MAX_LOOKUPS`].
pub fn to_verify(h: &MultiHistory, replicas: usize) -> Vec<(String, Vec<String>)> {
    let acked = h.acknowledged();
    let erased: std::collections::BTreeSet<&str> =
        h.erasures.iter().map(|e| e.original.as_str()).collect();
    let (first, then): (Vec<_>, Vec<_>) = acked.iter().partition(|(o, _)| erased.contains(*o));
    let mut left = MAX_LOOKUPS;
    let mut chosen = Vec::new();
    for (o, ps) in first.into_iter().chain(then) {
        let cost = replicas.max(1) * (ps.len() + 1);
        if cost > left {
            continue;
        }
        left -= cost;
        chosen.push((
            (*o).to_owned(),
            ps.iter().map(|p| (*p).to_owned()).collect(),
        ));
    }
    chosen
}

/// Asks every replica about the originals [`to_verify`] chooses.
pub async fn observe(
    replicas: &[Replica],
    client: &reqwest::Client,
    bearer: Option<&str>,
    h: &MultiHistory,
    concurrency: usize,
) -> MultiSeen {
    let chosen = to_verify(h, replicas.len());
    let namespace = h.namespace.as_str();
    let originals = futures::stream::iter(chosen)
        .map(|(original, pseudonyms)| async move {
            let mut each = Vec::with_capacity(replicas.len());
            for r in replicas {
                let mut resolved = Vec::with_capacity(pseudonyms.len());
                for p in &pseudonyms {
                    let body = fhir::parameters(&[("context", namespace), ("pseudonym", p)]);
                    let url = format!("{}/v1/fhir/$de-pseudonymize", r.http);
                    resolved.push(from_reply(
                        http(client, bearer, &url, Some(&body)).await,
                        |b| fhir::original_of(b).map(str::to_owned),
                    ));
                }
                let mut body = fhir::parameters(&[("context", namespace), ("original", &original)]);
                if let Some(p) = body["parameter"].as_array_mut() {
                    p.push(serde_json::json!({"name": "count", "valueInteger": 0}));
                }
                let url = format!("{}/v1/fhir/$pseudonymize-multiple", r.http);
                let all = found_of(&http(client, bearer, &url, Some(&body)).await);
                each.push(MultiReplicaSeen { resolved, all });
            }
            OriginalSeen {
                original,
                pseudonyms,
                replicas: each,
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await;
    MultiSeen { originals }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{
        erasures::{ErasureKind, Meaning},
        multi::{MultiCreate, MultiErasure},
    };

    fn create(original: &str, n: usize) -> MultiCreate {
        MultiCreate {
            second: 1,
            sent_micros: 1,
            answered_micros: 2,
            original: original.into(),
            count: n as u32,
            meaning: Meaning::Acknowledged,
            answer: "201".into(),
            pseudonyms: (0..n).map(|i| format!("{original}-p{i}")).collect(),
        }
    }

    #[test]
    fn verification_asks_erased_originals_first_and_stays_within_its_bound() {
        let mut h = MultiHistory::new("ns-multi");
        for i in 0..2_000 {
            h.created(create(&format!("o{i:04}"), 5));
        }
        h.erased(MultiErasure {
            second: 2,
            kind: ErasureKind::Delete,
            original: "o1999".into(),
            sent_micros: 3,
            answered_micros: 4,
            meaning: Meaning::Acknowledged,
            answer: "200".into(),
        });
        let chosen = to_verify(&h, 3);
        assert_eq!(chosen[0].0, "o1999");
        assert_eq!(chosen[0].1.len(), 5);
        let calls: usize = chosen.iter().map(|(_, p)| 3 * (p.len() + 1)).sum();
        assert!(calls <= MAX_LOOKUPS, "{calls}");
        assert_eq!(chosen.len(), MAX_LOOKUPS / 18);
    }
}
