//! `$pseudonymize-multiple` on a multi-pseudonym namespace of its own
//! (`<namespace>-multi`, random pseudonyms, deletion allowed so both kinds
//! of erasure are), on the `mii` share of the schedule: one `mii` call in
//! [`Mii::MULTI_EVERY`](super) comes here, the kinds in turn —
//!
//! - `count` n (1–5) of a fresh original, and of an acknowledged one (its
//!   pseudonyms grow);
//! - `count` 0 of an acknowledged original (every one of its pseudonyms
//!   must be answered);
//! - `$de-pseudonymize` of an acknowledged pseudonym (its own original must
//!   be answered; it also fills the replicas' caches, where erasures go
//!   stale);
//! - in turn `count` 0 of an erased original and `$de-pseudonymize` of one
//!   of its pseudonyms (none may be answered).
//!
//! and some erasures of acknowledged multi originals (all their pseudonyms
//! at once) on the `erase` share, at most one original in [`ERASED_SHARE`]
//! erased so that most stay to be read. Every answer goes to the run's
//! [`ErasureLog`] with what it means; `checker::multi` judges it.

use std::sync::Mutex;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use vfps_client::{Client, Until};
use vfps_proto::v1::NamespaceServiceCreateRequest;

use super::{fhir, fhir::Reply, meaning, Mii, Served};
use crate::{
    history::{
        erasures::{now_micros, ErasureKind, ErasureLog, Meaning},
        multi::{Found, MultiCreate, MultiErasure, MultiRead, MultiResolve, Resolved},
    },
    operation::Operation,
};

/// Acknowledged multi originals kept to read back, add to and erase.
const ORIGINALS: usize = 5_000;
/// Erased originals kept to read again.
const ERASED: usize = 1_000;
/// At most one acknowledged original in this many is erased.
const ERASED_SHARE: usize = 3;
/// The most pseudonyms one create asks for.
pub const MAX_COUNT: u32 = 5;

/// The multi-pseudonym namespace of a run whose namespace is `namespace`.
pub fn multi_namespace(namespace: &str) -> String {
    format!("{namespace}-multi")
}

/// Creates the multi-pseudonym namespace (`ALREADY_EXISTS` is fine).
pub async fn create_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let name = multi_namespace(namespace);
    let created = client
        .ensure_namespace(
            NamespaceServiceCreateRequest {
                name: name.clone(),
                // Random: a derived method has one pseudonym per original.
                pseudonym_generation_method: 1,
                pseudonym_length: 32,
                description: "created by vfps-chaos: $pseudonymize-multiple".into(),
                pseudonym_deletion_allowed: Some(true),
                multi_pseudonym: Some(true),
                ..Default::default()
            },
            std::time::Duration::from_secs(10),
        )
        .await;
    if !created.is_ok() {
        anyhow::bail!(
            "cannot create the multi-pseudonym namespace {name:?}: {:?}",
            created.code()
        );
    }
    Ok(())
}

struct State {
    rng: StdRng,
    /// Acknowledged originals not taken for erasure, each with one of its
    /// acknowledged pseudonyms (a uniform sample).
    originals: Vec<(String, String)>,
    /// Acknowledged originals ever, and taken for erasure: the erasure quota.
    acknowledged: usize,
    taken: usize,
    /// Originals whose erasure was sent, with one of their pseudonyms.
    erased: Vec<(String, String)>,
    turn: usize,
    /// Turns of looking at an erased original.
    erased_turn: usize,
    erase_turn: usize,
    /// A `count` 0 was answered with pseudonyms, and an erasure
    /// acknowledged: what the run's guard needs (`guard-multi-exercised`).
    /// Until then they are scheduled first, so a short run meets it too.
    read_answered: bool,
    erasure_acknowledged: bool,
}

impl State {
    /// What the guard still needs of the multi side: a create acknowledged,
    /// a `count` 0 answered.
    fn owes_calls(&self) -> bool {
        self.acknowledged == 0 || !self.read_answered
    }

    /// May an acknowledged original be taken for erasure now: within
    /// [`ERASED_SHARE`], or at once while no erasure was acknowledged yet.
    fn may_erase(&self) -> bool {
        !self.originals.is_empty()
            && (!self.erasure_acknowledged || (self.taken + 1) * ERASED_SHARE <= self.acknowledged)
    }
}

