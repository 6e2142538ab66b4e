//! The workload: what the harness asks of the service, and when. Every operation
//! of the API on one open-model schedule, each answer judged by the model while
//! the faults happen.
//!
//! # Layout
//! - this file: [`Workload`] (what the generator dispatches) and [`Mixed`], the
//!   operations and what each answer means.
//! - [`mix`]: which operation each slot carries (`RESILIENCE_MIX`).
//! - [`generator`]: the open-model schedule — calls dispatched on a wall-clock
//!   schedule whatever the service does, shed past an in-flight cap.
//! - [`churn`]: side namespaces created, filled, read and deleted (P6).
//! - [`bad`]: invalid input and the code documented for each kind.
//! - [`jobs`]: CSV jobs submitted beside the load and followed to their end (P7).
//! - [`privacy`]: P10's probe, before the load window and after
//!   verification: every random method through every replica, sequential
//!   originals in Bundles, a job and List pages, multi siblings.
//! - [`capacity`]: the capacity sweep's Creates and Gets, judged only by
//!   speed (every answer other than OK a failure).
//!
//! What each operation may be answered, and which property judges it:
//!
//! | operation | well-formed? | answers the model allows | judged by |
//! |---|---|---|---|
//! | create | yes | OK (ledger), UNAVAILABLE / DEADLINE_EXCEEDED (indeterminate or not) | P1, P2–P4 after settling, P5 |
//! | recreate | yes | OK with the acknowledged pseudonym | P2 online, P5 |
//! | get | yes | OK with the acknowledged original; NOT_FOUND is a lost write | P3 online, P5 |
//! | list | yes | OK, items without originals; listed pseudonyms resolve | list pages, P5 |
//! | churn | yes | OK; NOT_FOUND where the namespace's lifecycle says so; ALREADY_EXISTS for a re-sent create | P6, P5 |
//! | bad | no | its documented code (see [`bad`]) | invalid input |
//! | mii | yes | 200; 404 for a lookup of an erased subject | P8, erasable-subjects, P5 |
//! | bundle | yes | 200, each entry 200 (503) or 404 where meant to fail | bundles, P8, P5 |
//! | erase | yes | 200 (acknowledged); 4xx refused; 5xx or none unknown | P8, guard-erasure-exercised, P5 |

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rand::{rngs::StdRng, Rng, SeedableRng};
use tonic::Code;
use vfps_client::{Client, Outcome, Until};
use vfps_proto::v1::PseudonymServiceListRequest;

use crate::{
    config::RefusedTokens,
    history::{Broken, Calls, Ledger, Leftovers, Status},
    operation::Operation,
    redact,
};

pub mod bad;
pub mod capacity;
pub mod churn;
pub mod generator;
pub mod jobs;
pub mod mii;
pub mod privacy;
pub mod ui;

/// Whether a call was served, for P1: answered as the API documents for that
/// call (OK, or a code it may answer, such as NOT_FOUND for a namespace a
/// churn step deleted), or not: unavailable, too late, or an answer that
/// failed its caller (RESOURCE_EXHAUSTED, PERMISSION_DENIED, INTERNAL, …;
/// P5 reports those too). An overloaded or misconfigured replica that answers
/// every call with an error is an outage, not a served second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    Yes,
    No,
}

impl Served {
    fn of(code: Code, documented: &[Code]) -> Self {
        if code == Code::Ok || documented.contains(&code) {
            Served::Yes
        } else {
            Served::No
        }
    }
}

/// What the generator dispatches.
pub trait Workload: Send + Sync + 'static {
    /// Starts one call of `op`, offered in `second`, to be over by `until`
    /// (its intended send time plus its deadline). Called in dispatch order.
    fn start(
        self: Arc<Self>,
        op: Operation,
        second: u64,
        until: Until,
    ) -> BoxFuture<'static, Served>;
}

/// Most acknowledged pairs kept to re-Create and Get (a uniform sample).
const SAMPLE: usize = 20_000;
/// Most listed pseudonyms kept for the final verification.
const LISTED: usize = 2_000;
/// Well-formed Creates sent together with an original containing U+0000.
const COMPANIONS: usize = 8;

/// A uniform sample of acknowledged (original, pseudonym) pairs (Algorithm R),
/// for the operations that read back what was written.
pub(crate) struct Acked {
    pairs: Vec<(String, String)>,
    seen: u64,
    size: usize,
}

impl Acked {
    pub(crate) fn new(size: usize) -> Self {
        Self {
            pairs: Vec::new(),
            seen: 0,
            size,
        }
    }

