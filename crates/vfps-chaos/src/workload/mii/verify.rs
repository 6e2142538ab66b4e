//! After settling, every erasure and a sample of the live subjects asked of
//! every replica on every path that can answer a mapping: gRPC Get, REST
//! `GET …/pseudonyms/{pseudonym}` and FHIR `$de-pseudonymize` by the
//! pseudonym, then (once every lookup is done, since it writes) a gRPC
//! Create of the original. Before any of that, the fresh originals of the
//! transaction Bundles are looked up (`$get-pseudonym`, which writes
//! nothing): whether each transaction was applied whole or not at all.
//! What each answered goes to `erasures-verify.json` and `checker::erasure`
//! judges it.

use std::time::Duration;

use futures::StreamExt;
use tonic::Code;
use vfps_client::Outcome;

use super::{
    ask::{from_reply, http, Replica},
    fhir,
};
use crate::history::{
    erasures::{ErasureHistory, Meaning, Transaction},
    verified::{Observed, ReplicaSeen, Seen, SubjectSeen, TransactionSeen},
};

/// Live subjects asked of every replica at most.
const LIVE_SAMPLE: usize = 500;
/// Fresh originals of transactions looked up at most (the transactions not
/// acknowledged first: they are the ones a half-applied write hides in).
const TRANSACTION_ORIGINALS: usize = 10_000;

/// The transactions to look at, within [`TRANSACTION_ORIGINALS`]: every one
/// not acknowledged or meant to fail first, then acknowledged ones.
pub fn transactions_to_verify(history: &ErasureHistory) -> Vec<usize> {
    let doubtful =
        |t: &Transaction| t.meaning != Meaning::Acknowledged || t.meant_to_fail.is_some();
    let (first, then): (Vec<_>, Vec<_>) = history
        .transactions
        .iter()
        .enumerate()
        .partition(|(_, t)| doubtful(t));
    let mut left = TRANSACTION_ORIGINALS;
    let mut chosen = Vec::new();
    for (i, t) in first.into_iter().chain(then) {
        if t.new.len() > left {
            continue;
        }
        left -= t.new.len();
        chosen.push(i);
    }
    chosen
}

fn from_outcome<T>(o: Outcome<T>, value: impl FnOnce(T) -> String) -> Seen {
    match o {
        Outcome::Ok(v) => Seen::Value(value(v)),
        Outcome::Fail(Code::NotFound) => Seen::NotFound,
        other => Seen::Error(format!("{:?}", other.code())),
    }
}

struct Asker<'a> {
    http: reqwest::Client,
    bearer: Option<&'a str>,
    namespace: &'a str,
    deadline: Duration,
}