/// The multi-pseudonym side of the MII workload.
pub struct Multi {
    namespace: String,
    state: Mutex<State>,
}

/// `Parameters` of `$pseudonymize-multiple`.
fn parameters(namespace: &str, original: &str, count: u32) -> Value {
    let mut body = fhir::parameters(&[("context", namespace), ("original", original)]);
    if let Some(p) = body["parameter"].as_array_mut() {
        p.push(json!({"name": "count", "valueInteger": count}));
    }
    body
}

/// The pseudonyms of a `$pseudonymize-multiple` answer (each `pseudonym`'s
/// `value` part), or `None` when one is malformed.
pub fn pseudonyms_of(answer: &Value) -> Option<Vec<String>> {
    answer["parameter"]
        .as_array()?
        .iter()
        .filter(|p| p["name"] == "pseudonym")
        .map(|p| {
            let value = p["part"]
                .as_array()?
                .iter()
                .find(|part| part["name"] == "value")?;
            value["valueIdentifier"]["value"]
                .as_str()
                .or_else(|| value["valueString"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// What a `count` 0 answer says.
pub fn found_of(reply: &Reply) -> Found {
    match reply {
        Reply::Status(200, body) => match pseudonyms_of(body) {
            Some(p) => Found::Pseudonyms(p),
            None => Found::NoAnswer("200 without pseudonyms".into()),
        },
        Reply::Status(404, _) => Found::NotFound,
        Reply::Status(s, _) => Found::NoAnswer(format!("HTTP {s}")),
        Reply::Lost(why) | Reply::NotSent(why) => Found::NoAnswer(why.clone()),
    }
}

fn answer_of(reply: &Reply) -> String {
    match reply {
        Reply::Status(s, _) => s.to_string(),
        Reply::Lost(why) | Reply::NotSent(why) => why.clone(),
    }
}

impl Multi {
    pub fn new(namespace: &str, seed: u64, log: &ErasureLog) -> Self {
        let namespace = multi_namespace(namespace);
        // Started now, so a run that made no multi call says so.
        log.multi(&namespace, |_| {});
        Self {
            namespace,
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed ^ 0x6d75_6c74),
                originals: Vec::new(),
                acknowledged: 0,
                taken: 0,
                erased: Vec::new(),
                turn: 0,
                erased_turn: 0,
                erase_turn: 0,
                read_answered: false,
                erasure_acknowledged: false,
            }),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        self.state.lock().ok().map(|mut s| f(&mut s))
    }

    fn pick(items: &[(String, String)], rng: &mut StdRng) -> Option<(String, String)> {
        (!items.is_empty()).then(|| items[rng.random_range(0..items.len())].clone())
    }

    /// One multi call, the kinds in turn.
    pub async fn call(&self, mii: &Mii, second: u64, until: Until) -> Served {
        let Some((turn, count, live, erased)) = self.with(|s| {
            s.turn += 1;
            let count = s.rng.random_range(1..=MAX_COUNT);
            let live = Self::pick(&s.originals, &mut s.rng);
            let erased = Self::pick(&s.erased, &mut s.rng);
            if s.turn.is_multiple_of(5) && erased.is_some() {
                s.erased_turn += 1;
            }
            (s.turn, count, live, erased.map(|e| (e, s.erased_turn)))
        }) else {
            return Served::No;
        };
        // The guard's count-0 read comes first, once an original is there.
        if let (true, Some((original, _))) =
            (self.with(|s| !s.read_answered).unwrap_or(false), &live)
        {
            return self.read(mii, original.clone(), second, until).await;
        }
        match (turn % 5, live, erased) {
            (2, Some((original, _)), _) => self.create(mii, original, count, second, until).await,
            (3, Some((original, _)), _) => self.read(mii, original, second, until).await,
            (4, Some(pair), _) => self.resolve(mii, pair, second, until).await,
            (0, _, Some((pair, t))) if t % 2 == 0 => self.resolve(mii, pair, second, until).await,
            (0, _, Some(((original, _), _))) => self.read(mii, original, second, until).await,
            _ => {
                let original = format!("multi-{}", mii.fresh());
                self.create(mii, original, count, second, until).await
            }
        }
    }

    async fn create(
        &self,
        mii: &Mii,
        original: String,
        count: u32,
        second: u64,
        until: Until,
    ) -> Served {
        let sent = now_micros();
        let body = parameters(&self.namespace, &original, count);
        let reply = mii.post("/$pseudonymize-multiple", &body, until).await;
        let answered = now_micros();
        let served = mii.judge(Operation::Mii, second, &reply, &[201]);
        let pseudonyms = match &reply {
            Reply::Status(201, body) => pseudonyms_of(body).unwrap_or_default(),
            _ => Vec::new(),
        };
        let meaning = match &reply {
            // A 201 without its pseudonyms: done, but not what was promised.
            Reply::Status(201, _) if pseudonyms.len() as u32 == count => Meaning::Acknowledged,
            Reply::Status(201 | 200, _) => Meaning::Unknown,
            other => meaning(other),
        };
        if let (Meaning::Acknowledged, Some(first)) = (meaning, pseudonyms.first()) {
            self.with(|s| {
                s.acknowledged += 1;
                if !s.originals.iter().any(|(o, _)| *o == original) {
                    let pair = (original.clone(), first.clone());
                    if s.originals.len() < ORIGINALS {
                        s.originals.push(pair);
                    } else {
                        let i = s.rng.random_range(0..s.originals.len());
                        s.originals[i] = pair;
                    }
                }
            });
        }
        mii.log.multi(&self.namespace, |h| {
            h.created(MultiCreate {
                second,
                sent_micros: sent,
                answered_micros: answered,
                original,
                count,
                meaning,
                answer: answer_of(&reply),
                pseudonyms,
            })
        });
        served
    }

    async fn read(&self, mii: &Mii, original: String, second: u64, until: Until) -> Served {
        let sent = now_micros();
        let body = parameters(&self.namespace, &original, 0);
        let reply = mii.post("/$pseudonymize-multiple", &body, until).await;
        let answered = now_micros();
        // 404: an erased original, or lost writes (the checker tells which).
        let served = mii.judge(Operation::Mii, second, &reply, &[404]);
        let found = found_of(&reply);
        if matches!(found, Found::Pseudonyms(_)) {
            self.with(|s| s.read_answered = true);
        }
        mii.log.multi(&self.namespace, |h| {
            h.read(MultiRead {
                second,
                sent_micros: sent,
                answered_micros: answered,
                original,
                found,
            })
        });
        served
    }

    /// `$de-pseudonymize` of an acknowledged pseudonym of `original`.
    async fn resolve(
        &self,
        mii: &Mii,
        (original, pseudonym): (String, String),
        second: u64,
        until: Until,
    ) -> Served {
        let sent = now_micros();
        let body = fhir::parameters(&[("context", &self.namespace), ("pseudonym", &pseudonym)]);
        let reply = mii.post("/$de-pseudonymize", &body, until).await;
        let answered = now_micros();
        // 404: an erased original, or a lost write (the checker tells which).
        let served = mii.judge(Operation::Mii, second, &reply, &[404]);
        let resolved = match &reply {
            Reply::Status(200, body) => match fhir::original_of(body) {
                Some(o) => Resolved::Original(o.to_owned()),
                None => Resolved::NoAnswer("200 without an original".into()),
            },
            Reply::Status(404, _) => Resolved::NotFound,
            other => Resolved::NoAnswer(answer_of(other)),
        };
        mii.log.multi(&self.namespace, |h| {
            h.resolved(MultiResolve {
                second,
                sent_micros: sent,
                answered_micros: answered,
                original,
                pseudonym,
                resolved,
            })
        });
        served
    }

    /// Whether the run's guard still needs multi calls (a create
    /// acknowledged, a `count` 0 answered): the MII workload sends its
    /// calls here first until then.
    pub fn owes_calls(&self) -> bool {
        self.with(|s| s.owes_calls()).unwrap_or(false)
    }

    /// Whether the run's guard still needs an erasure of a multi original
    /// acknowledged: the MII workload's erasures come here first until then.
    pub fn owes_erasure(&self) -> bool {
        self.with(|s| !s.erasure_acknowledged).unwrap_or(false)
    }

    /// One erasure of an acknowledged multi original, the kinds in turn, or
    /// `None` when there is none to erase within [`ERASED_SHARE`].
    pub async fn erase(&self, mii: &Mii, second: u64, until: Until) -> Option<Served> {
        let (turn, original) = self.with(|s| {
            if !s.may_erase() {
                return None;
            }
            s.erase_turn += 1;
            let i = s.rng.random_range(0..s.originals.len());
            let pair = s.originals.swap_remove(i);
            s.taken += 1;
            let original = pair.0.clone();
            if s.erased.len() < ERASED {
                s.erased.push(pair);
            } else {
                let j = s.rng.random_range(0..s.erased.len());
                s.erased[j] = pair;
            }
            Some((s.erase_turn, original))
        })??;
        let kind = if turn.is_multiple_of(2) {
            ErasureKind::Anonymize
        } else {
            ErasureKind::Delete
        };
        let path = match kind {
            ErasureKind::Delete => "/$delete-pseudonym",
            ErasureKind::Anonymize => "/$anonymize-original",
        };
        let body = fhir::parameters(&[("context", &self.namespace), ("original", &original)]);
        let sent = now_micros();
        let (reply, unavailable_before) = mii.post_tracked(path, &body, until).await;
        let answered = now_micros();
        let served = mii.judge(Operation::Erase, second, &reply, &[]);
        let erasure = match meaning(&reply) {
            Meaning::Refused if unavailable_before => Meaning::Unknown,
            m => m,
        };
        if erasure == Meaning::Acknowledged {
            self.with(|s| s.erasure_acknowledged = true);
        }
        mii.log.multi(&self.namespace, |h| {
            h.erased(MultiErasure {
                second,
                kind,
                original,
                sent_micros: sent,
                answered_micros: answered,
                // A 404 after a 503: the earlier attempt may have erased it.
                meaning: erasure,
                answer: answer_of(&reply),
            })
        });
        Some(served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            rng: StdRng::seed_from_u64(1),
            originals: Vec::new(),
            acknowledged: 0,
            taken: 0,
            erased: Vec::new(),
            turn: 0,
            erased_turn: 0,
            erase_turn: 0,
            read_answered: false,
            erasure_acknowledged: false,
        }
    }

    /// `repeat-scenario.sh db-double-failover 1` failed its guard: one
    /// erasure in five went to a multi original, and only once three were
    /// acknowledged, which a 60 s window under a double failover did not
    /// reach. What the guard needs now comes first.
    #[test]
    fn what_the_guard_needs_is_scheduled_first() {
        let mut s = state();
        assert!(s.owes_calls() && !s.may_erase(), "nothing to erase yet");
        s.originals.push(("o".into(), "p".into()));
        s.acknowledged = 1;
        assert!(
            s.may_erase(),
            "the first acknowledged original may be erased at once"
        );
        assert!(s.owes_calls(), "a count 0 is still owed");
        s.read_answered = true;
        assert!(!s.owes_calls());
        s.erasure_acknowledged = true;
        assert!(!s.may_erase(), "then within the share: one in three");
        s.acknowledged = 3;
        assert!(s.may_erase());
    }

    #[test]
    fn the_pseudonyms_of_an_answer_are_read_back() {
        let answer = json!({"resourceType": "Parameters", "parameter": [
            {"name": "pseudonym", "part": [
                {"name": "context", "valueIdentifier": {"value": "ns"}},
                {"name": "original", "valueIdentifier": {"value": "o1"}},
                {"name": "value", "valueIdentifier": {"value": "p1"}}]},
            {"name": "pseudonym", "part": [
                {"name": "value", "valueString": "p2"}]}]});
        assert_eq!(
            pseudonyms_of(&answer),
            Some(vec!["p1".to_owned(), "p2".to_owned()])
        );
        assert_eq!(
            found_of(&Reply::Status(200, answer)),
            Found::Pseudonyms(vec!["p1".into(), "p2".into()])
        );
        let malformed = json!({"parameter": [{"name": "pseudonym", "part": []}]});
        assert_eq!(pseudonyms_of(&malformed), None);
        assert_eq!(found_of(&Reply::Status(404, Value::Null)), Found::NotFound);
        assert!(matches!(
            found_of(&Reply::Status(503, Value::Null)),
            Found::NoAnswer(_)
        ));
        let asked = parameters("ns-multi", "o1", 3);
        assert_eq!(fhir::value_of(&asked, "original"), Some("o1"));
        assert_eq!(asked["parameter"][2]["valueInteger"], 3);
    }
}
