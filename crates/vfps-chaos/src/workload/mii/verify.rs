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
use serde::{Deserialize, Serialize};
use tonic::Code;
use vfps_client::{Client, Outcome};

use super::{fhir, fhir::Reply};
use crate::history::erasures::{ErasureHistory, Meaning, Transaction};

/// What one path of one replica answered for a pseudonym, or a Create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Seen {
    /// The original the pseudonym resolves to, or the pseudonym a Create answered.
    Value(String),
    NotFound,
    /// Could not be decided (the call kept failing).
    Error(String),
}

/// Every path of one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSeen {
    pub grpc_get: Seen,
    pub rest_get: Seen,
    pub fhir_de_pseudonymize: Seen,
    /// A gRPC Create of the original.
    pub recreated: Seen,
}

impl ReplicaSeen {
    pub fn lookups(&self) -> [(&'static str, &Seen); 3] {
        [
            ("gRPC Get", &self.grpc_get),
            ("REST GET", &self.rest_get),
            ("FHIR $de-pseudonymize", &self.fhir_de_pseudonymize),
        ]
    }
}

/// One subject (erased or live) through every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectSeen {
    pub original: String,
    pub pseudonym: String,
    pub replicas: Vec<ReplicaSeen>,
}

/// What verification saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// In the order of `ErasureHistory::erasures`.
    pub erasures: Vec<SubjectSeen>,
    /// Live subjects (acknowledged, never erased), a sample.
    pub live: Vec<SubjectSeen>,
    /// Transactions' fresh originals as found (older runs have none).
    #[serde(default)]
    pub transactions: Vec<TransactionSeen>,
    /// The multi-pseudonym namespace as found (runs before it have none).
    #[serde(default)]
    pub multi: Option<super::multi_verify::MultiSeen>,
}

/// What one transaction's fresh originals are found to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionSeen {
    /// Its index in `ErasureHistory::transactions`.
    pub index: usize,
    /// `$get-pseudonym` of each, in the order of `Transaction::new`: the
    /// pseudonym stored for it, or not found.
    pub new: Vec<Seen>,
}

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

/// One replica's ways in.
pub struct Replica {
    pub grpc: Client,
    /// `http://host:port`, the replica's HTTP address.
    pub http: String,
}

fn from_outcome<T>(o: Outcome<T>, value: impl FnOnce(T) -> String) -> Seen {
    match o {
        Outcome::Ok(v) => Seen::Value(value(v)),
        Outcome::Fail(Code::NotFound) => Seen::NotFound,
        other => Seen::Error(format!("{:?}", other.code())),
    }
}

/// An HTTP GET or POST tried a few times while it is not answered or
/// answered 503 (the verification's own retries).
pub(super) async fn http(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
    body: Option<&serde_json::Value>,
) -> Reply {
    let mut last = Reply::NotSent("not tried".into());
    for attempt in 0..6u32 {
        last = match body {
            Some(b) => fhir::post(http, url, bearer, b, Duration::from_secs(20)).await,
            None => {
                let mut r = http.get(url).timeout(Duration::from_secs(20));
                if let Some(a) = bearer {
                    r = r.header("authorization", a);
                }
                match r.send().await {
                    Ok(resp) => {
                        let s = resp.status().as_u16();
                        Reply::Status(s, resp.json().await.unwrap_or_default())
                    }
                    Err(e) => Reply::Lost(if e.is_timeout() { "timeout" } else { "error" }.into()),
                }
            }
        };
        match &last {
            Reply::Status(s, _) if *s != 503 => return last,
            _ => tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt + 1))).await,
        }
    }
    last
}

pub(super) fn from_reply(
    reply: Reply,
    value: impl FnOnce(&serde_json::Value) -> Option<String>,
) -> Seen {
    match reply {
        Reply::Status(200 | 201, body) => match value(&body) {
            Some(v) => Seen::Value(v),
            None => Seen::Error("200 without a value".into()),
        },
        Reply::Status(404, _) => Seen::NotFound,
        Reply::Status(s, _) => Seen::Error(format!("HTTP {s}")),
        Reply::Lost(why) | Reply::NotSent(why) => Seen::Error(why),
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
    let live = crate::checker::erasure::live_subjects(history, LIVE_SAMPLE);
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
