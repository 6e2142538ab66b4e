//! Answers for a batch's cells from the store, in one round trip where it can:
//! one multi-row upsert (pseudonymizing) or one multi-row lookup
//! (de-pseudonymizing) for every namespace of the job at once.
//!
//! Jobs share a bounded number of database slots (a semaphore over the whole
//! process), so however many jobs run, the API's Creates keep the rest of the
//! pool and the coalescer's workers.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use tokio::sync::Semaphore;
use vfps_core::{now_micros, Error, ErrorKind, Namespace, OriginalValue, PseudonymValue};
use vfps_store::{Candidate, Lookup, Store, Upserted};

use crate::spec::Direction;

/// How often a freshly generated pseudonym may collide before giving up (as
/// the API's Create).
const MAX_COLLISIONS: u32 = 16;

/// How often a batch is made again for namespaces whose originals started
/// or ended a move meanwhile.
const MAX_RESTARTS: u32 = 4;

/// Why a batch could not be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The database could not answer now: try again.
    Transient(Error),
    /// Request `index`'s value cannot be pseudonymized (too long, a NUL).
    Value { index: usize, reason: String },
    /// The job cannot go on.
    Fatal(String),
    /// A namespace keeps its originals otherwise than the batch was made
    /// for: made again.
    Restart,
}

impl From<Error> for ResolveError {
    fn from(e: Error) -> Self {
        if e.is_transient() {
            Self::Transient(e)
        } else {
            Self::Fatal(e.message)
        }
    }
}

/// A job's namespaces and its share of the database.
pub struct Resolver {
    store: Arc<dyn Store>,
    /// By slot, as the job found them when it started: a namespace deleted or
    /// created anew since fails the job (its earlier rows were answered by the
    /// one that is gone); one whose originals started or ended a move
    /// between plain and sealed is read anew.
    namespaces: std::sync::Mutex<Vec<Arc<Namespace>>>,
    direction: Direction,
    slots: Arc<Semaphore>,
    /// Whether the job's last batch was all new originals: the next one is
    /// then written with the store's cheaper insert of new rows first
    /// ([`vfps_store::Upsert::insert_new_pseudonyms`]), else upserted. A job's
    /// rows are mostly new, or mostly known when a file is pseudonymized
    /// again; either way the next batch is most likely as the last.
    fresh: AtomicBool,
    /// The namespaces' keys (`VFPS_KEYS`): a sealed namespace's originals
    /// are written and found by their blind index (docs/privacy.md).
    keys: Option<Arc<vfps_keys::Keyring>>,
}

impl Resolver {
    pub fn new(
        store: Arc<dyn Store>,
        namespaces: Vec<Arc<Namespace>>,
        direction: Direction,
        slots: Arc<Semaphore>,
        keys: Option<Arc<vfps_keys::Keyring>>,
    ) -> Self {
        Self {
            store,
            namespaces: std::sync::Mutex::new(namespaces),
            direction,
            slots,
            fresh: AtomicBool::new(true),
            keys,
        }
    }

