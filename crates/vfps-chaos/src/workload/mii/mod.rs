//! The MII pseudonymization interface beside gRPC and REST, on the same
//! open-model schedule: three operations of the mix, all in a namespace of
//! their own created to allow erasure (`<namespace>-erasable`,
//! `pseudonymDeletionAllowed`, random pseudonyms so that anonymizing is
//! allowed too).
//!
//! - `mii`: in turn `$pseudonymize` of a fresh original, `$get-pseudonym` and
//!   `$de-pseudonymize` of an acknowledged subject, `$pseudonymize` of an
//!   acknowledged subject again, and a look at an erased subject (its old
//!   pseudonym de-pseudonymized, or its original pseudonymized anew).
//! - `bundle`: in turn a batch and a transaction Bundle of 1–100
//!   `$pseudonymize` entries — fresh originals and acknowledged ones. In a
//!   batch about one in ten is meant to fail (an unknown context, which must
//!   be answered 404 on its own); every third transaction has one entry
//!   meant to fail it whole ([`transaction`]).
//! - `erase`: `$delete-pseudonym` and `$anonymize-original` in turn of an
//!   acknowledged subject (each subject erased at most once); every third
//!   one sent together with a `$pseudonymize` of the same original (an
//!   erasure racing a Create).
//!
//! One `mii` call in [`MULTI_EVERY`] and one erasure in
//! [`MULTI_ERASE_EVERY`] go to the multi-pseudonym namespace instead
//! (`$pseudonymize-multiple`, [`multi`]).
//!
//! Every answer is recorded in [`ErasureLog`] with what it means; the
//! checkers judge them after the run (`checker::erasure`), and verification
//! asks every replica about every erasure (`verify`).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::Value;
use vfps_client::{Client, Until};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use super::{Acked, Served};
use crate::{
    history::{
        erasures::{
            now_micros, Answered, Erasure, ErasureKind, ErasureLog, Meaning, NotFound, Path, Probe,
            Unsupported,
        },
        Broken, Calls,
    },
    operation::Operation,
};

pub mod ask;
mod batch;
mod cache_check;
pub mod fhir;
pub mod multi;
pub mod multi_verify;
mod transaction;
pub mod verify;

use fhir::Reply;

/// The HTTP port the FHIR interface is on, by default.
const HTTP_PORT: u16 = 8080;
/// Acknowledged subjects kept to read back and erase (a uniform sample).
const SUBJECTS: usize = 20_000;
/// Erased subjects kept to look at again.
const ERASED: usize = 2_000;
/// Attempts of one FHIR call at most, and the first pause after a 503.
const ATTEMPTS: u32 = 5;
const RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// Every this many Bundles, what the service does not offer yet is asked for
/// (on a batch's turn).
const UNSUPPORTED_EVERY: usize = 20;
/// One `mii` call in this many is a `$pseudonymize-multiple` (half of the
/// fresh `$pseudonymize` turns).
const MULTI_EVERY: usize = 10;
/// One erasure in this many erases a multi original, while there is one.
const MULTI_ERASE_EVERY: usize = 5;
/// The largest batch Bundle sent.
pub const MAX_BUNDLE: usize = 100;

/// The erasable namespace of a run whose namespace is `namespace`.
pub fn erasable_namespace(namespace: &str) -> String {
    format!("{namespace}-erasable")
}

/// vfps's HTTP addresses: `list` (comma-separated, `http://` added where
/// missing), else each gRPC endpoint's host on port 8080.
pub fn http_bases(client: &Client, list: Option<&str>) -> Vec<String> {
    match list {
        Some(list) => list
            .split(',')
            .map(|a| a.trim().trim_end_matches('/'))
            .filter(|a| !a.is_empty())
            .map(|a| match a.contains("://") {
                true => a.to_owned(),
                false => format!("http://{a}"),
            })
            .collect(),
        None => client
            .endpoints()
            .uris()
            .into_iter()
            .map(|u| match u.rsplit_once(':') {
                Some((host, _)) => format!("{host}:{HTTP_PORT}"),
                None => format!("{u}:{HTTP_PORT}"),
            })
            .collect(),
    }
}

