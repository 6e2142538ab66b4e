//! Erasures checked against every replica's pseudonym cache, during the load
//! and in every scenario: a stale cache answers an erased mapping only on the
//! replica that holds it and only until it is told, so verification after
//! the run (a failover drops every cache) and the load's round robin (one
//! replica in three, by chance) rarely see it. For a share of the erasures
//! the load therefore asks every replica on its own address for the
//! original's pseudonym first — a `$pseudonymize`, which fills that
//! replica's cache — erases it through one replica, and once the erasure is
//! acknowledged asks every replica again: for a delete a `$pseudonymize` of
//! the original, for an anonymize also a `$de-pseudonymize` of the old
//! pseudonym. Every answer goes to [`CacheCheck`] with its replica and times;
//! `checker::cache_check` judges them (P8).

use std::time::{Duration, Instant};

use futures::future::join_all;
use vfps_client::Until;

use super::{fhir, fhir::Reply, Mii};
use crate::history::erasures::{
    now_micros, CacheCheck, Erasure, ErasureKind, Heard, Meaning, Path, ReplicaAnswer,
};

/// One erasure in this many is checked (by its turn), at most [`MAX_CHECKS`]
/// a run: each costs two to three calls per replica.
const EVERY: usize = 5;
/// The turn within [`EVERY`] that is checked: the second erasure of a run is
/// the first checked, so a short baseline has its share.
const TURN: usize = 2;
const MAX_CHECKS: usize = 400;
/// How long one replica is given to fill its cache (out of the erasure's
/// own deadline) and to answer again after the acknowledgement.
const WARM_TIMEOUT: Duration = Duration::from_secs(2);
const RECHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether an erasure of turn `turn` is checked, given `done` checks so far.
pub(super) fn due(turn: usize, done: usize) -> bool {
    turn % EVERY == TURN && done < MAX_CHECKS
}

/// What a replica's answer says for `path`.
fn heard(reply: Reply, path: Path) -> Heard {
    match reply {
        Reply::Status(200 | 201, body) => {
            let value = match path {
                Path::DePseudonymize => fhir::original_of(&body),
                _ => fhir::value_of(&body, "pseudonym"),
            };
            match value {
                Some(v) => Heard::Value(v.to_owned()),
                None => Heard::Failed("200 without a value".into()),
            }
        }
        Reply::Status(404, _) => Heard::NotFound,
        Reply::Status(s, _) => Heard::Failed(format!("HTTP {s}")),
        Reply::Lost(why) | Reply::NotSent(why) => Heard::Failed(why),
    }
}

impl Mii {
    /// Asks replica `replica` once (no other replica stands in: the point is
    /// what this one answers).
    async fn ask_one(
        &self,
        replica: usize,
        base: &str,
        path: Path,
        (original, pseudonym): (&str, &str),
        timeout: Duration,
    ) -> ReplicaAnswer {
        let (operation, body) = match path {
            Path::DePseudonymize => (
                "$de-pseudonymize",
                fhir::parameters(&[("context", &self.namespace), ("pseudonym", pseudonym)]),
            ),
            _ => (
                "$pseudonymize",
                fhir::parameters(&[("context", &self.namespace), ("original", original)]),
            ),
        };
        let sent_micros = now_micros();
        let reply = fhir::post(
            &self.http,
            &format!("{base}/v1/fhir/{operation}"),
            self.bearer.as_deref(),
            &body,
            timeout,
        )
        .await;
        ReplicaAnswer {
            replica,
            path,
            sent_micros,
            answered_micros: now_micros(),
            heard: heard(reply, path),
        }
    }

    /// Every replica at once, each on its own address.
    async fn ask_every(
        &self,
        path: Path,
        pair: (&str, &str),
        timeout: Duration,
    ) -> Vec<ReplicaAnswer> {
        join_all(
            self.replicas
                .iter()
                .enumerate()
                .map(|(i, base)| self.ask_one(i, base, path, pair, timeout)),
        )
        .await
    }

    /// Before the erasure: every replica's cache filled with the mapping,
    /// within the erasure's deadline (what is left of it after at most
    /// [`WARM_TIMEOUT`] is the erasure's).
    pub(super) async fn warm(&self, pair: (&str, &str), until: Until) -> Vec<ReplicaAnswer> {
        let left = until
            .0
            .checked_duration_since(Instant::now().into())
            .unwrap_or_default();
        let timeout = WARM_TIMEOUT.min(left / 2);
        if timeout.is_zero() {
            return Vec::new();
        }
        self.ask_every(Path::Pseudonymize, pair, timeout).await
    }

    /// After the erasure: if acknowledged, every replica asked on every path
    /// that could answer the erased mapping (lookups before the Create, which
    /// stores a new mapping); recorded either way.
    pub(super) async fn recheck(&self, erasure: &Erasure, before: Vec<ReplicaAnswer>) {
        let pair = (erasure.original.as_str(), erasure.pseudonym.as_str());
        let mut after = Vec::new();
        if erasure.meaning == Meaning::Acknowledged {
            if erasure.kind == ErasureKind::Anonymize {
                after.extend(
                    self.ask_every(Path::DePseudonymize, pair, RECHECK_TIMEOUT)
                        .await,
                );
            }
            after.extend(
                self.ask_every(Path::Pseudonymize, pair, RECHECK_TIMEOUT)
                    .await,
            );
        }
        self.log.cache_check(CacheCheck {
            second: erasure.second,
            kind: erasure.kind,
            original: erasure.original.clone(),
            pseudonym: erasure.pseudonym.clone(),
            meaning: erasure.meaning,
            answered_micros: erasure.answered_micros,
            before,
            after,
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_erasure_in_five_is_checked_the_second_first_and_at_most_the_bound() {
        let checked: Vec<usize> = (1..=20).filter(|&t| due(t, 0)).collect();
        assert_eq!(checked, vec![2, 7, 12, 17]);
        assert!(!due(2, MAX_CHECKS));
    }

    #[test]
    fn each_answer_is_read_for_its_path() {
        let pseudonymized = json!({"resourceType": "Parameters", "parameter": [
            {"name": "pseudonym", "valueIdentifier": {"value": "p1"}}]});
        assert_eq!(
            heard(Reply::Status(200, pseudonymized), Path::Pseudonymize),
            Heard::Value("p1".into())
        );
        let resolved = json!({"resourceType": "Parameters", "parameter": [
            {"name": "original", "part": [
                {"name": "value", "valueIdentifier": {"value": "o1"}}]}]});
        assert_eq!(
            heard(Reply::Status(200, resolved), Path::DePseudonymize),
            Heard::Value("o1".into())
        );
        assert_eq!(
            heard(Reply::Status(404, json!(null)), Path::DePseudonymize),
            Heard::NotFound
        );
        assert_eq!(
            heard(Reply::Status(503, json!(null)), Path::Pseudonymize),
            Heard::Failed("HTTP 503".into())
        );
        assert_eq!(
            heard(Reply::Lost("timeout".into()), Path::Pseudonymize),
            Heard::Failed("timeout".into())
        );
    }
}