    /// One pair of the sample, chosen at random.
    pub(crate) fn pick(&self, rng: &mut StdRng) -> Option<(String, String)> {
        if self.pairs.is_empty() {
            return None;
        }
        Some(self.pairs[rng.random_range(0..self.pairs.len())].clone())
    }

    /// Takes one pair out of the sample, chosen at random.
    pub(crate) fn take(&mut self, rng: &mut StdRng) -> Option<(String, String)> {
        if self.pairs.is_empty() {
            return None;
        }
        let i = rng.random_range(0..self.pairs.len());
        Some(self.pairs.swap_remove(i))
    }

    /// Keeps the pair with the probability that leaves the sample uniform.
    pub(crate) fn remember(&mut self, rng: &mut StdRng, original: String, pseudonym: String) {
        self.seen += 1;
        if self.pairs.len() < self.size {
            self.pairs.push((original, pseudonym));
        } else {
            let j = rng.random_range(0..self.seen) as usize;
            if j < self.size {
                self.pairs[j] = (original, pseudonym);
            }
        }
    }
}

struct State {
    rng: StdRng,
    /// Acknowledged (original, pseudonym) pairs, a uniform sample.
    acked: Acked,
    /// The next page of List; empty starts over.
    page_token: String,
    listed: Vec<String>,
    /// Which kind of invalid input comes next.
    bad_turn: usize,
}

/// The mixed workload against one namespace of one service.
pub struct Mixed {
    client: Client,
    namespace: String,
    ledger: Arc<Ledger>,
    calls: Arc<Calls>,
    churn: churn::Churn,
    state: Mutex<State>,
    /// Names what invalid input may create (never a real namespace).
    run: u64,
    /// The kinds of bad call sent, in turn.
    bad_kinds: Vec<bad::BadInput>,
    /// Credentials the service must refuse.
    refused: RefusedTokens,
    /// The MII interface's operations (`mii`, `bundle`, `erase`), when the
    /// mix has them.
    mii: Option<Arc<mii::Mii>>,
}

/// A synthetic original: 32 hex digits from the seeded generator (no personal data).
fn original(rng: &mut StdRng) -> String {
    format!("rs-{:032x}", rng.random::<u128>())
}