/// Creates the erasable namespace and the multi-pseudonym one
/// (`ALREADY_EXISTS` is fine).
pub async fn create_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    multi::create_namespace(client, namespace).await?;
    let created = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: erasable_namespace(namespace),
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                description: "created by vfps-chaos: erasures (P8)".into(),
                pseudonym_deletion_allowed: Some(true),
                ..Default::default()
            },
            Duration::from_secs(10),
        )
        .await;
    if !created.is_ok() {
        anyhow::bail!(
            "cannot create the erasable namespace {:?}: {:?}",
            erasable_namespace(namespace),
            created.code()
        );
    }
    Ok(())
}

struct State {
    rng: StdRng,
    subjects: Acked,
    /// Subjects whose erasure was sent: (original, pseudonym).
    erased: Vec<(String, String)>,
    mii_turn: usize,
    erase_turn: usize,
    bundle_turn: usize,
    /// Round robin over the replicas' HTTP addresses.
    next_base: usize,
    /// Erasures checked against every replica's cache so far.
    cache_checks: usize,
    /// Sequential originals handed out so far ([`Mii::sequential`]).
    sequence: u64,
}

/// The MII side of the mixed workload.
pub struct Mii {
    http: reqwest::Client,
    bases: Vec<String>,
    /// Each replica's own HTTP address, for the cache checks ([`cache_check`]).
    replicas: Vec<String>,
    bearer: Option<String>,
    namespace: String,
    log: Arc<ErasureLog>,
    calls: Arc<Calls>,
    state: Mutex<State>,
    /// Marks this run's originals apart from the main namespace's.
    run: u64,
    /// `$pseudonymize-multiple` and erasures in the multi-pseudonym namespace.
    multi: multi::Multi,
}

