//! Multi-pseudonym namespaces (see `vfps_store::multi`): an original has as
//! many pseudonyms as were asked for (`$pseudonymize-multiple`), and the
//! single-pseudonym calls (Create, `$pseudonymize`, `$get-pseudonym`, a CSV
//! pseudonymization job) are refused there, as `$pseudonymize-multiple` is
//! on a single-pseudonym namespace: which one pseudonym would they answer?

use std::{collections::HashSet, time::Instant};

use vfps_core::{
    generate::generate, now_micros, Error, ErrorKind, Namespace, NamespaceName, OriginalValue,
    Pseudonym, PseudonymValue,
};
use vfps_store::Lookup;

use super::{CommitUnknown, Service, MAX_COLLISIONS};

pub use vfps_core::{MAX_NEW_PSEUDONYMS, MAX_PSEUDONYMS_PER_ORIGINAL};
/// Most pseudonyms one `count` 0 answers.
pub const MAX_ANSWERED: u32 = MAX_PSEUDONYMS_PER_ORIGINAL + MAX_NEW_PSEUDONYMS;

/// `FAILED_PRECONDITION` unless `ns` is a single-pseudonym namespace.
pub fn single_only(ns: &Namespace) -> Result<(), Error> {
    if ns.settings.multi {
        return Err(Error::failed_precondition(format!(
            "namespace {} is a multi-pseudonym namespace: an original has many pseudonyms \
             there, so none is the one to answer; use $pseudonymize-multiple",
            ns.name
        )));
    }
    Ok(())
}

/// `FAILED_PRECONDITION` unless `ns` is a multi-pseudonym namespace.
pub fn multi_only(ns: &Namespace) -> Result<(), Error> {
    if !ns.settings.multi {
        return Err(Error::failed_precondition(format!(
            "namespace {} is a single-pseudonym namespace: an original has one pseudonym \
             there; use $pseudonymize",
            ns.name
        )));
    }
    Ok(())
}