impl Mixed {
    pub fn new(
        client: Client,
        namespace: String,
        seed: u64,
        ledger: Arc<Ledger>,
        calls: Arc<Calls>,
        refused: RefusedTokens,
    ) -> Arc<Self> {
        Arc::new(Self {
            bad_kinds: bad::BadInput::kinds(&refused),
            refused,
            client,
            namespace,
            ledger,
            calls,
            churn: churn::Churn::new(seed),
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                acked: Acked::new(SAMPLE),
                page_token: String::new(),
                listed: Vec::new(),
                bad_turn: 0,
            }),
            run: seed,
            mii: None,
        })
    }

    /// The same workload with the MII interface's operations.
    pub fn with_mii(self: Arc<Self>, mii: mii::Mii) -> Arc<Self> {
        match Arc::try_unwrap(self) {
            Ok(mut this) => {
                this.mii = Some(Arc::new(mii));
                Arc::new(this)
            }
            Err(shared) => shared,
        }
    }

    pub fn leftovers(&self) -> Leftovers {
        Leftovers {
            listed: self
                .state
                .lock()
                .map(|s| s.listed.clone())
                .unwrap_or_default(),
            side: self.churn.final_checks(),
        }
    }

    /// P5: a well-formed call answered other than OK, UNAVAILABLE,
    /// DEADLINE_EXCEEDED, or the codes `also` its model allows.
    /// Records the answer, reports one that fails an innocent caller (P5),
    /// and says whether the call was served (P1).
    fn judge(&self, op: Operation, second: u64, code: Code, also: &[Code]) -> Served {
        self.calls.answered(op, &format!("{code:?}"));
        let allowed = matches!(code, Code::Ok | Code::Unavailable | Code::DeadlineExceeded)
            || also.contains(&code);
        if !allowed {
            self.calls.found(
                second,
                Broken::InnocentFailure,
                op,
                format!(
                    "t={second}s a well-formed {} was answered {code:?}",
                    op.name()
                ),
            );
        }
        let served = Served::of(code, also);
        if served == Served::No {
            self.calls.failed(&format!("{code:?}"));
        }
        served
    }

    fn acked_pair(&self) -> Option<(String, String)> {
        let mut s = self.state.lock().ok()?;
        let State { rng, acked, .. } = &mut *s;
        acked.pick(rng)
    }

    fn remember(&self, original: String, pseudonym: String) {
        if let Ok(mut s) = self.state.lock() {
            let State { rng, acked, .. } = &mut *s;
            acked.remember(rng, original, pseudonym);
        }
    }

    async fn create(&self, original: String, second: u64, until: Until) -> Served {
        let outcome = self.client.create(&self.namespace, &original, until).await;
        let code = outcome.code();
        let served = self.judge(Operation::Create, second, code, &[]);
        match outcome {
            Outcome::Ok(p) => {
                self.ledger.record(
                    second,
                    Status::Ok,
                    original.clone(),
                    Some(p.pseudonym_value.clone()),
                    None,
                );
                self.remember(original, p.pseudonym_value);
            }
            Outcome::Indeterminate(code) => self.ledger.record(
                second,
                Status::Indeterminate,
                original,
                None,
                Some(format!("{code:?}")),
            ),
            Outcome::Fail(_) => {}
        }
        served
    }

    async fn recreate(
        &self,
        (original, acked): (String, String),
        second: u64,
        until: Until,
    ) -> Served {
        let outcome = self.client.create(&self.namespace, &original, until).await;
        let code = outcome.code();
        let served = self.judge(Operation::Recreate, second, code, &[Code::NotFound]);
        let changed = match &outcome {
            Outcome::Ok(p) if p.pseudonym_value != acked => {
                Some(format!("re-created as {}…", short(&p.pseudonym_value)))
            }
            Outcome::Fail(Code::NotFound) => Some("re-create answered NOT_FOUND".into()),
            _ => None,
        };
        if let Some(how) = changed {
            self.calls.found_pair(
                second,
                Broken::Stability,
                Operation::Recreate,
                crate::checker::pair(&original, &acked),
                &how,
            );
        }
        served
    }

    async fn get(&self, (original, acked): (String, String), second: u64, until: Until) -> Served {
        let outcome = self.client.get(&self.namespace, &acked, until).await;
        let code = outcome.code();
        let served = self.judge(Operation::Get, second, code, &[Code::NotFound]);
        let lost = match &outcome {
            Outcome::Ok(p) if p.original_value.as_deref() != Some(original.as_str()) => {
                Some(format!(
                    "resolves to {}",
                    redact(p.original_value.as_deref().unwrap_or_default())
                ))
            }
            Outcome::Fail(Code::NotFound) => Some("does not resolve (lost write)".into()),
            _ => None,
        };
        if let Some(how) = lost {
            self.calls.found_pair(
                second,
                Broken::ReverseLookup,
                Operation::Get,
                crate::checker::pair(&original, &acked),
                &how,
            );
        }
        served
    }

    async fn list(&self, second: u64, until: Until) -> Served {
        let token = self
            .state
            .lock()
            .map(|s| s.page_token.clone())
            .unwrap_or_default();
        let outcome = self
            .client
            .list(
                PseudonymServiceListRequest {
                    namespace: self.namespace.clone(),
                    page_size: 10,
                    page_token: token,
                    include_total_size: false,
                },
                until,
            )
            .await;
        let code = outcome.code();
        let served = self.judge(Operation::List, second, code, &[]);
        if let Outcome::Ok(page) = outcome {
            if page.pseudonyms.iter().any(|p| p.original_value.is_some()) {
                self.calls.found(
                    second,
                    Broken::ListPage,
                    Operation::List,
                    format!("t={second}s a listed pseudonym carried its original"),
                );
            }
            if let Ok(mut s) = self.state.lock() {
                s.page_token = page.next_page_token;
                for p in page.pseudonyms {
                    if s.listed.len() < LISTED {
                        s.listed.push(p.pseudonym_value);
                    }
                }
            }
        }
        served
    }

    /// Invalid input. The original with U+0000 goes out together with
    /// well-formed Creates (`companions`), so that it shares their batch: one
    /// caller's bad input must not fail them (P5).
    async fn bad(
        &self,
        kind: bad::BadInput,
        unique: String,
        companions: Vec<String>,
        second: u64,
        until: Until,
    ) -> Served {
        let innocent = futures::future::join_all(
            companions
                .into_iter()
                .map(|o| self.create(o, second, until)),
        );
        let (code, _) = tokio::join!(
            kind.call(&self.client, &self.refused, &self.namespace, &unique, until),
            innocent
        );
        self.calls.answered(Operation::Bad, &format!("{code:?}"));
        if code == kind.expected() {
            return Served::Yes;
        }
        self.calls.failed(&format!("{code:?}"));
        if matches!(code, Code::Unavailable | Code::DeadlineExceeded) {
            return Served::No;
        }
        self.calls.found(
            second,
            Broken::InvalidInput,
            Operation::Bad,
            format!(
                "t={second}s {} was answered {code:?}, documented {:?}",
                kind.name(),
                kind.expected()
            ),
        );
        Served::No
    }
}

