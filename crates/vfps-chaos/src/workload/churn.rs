//! Namespace churn: side namespaces created, filled, read and deleted alongside
//! everything else, so DeleteNamespace runs under the faults too (P6).
//!
//! Each side namespace lives through `create → 4 pairs → a read → delete → a
//! read`, one call at a time (a namespace never has two calls in flight, so the
//! model knows what each answer means). Until its delete is acknowledged every
//! acknowledged pair resolves; after it, none does. A create or delete that ends
//! indeterminate is resolved by a later Get of the namespace; after an
//! indeterminate delete its pairs are never again required to resolve (the
//! delete may still commit), and the namespace is deleted again.

use std::sync::Mutex;

use rand::Rng;
use tonic::Code;
use vfps_client::{Client, Outcome, Until};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::{
    history::{Broken, Calls, SideCheck},
    operation::Operation,
    redact,
};

/// Pairs each side namespace is filled with.
const PAIRS: usize = 4;
/// Side namespaces alive at once, at most; more slots than they need read one.
const MAX_ACTIVE: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Created (acknowledged).
    Live,
    /// Its delete was acknowledged.
    Deleted,
    /// A create ended indeterminate: does it exist?
    CreateUnsure,
    /// A delete ended indeterminate: it may still happen; delete again.
    DeleteUnsure,
}

struct Side {
    name: String,
    phase: Phase,
    /// Acknowledged pairs (original, pseudonym).
    pairs: Vec<(String, String)>,
    /// Originals handed out so far.
    created: u32,
    /// A call on it is in flight.
    busy: bool,
    /// Read while live (before its delete).
    read_live: bool,
    /// After an indeterminate delete: its pairs are no longer promised.
    doomed: bool,
    /// Done with: deleted and read afterwards, or never created.
    retired: bool,
}

/// One step of one side namespace.
enum Step {
    Create(usize, String),
    AddPair(usize, String, String),
    ReadLive(usize, String, (String, String)),
    Delete(usize, String),
    ReadDead(usize, String, (String, String)),
    Resolve(usize, String, Phase),
    /// Every namespace is busy: read one, judged by P5 alone.
    Look(String),
}

pub struct Churn {
    /// Names every side namespace of this run: `churn-<run>-<n>`.
    prefix: String,
    sides: Mutex<Vec<Side>>,
}

impl Churn {
    pub fn new(run: u64) -> Self {
        Self {
            prefix: format!("churn-{:08x}", run & 0xffff_ffff),
            sides: Mutex::new(Vec::new()),
        }
    }

    /// Chooses the next step, in dispatch order, and marks its namespace busy.
    fn next(&self) -> Step {
        let Ok(mut sides) = self.sides.lock() else {
            return Step::Look(self.prefix.clone());
        };
        for (i, s) in sides.iter_mut().enumerate() {
            if s.busy || s.retired {
                continue;
            }
            let step = match s.phase {
                Phase::Live if s.doomed => Step::Delete(i, s.name.clone()),
                Phase::Live if s.pairs.len() < PAIRS => {
                    s.created += 1;
                    Step::AddPair(i, s.name.clone(), format!("{}-o{}", s.name, s.created))
                }
                Phase::Live if !s.read_live => {
                    let pair = s.pairs[rand::rng().random_range(0..s.pairs.len())].clone();
                    Step::ReadLive(i, s.name.clone(), pair)
                }
                Phase::Live => Step::Delete(i, s.name.clone()),
                Phase::Deleted if s.pairs.is_empty() => {
                    s.retired = true;
                    continue;
                }
                Phase::Deleted => {
                    let pair = s.pairs[rand::rng().random_range(0..s.pairs.len())].clone();
                    Step::ReadDead(i, s.name.clone(), pair)
                }
                Phase::CreateUnsure | Phase::DeleteUnsure => {
                    Step::Resolve(i, s.name.clone(), s.phase)
                }
            };
            s.busy = true;
            return step;
        }
        let active = sides.iter().filter(|s| !s.retired).count();
        if active < MAX_ACTIVE {
            let name = format!("{}-{}", self.prefix, sides.len());
            sides.push(Side {
                name: name.clone(),
                phase: Phase::CreateUnsure,
                pairs: Vec::new(),
                created: 0,
                busy: true,
                read_live: false,
                doomed: false,
                retired: false,
            });
            return Step::Create(sides.len() - 1, name);
        }
        let live: Vec<&Side> = sides.iter().filter(|s| !s.retired).collect();
        let name = live
            .get(rand::rng().random_range(0..live.len().max(1)))
            .map_or_else(|| self.prefix.clone(), |s| s.name.clone());
        Step::Look(name)
    }

    fn update(&self, i: usize, change: impl FnOnce(&mut Side)) {
        if let Ok(mut sides) = self.sides.lock() {
            if let Some(s) = sides.get_mut(i) {
                change(s);
                s.busy = false;
            }
        }
    }

