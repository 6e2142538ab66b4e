//! Pseudonyms made together (a FHIR transaction Bundle's): every new one
//! stored, or none (see `vfps_store::erasure::Erase::insert_together`).

use std::{collections::HashMap, sync::Arc, time::Instant};

use vfps_core::{
    now_micros, Error, ErrorKind, Namespace, NamespaceName, OriginalValue, Pseudonym,
    PseudonymValue,
};
use vfps_store::{Candidate, Lookup};

use super::{Pseudonymized, Service, MAX_COLLISIONS};

/// `error`, saying which item it is about.
fn at(i: usize, e: Error) -> Error {
    Error::new(e.kind, format!("item {i}: {}", e.message))
}

impl Service {
    /// The pseudonym of every `(namespace, original)`, made where there is
    /// none (`made`: the first item of an original made here); the new ones
    /// are stored together, all or none. An error about one item names its
    /// position (`item i: …`); nothing is stored then.
    pub async fn create_together(
        &self,
        items: &[(String, String)],
        deadline: Instant,
    ) -> Result<Vec<Pseudonymized>, Error> {
        self.interactive.touch();
        let parsed = items
            .iter()
            .enumerate()
            .map(|(i, (n, o))| {
                Ok((
                    NamespaceName::parse(n).map_err(|e| at(i, e))?,
                    OriginalValue::parse(o).map_err(|e| at(i, e))?,
                ))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        // The pseudonym chosen for each new original, kept across attempts
        // unless it turned out to be taken.
        let mut chosen: HashMap<(&NamespaceName, &OriginalValue), String> = HashMap::new();
        // Each attempt chooses anew only the pseudonyms found taken, so a
        // crowded namespace needs more of them than one Create does.
        for _ in 0..=4 * MAX_COLLISIONS {
            let mut spaces: HashMap<&NamespaceName, Arc<Namespace>> = HashMap::new();
            for (i, (name, _)) in parsed.iter().enumerate() {
                if !spaces.contains_key(name) {
                    let ns = self
                        .read_namespace(name, deadline)
                        .await
                        .map_err(|e| at(i, e))?;
                    super::multi::single_only(&ns).map_err(|e| at(i, e))?;
                    spaces.insert(name, ns);
                }
            }
            // How each original is kept (its blind index in a sealed
            // namespace).
            let mut kept: HashMap<(&NamespaceName, &OriginalValue), vfps_keys::Stored> =
                HashMap::new();
            for (name, original) in &parsed {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    kept.entry((name, original))
                {
                    slot.insert(
                        self.stored_original(&spaces[name], original, deadline)
                            .await?,
                    );
                }
            }
            let mut answers: Vec<Option<Pseudonym>> = Vec::with_capacity(parsed.len());
            for (name, original) in &parsed {
                let found = self
                    .find_stored(name, &kept[&(name, original)], deadline)
                    .await?;
                // The caller's original, not the row's index.
                answers.push(found.map(|mut p| {
                    p.original_value = original.as_str().to_owned();
                    p.original_sealed = None;
                    p
                }));
            }
            // The new pseudonyms are made in a random order, not the
            // entries': a method that carries its making order (UUIDv7)
            // would otherwise carry the originals' order (docs/privacy.md).
            let mut seen = std::collections::HashSet::new();
            let mut making: Vec<(&NamespaceName, &OriginalValue)> = parsed
                .iter()
                .zip(&answers)
                .filter(|(key, answer)| answer.is_none() && !chosen.contains_key(&(&key.0, &key.1)))
                .map(|((name, original), _)| (name, original))
                .filter(|key| seen.insert(*key))
                .collect();
            // The self-test mode makes them in the entries' order.
            if !vfps_core::generate::revealing() {
                rand::seq::SliceRandom::shuffle(making.as_mut_slice(), &mut rand::rng());
            }
            for (name, original) in making {
                let made = kept[&(name, original)].generate(&spaces[name].settings, original)?;
                chosen.insert((name, original), made);
            }
            // One time for all of them, for the same reason.
            let created_at = now_micros();
            // One candidate per new original (an original twice gets one),
            // no pseudonym twice among them.
            let mut candidates: Vec<Candidate> = Vec::new();
            let mut candidate_of: HashMap<(&NamespaceName, &OriginalValue), usize> = HashMap::new();
            let mut taken: std::collections::HashSet<(&NamespaceName, String)> =
                std::collections::HashSet::new();
            for ((name, original), answer) in parsed.iter().zip(&answers) {
                if answer.is_some() || candidate_of.contains_key(&(name, original)) {
                    continue;
                }
                let ns = &spaces[name];
                let stored = &kept[&(name, original)];
                let mut pseudonym = match chosen.remove(&(name, original)) {
                    Some(p) => p,
                    None => stored.generate(&ns.settings, original)?,
                };
                for _ in 0..MAX_COLLISIONS {
                    if !taken.contains(&(name, pseudonym.clone())) {
                        break;
                    }
                    pseudonym = stored.generate(&ns.settings, original)?;
                }
                taken.insert((name, pseudonym.clone()));
                chosen.insert((name, original), pseudonym.clone());
                candidate_of.insert((name, original), candidates.len());
                candidates.push(Candidate {
                    namespace: name.clone(),
                    namespace_uid: ns.uid,
                    original: stored.key.clone(),
                    sealed: stored.seal(&pseudonym, original)?,
                    moving: stored.moving,
                    pseudonym,
                    created_at: if vfps_core::generate::revealing() {
                        now_micros()
                    } else {
                        created_at
                    },
                });
            }
            let stored = candidates.is_empty()
                || self
                    .retry("insert_together", deadline, || {
                        self.store.insert_together(&candidates)
                    })
                    .await?;
            if stored {
                let mut answered = std::collections::HashSet::new();
                return Ok(parsed
                    .iter()
                    .zip(answers)
                    .map(|((name, original), answer)| match answer {
                        Some(pseudonym) => Pseudonymized {
                            pseudonym,
                            made: false,
                        },
                        None => {
                            let c = &candidates[candidate_of[&(name, original)]];
                            Pseudonymized {
                                pseudonym: Pseudonym {
                                    namespace: name.clone(),
                                    original_value: original.as_str().to_owned(),
                                    pseudonym_value: c.pseudonym.clone(),
                                    created_at: c.created_at,
                                    last_updated_at: c.created_at,
                                    original_sealed: None,
                                },
                                made: answered.insert((name, original)),
                            }
                        }
                    })
                    .collect());
            }
            // A pseudonym taken, an original made meanwhile, or a namespace
            // replaced: the taken pseudonyms are chosen anew, the rest kept,
            // everything else read again.
            self.metrics.pseudonym_collision();
            let lookups: Vec<Lookup> = candidates
                .iter()
                .filter_map(|c| {
                    Some(Lookup {
                        namespace: c.namespace.clone(),
                        pseudonym_value: PseudonymValue::parse(&c.pseudonym).ok()?,
                    })
                })
                .collect();
            let found = self
                .retry("get_pseudonyms", deadline, || {
                    self.store.get_pseudonyms(&lookups)
                })
                .await?;
            let mut any_taken = false;
            for (lookup, row) in lookups.iter().zip(found) {
                if row.is_some() {
                    any_taken = true;
                    chosen.retain(|(name, _), p| {
                        !(**name == lookup.namespace && p == lookup.pseudonym_value.as_str())
                    });
                }
            }
            if !any_taken {
                // Taken by an entry no lookup shows (an anonymized one):
                // every new original gets a new pseudonym.
                chosen.clear();
            }
            for name in spaces.keys() {
                self.forget_namespace(name);
            }
        }
        Err(Error::new(
            ErrorKind::ResourceExhausted,
            "the new pseudonyms could not be stored together (pseudonyms taken again and again); try again",
        ))
    }
}