fn short(pseudonym: &str) -> String {
    pseudonym.chars().take(8).collect()
}

impl Workload for Mixed {
    fn start(
        self: Arc<Self>,
        op: Operation,
        second: u64,
        until: Until,
    ) -> BoxFuture<'static, Served> {
        let this = self.clone();
        match op {
            Operation::Create => {
                let original = self.next_original();
                Box::pin(async move { this.create(original, second, until).await })
            }
            Operation::Recreate | Operation::Get => match self.acked_pair() {
                Some(pair) if op == Operation::Recreate => {
                    Box::pin(async move { this.recreate(pair, second, until).await })
                }
                Some(pair) => Box::pin(async move { this.get(pair, second, until).await }),
                // Nothing acknowledged yet: a fresh Create, so the slot still calls.
                None => {
                    let original = self.next_original();
                    Box::pin(async move { this.create(original, second, until).await })
                }
            },
            Operation::List => Box::pin(async move { this.list(second, until).await }),
            Operation::Churn => Box::pin(async move {
                let code = this
                    .churn
                    .step(&this.client, &this.calls, second, until)
                    .await;
                this.judge(
                    Operation::Churn,
                    second,
                    code,
                    &[Code::NotFound, Code::AlreadyExists],
                )
            }),
            Operation::Bad => {
                let (kind, unique) = self.next_bad();
                let companions = if kind == bad::BadInput::NulOriginal {
                    (0..COMPANIONS).map(|_| self.next_original()).collect()
                } else {
                    Vec::new()
                };
                Box::pin(async move { this.bad(kind, unique, companions, second, until).await })
            }
            Operation::Mii | Operation::Bundle | Operation::Erase => match self.mii.clone() {
                Some(m) => Box::pin(async move {
                    match op {
                        Operation::Mii => m.call(second, until).await,
                        Operation::Bundle => m.bundle(second, until).await,
                        _ => m.erase(second, until).await,
                    }
                }),
                // Not set up (checked before the load starts): a fresh Create.
                None => {
                    let original = self.next_original();
                    Box::pin(async move { this.create(original, second, until).await })
                }
            },
        }
    }
}

impl Mixed {
    fn next_original(&self) -> String {
        self.state
            .lock()
            .map(|mut s| original(&mut s.rng))
            .unwrap_or_default()
    }

    fn next_bad(&self) -> (bad::BadInput, String) {
        let turn = self
            .state
            .lock()
            .map(|mut s| {
                s.bad_turn += 1;
                s.bad_turn
            })
            .unwrap_or(0);
        let kind = self.bad_kinds[turn % self.bad_kinds.len()];
        (kind, format!("bad-{:08x}-{turn}", self.run & 0xffff_ffff))
    }
}

#[cfg(test)]
mod acked_tests {
    use super::*;

    /// P1 counts a call as served only when its answer is one the API
    /// documents for it: an overloaded replica answering RESOURCE_EXHAUSTED,
    /// or a misconfigured one answering PERMISSION_DENIED, serves nobody.
    #[test]
    fn only_documented_answers_count_as_served() {
        for code in [
            Code::ResourceExhausted,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::Internal,
            Code::Unavailable,
            Code::DeadlineExceeded,
        ] {
            assert_eq!(Served::of(code, &[]), Served::No, "{code:?}");
        }
        assert_eq!(Served::of(Code::Ok, &[]), Served::Yes);
        assert_eq!(
            Served::of(Code::NotFound, &[Code::NotFound, Code::AlreadyExists]),
            Served::Yes,
            "a churn step's documented answer"
        );
    }

    #[test]
    fn the_sample_stays_bounded_and_keeps_late_pairs_too() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut acked = Acked::new(100);
        assert_eq!(acked.pick(&mut rng), None);
        for i in 0..10_000 {
            acked.remember(&mut rng, format!("o{i}"), format!("p{i}"));
        }
        assert_eq!(acked.pairs.len(), 100);
        // Uniform over 10,000: about half the kept pairs come from the second half.
        let late = acked
            .pairs
            .iter()
            .filter(|(o, _)| o[1..].parse::<u32>().is_ok_and(|n| n >= 5_000))
            .count();
        assert!(
            (30..=70).contains(&late),
            "{late} of 100 from the second half"
        );
        assert!(acked.pick(&mut rng).is_some());
    }
}