impl Mii {
    pub fn new(
        client: &Client,
        http: Option<&str>,
        namespace: &str,
        seed: u64,
        log: Arc<ErasureLog>,
        calls: Arc<Calls>,
    ) -> anyhow::Result<Self> {
        let bases = http_bases(client, http);
        // One address for all (kind's Service): each replica on its own
        // host, as resolved now, as verification does.
        let replicas = if bases.len() == client.endpoints().uris().len() {
            bases.clone()
        } else {
            http_bases(client, None)
        };
        Ok(Self {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(1))
                .build()?,
            bases,
            replicas,
            bearer: client.bearer_header().map(str::to_owned),
            namespace: erasable_namespace(namespace),
            log: log.clone(),
            calls,
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed ^ 0x6d69_6900),
                subjects: Acked::new(SUBJECTS),
                erased: Vec::new(),
                mii_turn: 0,
                erase_turn: 0,
                bundle_turn: 0,
                next_base: 0,
                cache_checks: 0,
                sequence: 0,
            }),
            run: seed,
            multi: multi::Multi::new(namespace, seed, &log),
        })
    }

    fn fresh(&self) -> String {
        self.state
            .lock()
            .map(|mut s| {
                format!(
                    "mii-{:08x}-{:032x}",
                    self.run & 0xffff_ffff,
                    s.rng.random::<u128>()
                )
            })
            .unwrap_or_default()
    }

    /// A fresh original next in a sequence (zero-padded: in order as
    /// text too), for Bundles whose order P10 judges.
    fn sequential(&self) -> String {
        self.state
            .lock()
            .map(|mut s| {
                s.sequence += 1;
                format!("mii-{:08x}-s{:012}", self.run & 0xffff_ffff, s.sequence)
            })
            .unwrap_or_default()
    }

    fn subject(&self) -> Option<(String, String)> {
        let mut s = self.state.lock().ok()?;
        let State { rng, subjects, .. } = &mut *s;
        subjects.pick(rng)
    }

    /// A subject to erase, taken out of the sample so it is erased once.
    fn take_subject(&self) -> Option<(String, String)> {
        let mut s = self.state.lock().ok()?;
        let State {
            rng,
            subjects,
            erased,
            ..
        } = &mut *s;
        let pair = subjects.take(rng)?;
        if erased.len() < ERASED {
            erased.push(pair.clone());
        } else {
            let i = rng.random_range(0..erased.len());
            erased[i] = pair.clone();
        }
        Some(pair)
    }

    fn erased_subject(&self) -> Option<(String, String)> {
        let mut s = self.state.lock().ok()?;
        if s.erased.is_empty() {
            return None;
        }
        let n = s.erased.len();
        let i = s.rng.random_range(0..n);
        Some(s.erased[i].clone())
    }

    fn remember(&self, original: String, pseudonym: String) {
        if let Ok(mut s) = self.state.lock() {
            let State { rng, subjects, .. } = &mut *s;
            subjects.remember(rng, original, pseudonym);
        }
    }

    fn turn(&self, erase: bool) -> usize {
        self.state
            .lock()
            .map(|mut s| {
                let t = if erase {
                    &mut s.erase_turn
                } else {
                    &mut s.mii_turn
                };
                *t += 1;
                *t
            })
            .unwrap_or(0)
    }

    /// POSTs to `path` under `/v1/fhir` of one replica after another until
    /// `until`: a replica that could not be connected to was not asked, so
    /// the next is at once; one that answered 503 (its database away) is
    /// asked again on the next replica after a backoff, as the gRPC client
    /// retries UNAVAILABLE. Also whether an attempt before the last was
    /// answered 503 (the call may have been performed by it).
    async fn post_tracked(&self, path: &str, body: &Value, until: Until) -> (Reply, bool) {
        let mut last = Reply::NotSent("no HTTP address".into());
        let mut unavailable_before = false;
        let mut backoff = RETRY_BACKOFF;
        for attempt in 0..ATTEMPTS {
            let Some(left) = until.0.checked_duration_since(Instant::now().into()) else {
                break;
            };
            if attempt > 0 && matches!(last, Reply::Status(503, _)) {
                unavailable_before = true;
                if left <= backoff {
                    break;
                }
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            let Some(left) = until.0.checked_duration_since(Instant::now().into()) else {
                break;
            };
            let base = {
                let Ok(mut s) = self.state.lock() else { break };
                s.next_base = s.next_base.wrapping_add(1);
                self.bases
                    .get(s.next_base % self.bases.len().max(1))
                    .cloned()
            };
            let Some(base) = base else { break };
            last = fhir::post(
                &self.http,
                &format!("{base}/v1/fhir{path}"),
                self.bearer.as_deref(),
                body,
                left,
            )
            .await;
            if !matches!(last, Reply::NotSent(_) | Reply::Status(503, _)) {
                break;
            }
        }
        (last, unavailable_before)
    }

    async fn post(&self, path: &str, body: &Value, until: Until) -> Reply {
        self.post_tracked(path, body, until).await.0
    }

    /// Counts the answer for `op`; a status outside `allowed` (with 200, 201, 503)
    /// is an innocent failure (P5). Whether it was served (P1).
    fn judge(&self, op: Operation, second: u64, reply: &Reply, allowed: &[u16]) -> Served {
        // 201 Created: a `$pseudonymize` that made the pseudonym.
        let code = match reply {
            Reply::Status(200 | 201, _) => "Ok".to_owned(),
            Reply::Status(s, _) => format!("HTTP {s}"),
            Reply::Lost(why) | Reply::NotSent(why) => why.clone(),
        };
        self.calls.answered(op, &code);
        match reply {
            Reply::Status(200 | 201, _) => Served::Yes,
            Reply::Status(s, _) if allowed.contains(s) => Served::Yes,
            Reply::Status(503, _) | Reply::Lost(_) | Reply::NotSent(_) => {
                self.calls.failed(&code);
                Served::No
            }
            Reply::Status(s, _) => {
                self.calls.failed(&code);
                self.calls.found(
                    second,
                    Broken::InnocentFailure,
                    op,
                    format!(
                        "t={second}s a well-formed {} was answered HTTP {s}",
                        op.name()
                    ),
                );
                Served::No
            }
        }
    }

    fn answered(&self, second: u64, sent: u64, path: Path, original: &str, pseudonym: &str) {
        self.log.answered(Answered {
            second,
            sent_micros: sent,
            path,
            original: original.to_owned(),
            pseudonym: pseudonym.to_owned(),
        });
    }

    fn not_found(
        &self,
        second: u64,
        sent: u64,
        path: Path,
        (original, pseudonym): &(String, String),
    ) {
        self.log.not_found(NotFound {
            second,
            sent_micros: sent,
            path,
            original: original.clone(),
            pseudonym: pseudonym.clone(),
        });
    }

    /// `$pseudonymize` of `original`: the pseudonym answered, if any.
    async fn pseudonymize(
        &self,
        op: Operation,
        path: Path,
        original: &str,
        second: u64,
        until: Until,
    ) -> (Served, Option<String>) {
        let sent = now_micros();
        let body = fhir::parameters(&[("context", &self.namespace), ("original", original)]);
        let reply = self.post("/$pseudonymize", &body, until).await;
        let served = self.judge(op, second, &reply, &[]);
        let pseudonym = match &reply {
            Reply::Status(200 | 201, answer) => {
                fhir::value_of(answer, "pseudonym").map(str::to_owned)
            }
            _ => None,
        };
        if let Some(p) = &pseudonym {
            self.answered(second, sent, path, original, p);
        }
        (served, pseudonym)
    }

    /// One `mii` call, the kinds in turn.
    pub async fn call(&self, second: u64, until: Until) -> Served {
        let turn = self.turn(false);
        // What the multi guard needs is scheduled first, so that a short run
        // can pass it too; then one call in MULTI_EVERY.
        if turn.is_multiple_of(MULTI_EVERY) || (turn % 2 == 1 && self.multi.owes_calls()) {
            return self.multi.call(self, second, until).await;
        }
        let subject = self.subject();
        match (turn % 5, subject) {
            (1, Some(pair)) => self.get_pseudonym(pair, second, until).await,
            (2, Some(pair)) => self.de_pseudonymize(pair, second, until).await,
            (3, Some((original, _))) => {
                self.pseudonymize(Operation::Mii, Path::Pseudonymize, &original, second, until)
                    .await
                    .0
            }
            (4, _) if turn % 10 == 4 => match self.erased_subject() {
                Some(pair) => self.de_pseudonymize(pair, second, until).await,
                None => self.create_fresh(second, until).await,
            },
            (4, _) => match self.erased_subject() {
                Some((original, _)) => {
                    self.pseudonymize(Operation::Mii, Path::Pseudonymize, &original, second, until)
                        .await
                        .0
                }
                None => self.create_fresh(second, until).await,
            },
            _ => self.create_fresh(second, until).await,
        }
    }

    async fn create_fresh(&self, second: u64, until: Until) -> Served {
        let original = self.fresh();
        let (served, pseudonym) = self
            .pseudonymize(Operation::Mii, Path::Pseudonymize, &original, second, until)
            .await;
        if let Some(p) = pseudonym {
            self.remember(original, p);
        }
        served
    }

    async fn get_pseudonym(&self, pair: (String, String), second: u64, until: Until) -> Served {
        let sent = now_micros();
        let body = fhir::parameters(&[("context", &self.namespace), ("original", &pair.0)]);
        let reply = self.post("/$get-pseudonym", &body, until).await;
        // 404: an erased subject, or a lost write (the checker tells which).
        let served = self.judge(Operation::Mii, second, &reply, &[404]);
        match &reply {
            Reply::Status(200, answer) => {
                if let Some(p) = fhir::value_of(answer, "pseudonym") {
                    self.answered(second, sent, Path::GetPseudonym, &pair.0, p);
                }
            }
            Reply::Status(404, _) => self.not_found(second, sent, Path::GetPseudonym, &pair),
            _ => {}
        }
        served
    }

    async fn de_pseudonymize(&self, pair: (String, String), second: u64, until: Until) -> Served {
        let sent = now_micros();
        let body = fhir::parameters(&[("context", &self.namespace), ("pseudonym", &pair.1)]);
        let reply = self.post("/$de-pseudonymize", &body, until).await;
        let served = self.judge(Operation::Mii, second, &reply, &[404]);
        match &reply {
            Reply::Status(200, answer) => {
                if let Some(o) = fhir::original_of(answer) {
                    self.answered(second, sent, Path::DePseudonymize, o, &pair.1);
                }
            }
            Reply::Status(404, _) => self.not_found(second, sent, Path::DePseudonymize, &pair),
            _ => {}
        }
        served
    }

    /// One Bundle of 1–[`MAX_BUNDLE`] entries: batch and transaction in turn.
    pub async fn bundle(&self, second: u64, until: Until) -> Served {
        let turn = self
            .state
            .lock()
            .map(|mut s| {
                s.bundle_turn += 1;
                s.bundle_turn
            })
            .unwrap_or(1);
        if turn.is_multiple_of(2) {
            return self.transaction(turn / 2, second, until).await;
        }
        let served = self.batch(second, until).await;
        if turn % UNSUPPORTED_EVERY == 1 {
            self.probe_unsupported(second, until).await;
        }
        served
    }

    /// Asks for what a single-pseudonym namespace refuses —
    /// `$pseudonymize-multiple` — and records the answer (not judged as a
    /// call: the checker reads it).
    async fn probe_unsupported(&self, second: u64, until: Until) {
        let mut multiple =
            fhir::parameters(&[("context", &self.namespace), ("original", &self.fresh())]);
        if let Some(p) = multiple["parameter"].as_array_mut() {
            p.push(serde_json::json!({"name": "count", "valueInteger": 2}));
        }
        let status = match self.post("/$pseudonymize-multiple", &multiple, until).await {
            Reply::Status(s, _) => Some(s),
            Reply::Lost(_) | Reply::NotSent(_) => None,
        };
        self.log.unsupported(Probe {
            second,
            what: Unsupported::Multiple,
            status,
        });
    }

    /// Whether an erasure of `turn` is checked against every replica's
    /// cache (counted as one when it is).
    fn cache_check_due(&self, turn: usize) -> bool {
        self.state
            .lock()
            .map(|mut s| {
                let due = cache_check::due(turn, s.cache_checks);
                s.cache_checks += usize::from(due);
                due
            })
            .unwrap_or(false)
    }

    /// One erasure of an acknowledged subject, the kinds in turn; every
    /// third sent together with a `$pseudonymize` of the same original, one
    /// in five checked against every replica's cache instead
    /// ([`cache_check`]).
    pub async fn erase(&self, second: u64, until: Until) -> Served {
        let turn = self.turn(true);
        if turn.is_multiple_of(MULTI_ERASE_EVERY) || self.multi.owes_erasure() {
            if let Some(served) = self.multi.erase(self, second, until).await {
                return served;
            }
        }
        let Some((original, pseudonym)) = self.take_subject() else {
            // Nothing acknowledged yet: a fresh subject, so the slot still calls.
            return self.create_fresh(second, until).await;
        };
        let kind = if turn.is_multiple_of(2) {
            ErasureKind::Delete
        } else {
            ErasureKind::Anonymize
        };
        let checked = self.cache_check_due(turn);
        // A checked erasure is not raced: what each replica answers after
        // the acknowledgement must be its own doing.
        let raced = turn.is_multiple_of(3) && !checked;
        let before = match checked {
            true => {
                self.warm((original.as_str(), pseudonym.as_str()), until)
                    .await
            }
            false => Vec::new(),
        };
        let body = fhir::parameters(&[("context", &self.namespace), ("original", &original)]);
        let path = match kind {
            ErasureKind::Delete => "/$delete-pseudonym",
            ErasureKind::Anonymize => "/$anonymize-original",
        };
        let sent = now_micros();
        let erasure = self.post_tracked(path, &body, until);
        let race = async {
            if raced {
                // Counted as a `mii` call: the erase column counts erasures.
                self.pseudonymize(Operation::Mii, Path::Race, &original, second, until)
                    .await;
            }
        };
        let ((reply, unavailable_before), ()) = tokio::join!(erasure, race);
        let answered = now_micros();
        let served = self.judge(Operation::Erase, second, &reply, &[]);
        if let Reply::Status(s @ (403 | 405), _) = &reply {
            self.log.cannot_erase(format!(
                "{} answered {s}: {}",
                kind.operation(),
                if *s == 403 {
                    "the load's token lacks the erase right"
                } else {
                    "the namespace does not allow it"
                }
            ));
        }
        let erasure = Erasure {
            second,
            kind,
            original,
            pseudonym,
            sent_micros: sent,
            answered_micros: answered,
            // A 404 (or no connection) after a 503: the earlier attempt may
            // have erased it.
            meaning: match meaning(&reply) {
                Meaning::Refused if unavailable_before => Meaning::Unknown,
                m => m,
            },
            answer: match &reply {
                Reply::Status(s, _) => s.to_string(),
                Reply::Lost(why) | Reply::NotSent(why) => why.clone(),
            },
            raced,
        };
        if checked {
            self.recheck(&erasure, before).await;
        }
        self.log.erased(erasure);
        served
    }
}

/// What an answer means for what the service did: 200 done, another 4xx
/// not done, a 5xx or a lost answer perhaps.
fn meaning(reply: &Reply) -> Meaning {
    match reply {
        Reply::Status(200, _) => Meaning::Acknowledged,
        Reply::Status(s, _) if *s < 500 => Meaning::Refused,
        Reply::Status(_, _) | Reply::Lost(_) => Meaning::Unknown,
        Reply::NotSent(_) => Meaning::Refused,
    }
}