    /// The answer to each request `(slot, value)`, in order; `None` where a
    /// pseudonym is unknown.
    pub async fn answer(
        &self,
        requests: &[(usize, String)],
    ) -> Result<Vec<Option<String>>, ResolveError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        match self.direction {
            Direction::Pseudonymize => self.pseudonymize(requests).await,
            Direction::Depseudonymize => self.depseudonymize(requests).await,
        }
    }

    /// [`Resolver::pseudonymize_once`] again when a namespace's rows
    /// started or ended a move between plain and sealed meanwhile (its
    /// writes of the old form were refused; it is read anew).
    async fn pseudonymize(
        &self,
        requests: &[(usize, String)],
    ) -> Result<Vec<Option<String>>, ResolveError> {
        let mut attempts = 0;
        loop {
            match self.pseudonymize_once(requests).await {
                Err(ResolveError::Restart) if attempts < MAX_RESTARTS => attempts += 1,
                Err(ResolveError::Restart) => {
                    return Err(ResolveError::Transient(Error::unavailable(
                        "a namespace's originals are being moved between plain and sealed",
                    )))
                }
                other => return other,
            }
        }
    }

    async fn pseudonymize_once(
        &self,
        requests: &[(usize, String)],
    ) -> Result<Vec<Option<String>>, ResolveError> {
        let namespaces = self.namespaces();
        let mut originals = Vec::with_capacity(requests.len());
        for (index, (_, value)) in requests.iter().enumerate() {
            let original = OriginalValue::parse(value).map_err(|e| ResolveError::Value {
                index,
                reason: e.message,
            })?;
            originals.push(original);
        }
        // How each is kept: its blind index in a sealed namespace.
        // Each namespace's keys once for the batch.
        let mut keepers: Vec<Option<vfps_keys::keyring::Keeper>> = vec![None; namespaces.len()];
        let mut kept = Vec::with_capacity(requests.len());
        for (i, original) in originals.iter().enumerate() {
            let n = requests[i].0;
            if keepers[n].is_none() {
                let ns = &namespaces[n];
                keepers[n] = Some(vfps_keys::keyring::keeper(self.keys.as_deref(), ns).await?);
            }
            if let Some(keeper) = &keepers[n] {
                kept.push(keeper.keep(original)?);
            }
        }
        // Sorted by (namespace, kept original), as the API's batches:
        // concurrent upserts lock rows in one order and cannot deadlock
        // each other.
        let mut order: Vec<usize> = (0..requests.len()).collect();
        order.sort_by(|&a, &b| {
            let ka = (
                namespaces[requests[a].0].name.as_str(),
                kept[a].key.as_str(),
            );
            let kb = (
                namespaces[requests[b].0].name.as_str(),
                kept[b].key.as_str(),
            );
            ka.cmp(&kb)
        });
        // One candidate per (namespace, original): a value repeated within
        // the batch is answered by its first request.
        let key = |i: usize| {
            (
                namespaces[requests[i].0].name.as_str(),
                kept[i].key.as_str(),
            )
        };
        let mut first_of = vec![0; requests.len()];
        let mut unique: Vec<usize> = Vec::with_capacity(order.len());
        for &i in &order {
            match unique.last() {
                Some(&u) if key(u) == key(i) => first_of[i] = u,
                _ => {
                    first_of[i] = i;
                    unique.push(i);
                }
            }
        }
        let mut answers: Vec<Option<String>> = vec![None; requests.len()];
        // Rows being moved to the other form: one not moved yet is it.
        let mut todo = Vec::with_capacity(unique.len());
        for i in unique {
            if let Some(also) = &kept[i].also {
                let name = &namespaces[requests[i].0].name;
                if let Some(p) = self.store.find_pseudonym(name, also).await? {
                    answers[i] = Some(p.pseudonym_value);
                    continue;
                }
            }
            todo.push(i);
        }
        let mut rounds = 0;
        while !todo.is_empty() {
            // Locks are taken in the sorted order (no deadlocks), but the
            // pseudonyms are made in a random one: a method that carries its
            // making order (UUIDv7) would otherwise carry the originals' order
            // (docs/privacy.md). One time for the batch, for the same reason.
            let mut making: Vec<usize> = (0..todo.len()).collect();
            if !vfps_core::generate::revealing() {
                rand::seq::SliceRandom::shuffle(making.as_mut_slice(), &mut rand::rng());
            }
            let mut made: Vec<String> = vec![String::new(); todo.len()];
            for k in making {
                let i = todo[k];
                made[k] = kept[i].generate(&namespaces[requests[i].0].settings, &originals[i])?;
            }
            let created_at = now_micros();
            let batch: Vec<Candidate> = todo
                .iter()
                .zip(made)
                .map(|(&i, pseudonym)| {
                    let ns = &namespaces[requests[i].0];
                    Ok(Candidate {
                        namespace: ns.name.clone(),
                        namespace_uid: ns.uid,
                        original: kept[i].key.clone(),
                        sealed: kept[i].seal(&pseudonym, &originals[i])?,
                        moving: kept[i].moving,
                        pseudonym,
                        // The self-test mode stamps each row as it goes.
                        created_at: if vfps_core::generate::revealing() {
                            now_micros()
                        } else {
                            created_at
                        },
                    })
                })
                .collect::<Result<_, Error>>()?;
            let results = {
                let _slot = self
                    .slots
                    .acquire()
                    .await
                    .map_err(|_| ResolveError::Fatal("the job slots are closed".into()))?;
                let fresh = rounds == 0 && self.fresh.load(Ordering::Relaxed);
                if fresh && self.store.insert_new_pseudonyms(&batch).await? {
                    for (&i, c) in todo.iter().zip(batch) {
                        answers[i] = Some(c.pseudonym);
                    }
                    break;
                }
                let results = self.store.upsert_pseudonyms(&batch).await?;
                if rounds == 0 {
                    let all_new = results.iter().zip(&batch).all(
                        |(r, c)| matches!(r, Upserted::Stored(p) if p.pseudonym_value == c.pseudonym),
                    );
                    self.fresh.store(all_new, Ordering::Relaxed);
                }
                results
            };
            let mut conflicts = Vec::new();
            for (&i, result) in todo.iter().zip(results) {
                match result {
                    Upserted::Stored(p) => answers[i] = Some(p.pseudonym_value),
                    Upserted::Conflict => conflicts.push(i),
                }
            }
            if conflicts.is_empty() {
                break;
            }
            // A conflict is a collision, or the namespace is gone or another.
            let slots: Vec<usize> = conflicts.iter().map(|&i| requests[i].0).collect();
            if self.check_namespaces(slots).await? {
                return Err(ResolveError::Restart);
            }
            rounds += 1;
            let deterministic = conflicts
                .iter()
                .any(|&i| namespaces[requests[i].0].settings.method.is_deterministic());
            if rounds >= MAX_COLLISIONS || deterministic {
                return Err(ResolveError::Fatal(format!(
                    "could not generate an unused pseudonym in namespace {}; choose a longer pseudonym length",
                    namespaces[requests[conflicts[0]].0].name
                )));
            }
            todo = conflicts;
        }
        for (i, &first) in first_of.iter().enumerate() {
            if first != i {
                answers[i] = answers[first].clone();
            }
        }
        Ok(answers)
    }

    async fn depseudonymize(
        &self,
        requests: &[(usize, String)],
    ) -> Result<Vec<Option<String>>, ResolveError> {
        let namespaces = self.namespaces();
        // A value that cannot be a pseudonym is unknown, like one that is none.
        let mut lookups = Vec::with_capacity(requests.len());
        let mut positions = Vec::with_capacity(requests.len());
        for (i, (slot, value)) in requests.iter().enumerate() {
            if let Ok(pseudonym_value) = PseudonymValue::parse(value) {
                lookups.push(Lookup {
                    namespace: namespaces[*slot].name.clone(),
                    pseudonym_value,
                });
                positions.push(i);
            }
        }
        let rows = {
            let _slot = self
                .slots
                .acquire()
                .await
                .map_err(|_| ResolveError::Fatal("the job slots are closed".into()))?;
            self.store.get_pseudonyms(&lookups).await?
        };
        let mut answers = vec![None; requests.len()];
        for (i, row) in positions.into_iter().zip(rows) {
            if let Some(p) = row {
                let ns = &namespaces[requests[i].0];
                let p = vfps_keys::keyring::open(self.keys.as_deref(), ns, p).await?;
                answers[i] = Some(p.original_value);
            }
        }
        Ok(answers)
    }

    /// Fails when one of the job's namespaces (by slot) was deleted or created
    /// anew since the job started.
    /// Whether a namespace keeps its originals otherwise now (a move
    /// between plain and sealed started or ended): it is taken as it is now.
    pub async fn check_namespaces(&self, slots: Vec<usize>) -> Result<bool, ResolveError> {
        let mut checked: HashMap<usize, ()> = HashMap::new();
        let mut changed = false;
        for slot in slots {
            if checked.insert(slot, ()).is_some() {
                continue;
            }
            let ns = self.namespaces()[slot].clone();
            let now = self.store.get_namespace(&ns.name).await?;
            match now {
                Some(current) if current.uid == ns.uid => {
                    if current.settings.sealed != ns.settings.sealed
                        || current.settings.moving != ns.settings.moving
                        || current.settings.index_version != ns.settings.index_version
                    {
                        changed = true;
                        if let Ok(mut all) = self.namespaces.lock() {
                            all[slot] = Arc::new(current);
                        }
                    }
                }
                _ => {
                    return Err(ResolveError::Fatal(format!(
                        "namespace {} was deleted while the job ran",
                        ns.name
                    )))
                }
            }
        }
        Ok(changed)
    }

    /// Every namespace of the job, checked.
    pub async fn check_all(&self) -> Result<(), ResolveError> {
        let all = self.namespaces().len();
        self.check_namespaces((0..all).collect()).await.map(|_| ())
    }

    /// The job's namespaces as last read.
    fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default()
    }
}

/// The job's namespaces as they are now, by slot; a missing one is named.
pub async fn load_namespaces(
    store: &dyn Store,
    names: &[vfps_core::NamespaceName],
) -> Result<Vec<Arc<Namespace>>, ResolveError> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match store.get_namespace(name).await {
            Ok(Some(ns)) => out.push(Arc::new(ns)),
            Ok(None) => {
                return Err(ResolveError::Fatal(format!(
                    "namespace {name} does not exist"
                )))
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Err(ResolveError::Fatal(format!(
                    "namespace {name} does not exist"
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}