    /// One churn call. Returns its status code; findings go to `calls`.
    pub async fn step(&self, client: &Client, calls: &Calls, second: u64, until: Until) -> Code {
        let found = |text: String| calls.found(second, Broken::Lifecycle, Operation::Churn, text);
        match self.next() {
            Step::Create(i, name) => {
                let outcome = client
                    .create_namespace(
                        NamespaceServiceCreateRequest {
                            name,
                            pseudonym_generation_method: 4,
                            pseudonym_length: 36,
                            description: "side namespace of a vfps-chaos run".into(),
                            ..Default::default()
                        },
                        until,
                    )
                    .await;
                let code = outcome.code();
                self.update(i, |s| match outcome {
                    Outcome::Ok(()) | Outcome::Fail(Code::AlreadyExists) => s.phase = Phase::Live,
                    Outcome::Indeterminate(_) => {}
                    // Definitely not created.
                    Outcome::Fail(_) => s.retired = true,
                });
                code
            }
            Step::AddPair(i, name, original) => {
                let outcome = client.create(&name, &original, until).await;
                let code = outcome.code();
                if code == Code::NotFound {
                    found(format!(
                        "t={second}s side namespace {name} vanished before its delete (Create answered NOT_FOUND)"
                    ));
                }
                self.update(i, |s| {
                    if let Outcome::Ok(p) = outcome {
                        s.pairs.push((original, p.pseudonym_value));
                    }
                });
                code
            }
            Step::ReadLive(i, name, (original, pseudonym)) => {
                let outcome = client.get(&name, &pseudonym, until).await;
                let code = outcome.code();
                match &outcome {
                    Outcome::Ok(p) if p.original_value.as_deref() != Some(original.as_str()) => {
                        found(format!(
                            "t={second}s a pair of live side namespace {name} resolves to another original ({})",
                            redact(p.original_value.as_deref().unwrap_or_default())
                        ))
                    }
                    Outcome::Fail(Code::NotFound) => found(format!(
                        "t={second}s an acknowledged pair of side namespace {name} does not resolve before its delete"
                    )),
                    _ => {}
                }
                self.update(i, |s| {
                    s.read_live |= outcome.is_ok() || code == Code::NotFound
                });
                code
            }
            Step::Delete(i, name) => {
                let outcome = client.delete_namespace(&name, until).await;
                let code = outcome.code();
                self.update(i, |s| match outcome {
                    Outcome::Ok(()) => s.phase = Phase::Deleted,
                    Outcome::Fail(Code::NotFound) => {
                        if !s.doomed {
                            found(format!(
                                "t={second}s side namespace {name} was gone before its delete"
                            ));
                        }
                        s.phase = Phase::Deleted;
                    }
                    Outcome::Indeterminate(_) => s.phase = Phase::DeleteUnsure,
                    Outcome::Fail(_) => {}
                });
                code
            }
            Step::ReadDead(i, name, (_, pseudonym)) => {
                let outcome = client.get(&name, &pseudonym, until).await;
                let code = outcome.code();
                if outcome.is_ok() {
                    found(format!(
                        "t={second}s a pair of side namespace {name} resolves after its delete was acknowledged"
                    ));
                }
                self.update(i, |s| {
                    if outcome.is_ok() || code == Code::NotFound {
                        s.retired = true;
                    }
                });
                code
            }
            Step::Resolve(i, name, phase) => {
                let outcome = client.get_namespace(&name, until).await;
                let code = outcome.code();
                self.update(i, |s| match (phase, &outcome) {
                    (Phase::CreateUnsure, Outcome::Ok(_)) => s.phase = Phase::Live,
                    (Phase::CreateUnsure, Outcome::Fail(Code::NotFound)) => s.retired = true,
                    (_, Outcome::Ok(_)) => {
                        // The delete did not happen (yet): its pairs are no longer
                        // promised; delete it again.
                        s.phase = Phase::Live;
                        s.doomed = true;
                    }
                    (_, Outcome::Fail(Code::NotFound)) => s.phase = Phase::Deleted,
                    _ => {}
                });
                code
            }
            Step::Look(name) => client.get_namespace(&name, until).await.code(),
        }
    }

    /// The pairs the final verification must check: those of live namespaces
    /// resolve, those of namespaces whose delete was acknowledged do not.
    pub fn final_checks(&self) -> Vec<SideCheck> {
        let Ok(sides) = self.sides.lock() else {
            return Vec::new();
        };
        sides
            .iter()
            .filter_map(|s| match s.phase {
                Phase::Live if !s.doomed && !s.busy => Some((s, true)),
                Phase::Deleted if !s.busy => Some((s, false)),
                _ => None,
            })
            .flat_map(|(s, must_resolve)| {
                s.pairs.iter().map(move |(o, p)| SideCheck {
                    namespace: s.name.clone(),
                    original: o.clone(),
                    pseudonym: p.clone(),
                    must_resolve,
                })
            })
            .collect()
    }

    /// Side namespaces whose delete was acknowledged, and all of them.
    pub fn deleted_of_total(&self) -> (usize, usize) {
        self.sides.lock().map_or((0, 0), |s| {
            (
                s.iter().filter(|s| s.phase == Phase::Deleted).count(),
                s.len(),
            )
        })
    }
}