impl Service {
    /// `count = 0`: every pseudonym of `original` (oldest first; `NOT_FOUND`
    /// when it has none). `count = n`: `n` new pseudonyms of it, and only
    /// those. `FAILED_PRECONDITION` in a single-pseudonym namespace.
    pub async fn pseudonymize_multiple(
        &self,
        namespace: &str,
        original: &str,
        count: u32,
        deadline: Instant,
    ) -> Result<Vec<Pseudonym>, Error> {
        self.interactive.touch();
        let name = NamespaceName::parse(namespace)?;
        let original = OriginalValue::parse(original)?;
        if count > MAX_NEW_PSEUDONYMS {
            return Err(Error::invalid_argument(format!(
                "count must be between 0 and {MAX_NEW_PSEUDONYMS}, got {count}"
            )));
        }
        // The caller's original in every row answered, not the row's index.
        let plain = |mut p: Pseudonym| {
            p.original_value = original.as_str().to_owned();
            p.original_sealed = None;
            p
        };
        if count == 0 {
            let ns = self.read_namespace(&name, deadline).await?;
            multi_only(&ns)?;
            let stored = self.stored_original(&ns, &original, deadline).await?;
            let all: Vec<Pseudonym> = self
                .pseudonyms_of(&name, &stored, MAX_ANSWERED + 1, deadline)
                .await?
                .into_iter()
                .map(plain)
                .collect();
            if all.is_empty() {
                return Err(Error::not_found(format!(
                    "no pseudonym for this original in namespace {name}"
                )));
            }
            if all.len() > MAX_ANSWERED as usize {
                return Err(Error::out_of_range(format!(
                    "this original has more than {MAX_ANSWERED} pseudonyms in namespace {name}, \
                     more than one answer carries"
                )));
            }
            return Ok(all);
        }
        let mut ns = self.namespace_for_create(&name, deadline).await?;
        if !ns.settings.multi {
            // A cached namespace may have been replaced by a multi one.
            self.forget_namespace(&name);
            ns = self.read_namespace(&name, deadline).await?;
            multi_only(&ns)?;
        }
        let mut stored = self.stored_original(&ns, &original, deadline).await?;
        let has = self
            .pseudonyms_of(&name, &stored, MAX_PSEUDONYMS_PER_ORIGINAL + 1, deadline)
            .await?
            .len();
        if has + count as usize > MAX_PSEUDONYMS_PER_ORIGINAL as usize {
            return Err(Error::out_of_range(format!(
                "an original may have at most {MAX_PSEUDONYMS_PER_ORIGINAL} pseudonyms in \
                 namespace {name}; this one has {has}, so {count} more are too many"
            )));
        }
        let wanted = count as usize;
        let mut made: Vec<Pseudonym> = Vec::with_capacity(wanted);
        let mut collisions = 0;
        while collisions <= MAX_COLLISIONS {
            // Distinct among themselves; those taken in the store are skipped
            // by it and chosen anew in the next round.
            let mut fresh: HashSet<String> = HashSet::new();
            for _ in 0..(wanted - made.len()) * 2 {
                if fresh.len() == wanted - made.len() {
                    break;
                }
                fresh.insert(generate(&ns.settings, &original, None)?);
            }
            let fresh: Vec<String> = fresh.into_iter().collect();
            // Each row its own ciphertext (a shared one would link them).
            let sealed: Vec<Vec<u8>> = fresh
                .iter()
                .map(|p| stored.seal(p, &original))
                .collect::<Result<Option<Vec<_>>, _>>()?
                .unwrap_or_default();
            let created_at = now_micros();
            let unknown = CommitUnknown::default();
            let mut added = self
                .retry("add_pseudonyms", deadline, || {
                    unknown.watch(self.store.add_pseudonyms(
                        &name,
                        vfps_store::multi::Known {
                            uid: ns.uid,
                            moving: stored.moving,
                        },
                        &stored.key,
                        &fresh,
                        &sealed,
                        created_at,
                    ))
                })
                .await?;
            if added.len() < fresh.len() && unknown.get() {
                // An attempt whose answer was lost may have stored some of
                // them: those are ours (this original, this round's time).
                added = self
                    .ours(&name, &stored.key, &fresh, created_at, deadline)
                    .await?;
            }
            if added.is_empty() {
                // The namespace vanished, is another incarnation or keeps
                // its originals otherwise now (perhaps while cached), or
                // every pseudonym collided.
                self.forget_namespace(&name);
                let current = self.read_namespace(&name, deadline).await?;
                multi_only(&current)?;
                if Self::kept_otherwise(&ns, &current) {
                    ns = current;
                    stored = self.stored_original(&ns, &original, deadline).await?;
                    continue;
                }
            }
            if added.len() < fresh.len() {
                collisions += 1;
                self.metrics.pseudonym_collision();
            }
            made.extend(added.into_iter().map(plain));
            if made.len() == wanted {
                return Ok(made);
            }
        }
        Err(Error::new(
            ErrorKind::ResourceExhausted,
            format!(
                "could not generate {count} unused pseudonyms in namespace {name} ({} made); \
                 choose a longer pseudonym length",
                made.len()
            ),
        ))
    }

    /// The pseudonyms of the original kept as `stored`, oldest first, at
    /// most `limit`: while the namespace's rows are being moved, those of
    /// both forms.
    async fn pseudonyms_of(
        &self,
        name: &NamespaceName,
        stored: &vfps_keys::Stored,
        limit: u32,
        deadline: Instant,
    ) -> Result<Vec<Pseudonym>, Error> {
        let mut all = Vec::new();
        for key in std::iter::once(&stored.key).chain(stored.also.as_ref()) {
            all.extend(
                self.retry("pseudonyms_of", deadline, || {
                    self.store.pseudonyms_of(name, key, limit)
                })
                .await?,
            );
        }
        all.sort_by(|a, b| {
            (a.created_at, &a.pseudonym_value).cmp(&(b.created_at, &b.pseudonym_value))
        });
        all.truncate(limit as usize);
        Ok(all)
    }
    /// Of `asked`, the pseudonyms stored for `original` at `created_at`.
    async fn ours(
        &self,
        name: &NamespaceName,
        original: &OriginalValue,
        asked: &[String],
        created_at: std::time::SystemTime,
        deadline: Instant,
    ) -> Result<Vec<Pseudonym>, Error> {
        let lookups: Vec<Lookup> = asked
            .iter()
            .filter_map(|p| {
                Some(Lookup {
                    namespace: name.clone(),
                    pseudonym_value: PseudonymValue::parse(p).ok()?,
                })
            })
            .collect();
        let found = self
            .retry("get_pseudonyms", deadline, || {
                self.store.get_pseudonyms(&lookups)
            })
            .await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter(|p| p.original_value == original.as_str() && p.created_at == created_at)
            .collect())
    }
}