impl Asker<'_> {
    async fn lookups(&self, r: &Replica, pseudonym: &str) -> (Seen, Seen, Seen) {
        let grpc = from_outcome(
            r.grpc.get(self.namespace, pseudonym, self.deadline).await,
            |p| p.original_value.unwrap_or_default(),
        );
        let rest = from_reply(
            http(
                &self.http,
                self.bearer,
                &format!(
                    "{}/v1/namespaces/{}/pseudonyms/{pseudonym}",
                    r.http, self.namespace
                ),
                None,
            )
            .await,
            |b| b["pseudonym"]["originalValue"].as_str().map(str::to_owned),
        );
        let body = fhir::parameters(&[("context", self.namespace), ("pseudonym", pseudonym)]);
        let fhir = from_reply(
            http(
                &self.http,
                self.bearer,
                &format!("{}/v1/fhir/$de-pseudonymize", r.http),
                Some(&body),
            )
            .await,
            |b| fhir::original_of(b).map(str::to_owned),
        );
        (grpc, rest, fhir)
    }

    /// `$get-pseudonym` of `original`: its stored pseudonym, or not found.
    async fn stored(&self, r: &Replica, original: &str) -> Seen {
        let body = fhir::parameters(&[("context", self.namespace), ("original", original)]);
        from_reply(
            http(
                &self.http,
                self.bearer,
                &format!("{}/v1/fhir/$get-pseudonym", r.http),
                Some(&body),
            )
            .await,
            |b| fhir::value_of(b, "pseudonym").map(str::to_owned),
        )
    }

    /// The chosen transactions' fresh originals, each transaction on one
    /// replica in turn: all-or-nothing is about what the database holds,
    /// which every replica reads alike (P8 asks each replica for its caches).
    async fn transactions(
        &self,
        replicas: &[Replica],
        history: &ErasureHistory,
        concurrency: usize,
    ) -> Vec<TransactionSeen> {
        let chosen = transactions_to_verify(history);
        let asks: Vec<(usize, usize, &str)> = chosen
            .iter()
            .enumerate()
            .flat_map(|(turn, &index)| {
                history.transactions[index]
                    .new
                    .iter()
                    .map(move |n| (index, turn, n.original.as_str()))
            })
            .collect();
        let seen: Vec<Seen> = futures::stream::iter(asks.iter())
            .map(|(_, turn, original)| async move {
                match replicas.get(turn % replicas.len().max(1)) {
                    Some(r) => self.stored(r, original).await,
                    None => Seen::Error("no replica".into()),
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
        let mut out: Vec<TransactionSeen> = chosen
            .iter()
            .map(|&index| TransactionSeen {
                index,
                new: Vec::new(),
            })
            .collect();
        for ((_, turn, _), s) in asks.iter().zip(seen) {
            if let Some(t) = out.get_mut(*turn) {
                t.new.push(s);
            }
        }
        out
    }

    async fn recreate(&self, r: &Replica, original: &str) -> Seen {
        from_outcome(
            r.grpc.create(self.namespace, original, self.deadline).await,
            |p| p.pseudonym_value,
        )
    }

    /// Every pair through every replica: lookups first, everywhere, then
    /// the Creates.
    async fn observe(
        &self,
        replicas: &[Replica],
        pairs: &[(String, String)],
        concurrency: usize,
    ) -> Vec<SubjectSeen> {
        let looked: Vec<Vec<(Seen, Seen, Seen)>> = futures::stream::iter(pairs.iter())
            .map(|(_, p)| async move {
                let mut each = Vec::with_capacity(replicas.len());
                for r in replicas {
                    each.push(self.lookups(r, p).await);
                }
                each
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
        let created: Vec<Vec<Seen>> = futures::stream::iter(pairs.iter())
            .map(|(o, _)| async move {
                let mut each = Vec::with_capacity(replicas.len());
                for r in replicas {
                    each.push(self.recreate(r, o).await);
                }
                each
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
        pairs
            .iter()
            .zip(looked.into_iter().zip(created))
            .map(|((o, p), (looked, created))| SubjectSeen {
                original: o.clone(),
                pseudonym: p.clone(),
                replicas: looked
                    .into_iter()
                    .zip(created)
                    .map(
                        |((grpc_get, rest_get, fhir_de_pseudonymize), recreated)| ReplicaSeen {
                            grpc_get,
                            rest_get,
                            fhir_de_pseudonymize,
                            recreated,
                        },
                    )
                    .collect(),
            })
            .collect()
    }
}

/// Asks every replica about every erasure and a sample of live subjects.
pub async fn observe(
    replicas: &[Replica],
    bearer: Option<&str>,
    history: &ErasureHistory,
    concurrency: usize,
    deadline: Duration,
) -> anyhow::Result<Observed> {
    let asker = Asker {
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()?,
        bearer,
        namespace: &history.namespace,
        deadline,
    };
    let erased: Vec<(String, String)> = history
        .erasures
        .iter()
        .map(|e| (e.original.clone(), e.pseudonym.clone()))
        .collect();
    let live = crate::history::erasures::live_subjects(history, LIVE_SAMPLE);
    // Before the Creates below, which would store an original.
    let transactions = asker.transactions(replicas, history, concurrency).await;
    let erasures = asker.observe(replicas, &erased, concurrency).await;
    let live = asker.observe(replicas, &live, concurrency).await;
    let multi = match &history.multi {
        Some(m) => {
            Some(super::multi_verify::observe(replicas, &asker.http, bearer, m, concurrency).await)
        }
        None => None,
    };
    Ok(Observed {
        erasures,
        live,
        transactions,
        multi,
    })
}
