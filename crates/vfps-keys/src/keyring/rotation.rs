//! What changes a namespace's keys or its rows' form, online: a new key
//! version and the re-seal under it, a re-index, a move between plain and
//! sealed originals, and rewrapping under another wrapping key
//! (docs/privacy.md, "Rotating keys"). Every row is replaced by
//! compare-and-set, so replicas doing the same at once, Creates and
//! erasures in between, and a stop at any await are safe.

use vfps_core::{Error, Namespace, NamespaceUid, OriginalValue};
use vfps_store::keys::{Rekeyed, Resealed, SealedTable, Which};

use super::{from_stored, to_stored, Keyring, FIRST_VERSION};
use crate::NamespaceKeys;

/// Rows read and re-sealed at once by [`Keyring::reseal`].
const RESEAL_PAGE: usize = 500;

/// How far a re-seal got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resealing {
    /// Originals now sealed under the newest key version.
    pub resealed: u64,
    /// Rows changed by someone else since read (re-sealed by another
    /// replica, erased): left as they are.
    pub skipped: u64,
    /// Rows whose sealed original does not open (altered, or of a key
    /// version no longer stored): left as they are, and counted.
    pub unopened: u64,
}

/// How far a move of a namespace's rows got ([`Keyring::move_rows`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moving {
    /// Rows now of the namespace's form.
    pub moved: u64,
    /// Rows changed by someone else since read: the next pass looks again.
    pub skipped: u64,
    /// Anonymized entries: no original to move.
    pub anonymized: u64,
    /// Sealed rows that open under no stored key version: left.
    pub unopened: u64,
    /// Whether this pass ended the move.
    pub finished: bool,
}

impl Keyring {
    /// Rewraps, under the current source, every stored key version of every
    /// namespace wrapped by a previous one: the keys themselves, and so
    /// every sealed original, stay as they are. Each is replaced only
    /// where it is still as read, so a rewrap may run twice at once or be
    /// stopped at any await and run again. Answers how many were
    /// rewrapped, and how many already were under the current source.
    pub async fn rewrap(&self) -> Result<(usize, usize), Error> {
        let (mut rewrapped, mut already) = (0, 0);
        let current = self.wrap.key_id();
        for ns in self.store.list_namespaces().await? {
            for stored in self.store.namespace_keys(ns.uid).await? {
                if stored.wrapped_by == current {
                    already += 1;
                    continue;
                }
                let wrapped = from_stored(stored.clone());
                let from = self
                    .previous
                    .iter()
                    .find(|w| w.key_id() == wrapped.wrapped_by)
                    .ok_or_else(|| {
                        Error::failed_precondition(format!(
                            "the keys of namespace {} (version {}) are wrapped by key {}, which \
                             neither VFPS_KEYS nor VFPS_KEYS_PREVIOUS holds",
                            ns.name, wrapped.version, wrapped.wrapped_by
                        ))
                    })?;
                let new = wrapped.rewrap(from.as_ref(), self.wrap.as_ref()).await?;
                if self
                    .store
                    .rewrap_namespace_keys(&to_stored(&new), &stored.wrapped_by)
                    .await?
                {
                    rewrapped += 1;
                } else {
                    already += 1;
                }
            }
        }
        Ok((rewrapped, already))
    }

    /// Starts a new key version of `uid` for new seals: every replica takes
    /// it up at its next key refresh, and re-seals the older versions'
    /// originals in the background ([`Keyring::reseal`]). Answers the
    /// version now newest (another rotation's, when one ran at once). The
    /// namespace's index version keeps finding originals, so an original
    /// is stored under the same key, and keeps its pseudonym, whatever
    /// version sealed it; [`Keyring::reindex`] moves the index too.
    pub async fn rotate(&self, uid: NamespaceUid) -> Result<u32, Error> {
        let Some(newest) = self.refresh(uid).await? else {
            return Ok(self.current(uid).await?.version);
        };
        let next = newest
            .checked_add(1)
            .ok_or_else(|| Error::failed_precondition("no key version after 2^32-1"))?;
        let (keys, wrapped) = NamespaceKeys::generate(uid, next, self.wrap.as_ref()).await?;
        if self.store.put_namespace_keys(&to_stored(&wrapped)).await? {
            self.remember(keys);
        }
        Ok(self.refresh(uid).await?.unwrap_or(next))
    }

    /// Starts moving `ns`'s blind indexes to its newest key version (made by
    /// [`Keyring::rotate`]): from the switch on only rows indexed under it
    /// are written, lookups try the old index too, and
    /// [`Keyring::move_rows`] re-indexes every row. Whether it started
    /// (`false`: another move is under way, or the index is that new).
    pub async fn reindex(&self, ns: &Namespace) -> Result<bool, Error> {
        let newest = self.refresh(ns.uid).await?.unwrap_or(FIRST_VERSION);
        self.store.reindex_originals(&ns.name, ns.uid, newest).await
    }

    /// Re-seals, under the newest key version, every original of `ns` sealed
    /// under an older one, a page at a time (both tables). Each row is
    /// replaced only where its ciphertext is still the one read, so other
    /// replicas re-sealing at once, and erasures and Creates in between,
    /// are safe; dropped at any await, what is written stays written and a
    /// later pass goes on from there. `progress` hears after every page.
    pub async fn reseal(
        &self,
        ns: &Namespace,
        mut progress: impl FnMut(&Resealing) + Send,
    ) -> Result<Resealing, Error> {
        let mut done = Resealing::default();
        let Some(newest) = self.refresh(ns.uid).await? else {
            return Ok(done);
        };
        let keys = self.version(ns.uid, newest).await?;
        for table in SealedTable::ALL {
            let mut after: Option<String> = None;
            loop {
                let page = self
                    .store
                    .sealed_rows(
                        &ns.name,
                        table,
                        Which::NotSealedUnder(newest),
                        after.as_deref(),
                        RESEAL_PAGE,
                    )
                    .await?;
                let Some(last) = page.last() else { break };
                after = Some(last.pseudonym.clone());
                let mut rows = Vec::with_capacity(page.len());
                for row in page {
                    match self.open_row(ns, &row.pseudonym, &row.sealed).await {
                        Ok(original) => rows.push(Resealed {
                            new: keys.seal(&row.pseudonym, &original)?,
                            pseudonym: row.pseudonym,
                            old: row.sealed,
                        }),
                        Err(_) => done.unopened += 1,
                    }
                }
                let n = self.store.reseal(&ns.name, table, &rows).await?;
                done.resealed += n;
                done.skipped += rows.len() as u64 - n;
                progress(&done);
            }
        }
        Ok(done)
    }

    /// Moves every row of `ns` to the form its settings say (sealed: the
    /// blind index and the original sealed under the newest key; plain: the
    /// original), a page at a time (both tables), while `ns` is being moved;
    /// once a pass leaves no row of the other form, ends the move. Each row
    /// is replaced only where it is still as read, so other replicas moving
    /// at once, Creates and erasures in between are safe, and a stop at any
    /// await leaves nothing half-done. `progress` hears after every page.
    pub async fn move_rows(
        &self,
        ns: &Namespace,
        mut progress: impl FnMut(&Moving) + Send,
    ) -> Result<Moving, Error> {
        let mut done = Moving::default();
        if !ns.settings.moving {
            return Ok(done);
        }
        let keeper = self.keeper(ns).await?;
        for table in SealedTable::ALL {
            let mut after: Option<String> = None;
            loop {
                let rows = match (ns.settings.sealed, ns.settings.moving_from_index) {
                    // A re-index: the same ciphertext (bound to the row, not
                    // the index), the index under the namespace's version.
                    (true, Some(_)) => {
                        let page = self
                            .store
                            .sealed_rows(
                                &ns.name,
                                table,
                                Which::NotIndexedUnder(ns.settings.index_version),
                                after.as_deref(),
                                RESEAL_PAGE,
                            )
                            .await?;
                        let Some(last) = page.last() else { break };
                        after = Some(last.pseudonym.clone());
                        let mut rows = Vec::with_capacity(page.len());
                        for row in page {
                            match self.open_row(ns, &row.pseudonym, &row.sealed).await {
                                Ok(original) => {
                                    let stored = keeper.keep(&OriginalValue::parse(&original)?)?;
                                    rows.push(Rekeyed {
                                        pseudonym: row.pseudonym,
                                        old_value: row.value,
                                        new_sealed: Some(row.sealed.clone()),
                                        old_sealed: Some(row.sealed),
                                        new_value: stored.key.as_str().to_owned(),
                                    });
                                }
                                Err(_) => done.unopened += 1,
                            }
                        }
                        rows
                    }
                    (true, None) => {
                        let page = self
                            .store
                            .plain_rows(&ns.name, table, after.as_deref(), RESEAL_PAGE)
                            .await?;
                        let Some(last) = page.last() else { break };
                        after = Some(last.pseudonym.clone());
                        let mut rows = Vec::with_capacity(page.len());
                        for row in page {
                            if vfps_core::is_anonymized(&row.original) {
                                done.anonymized += 1;
                                continue;
                            }
                            let original = OriginalValue::parse(&row.original)?;
                            let stored = keeper.keep(&original)?;
                            rows.push(Rekeyed {
                                new_sealed: stored.seal(&row.pseudonym, &original)?,
                                new_value: stored.key.as_str().to_owned(),
                                pseudonym: row.pseudonym,
                                old_value: row.original,
                                old_sealed: None,
                            });
                        }
                        rows
                    }
                    (false, _) => {
                        let page = self
                            .store
                            .sealed_rows(&ns.name, table, Which::All, after.as_deref(), RESEAL_PAGE)
                            .await?;
                        let Some(last) = page.last() else { break };
                        after = Some(last.pseudonym.clone());
                        let mut rows = Vec::with_capacity(page.len());
                        for row in page {
                            match self.open_row(ns, &row.pseudonym, &row.sealed).await {
                                Ok(original) => rows.push(Rekeyed {
                                    pseudonym: row.pseudonym,
                                    old_value: row.value,
                                    old_sealed: Some(row.sealed),
                                    new_value: original,
                                    new_sealed: None,
                                }),
                                Err(_) => done.unopened += 1,
                            }
                        }
                        rows
                    }
                };
                let n = self.store.rekey(&ns.name, table, &rows).await?;
                done.moved += n;
                done.skipped += rows.len() as u64 - n;
                progress(&done);
            }
        }
        // Whatever was skipped (changed meanwhile) or did not open is
        // looked at by the next pass; without it, the move is over.
        if done.skipped == 0 && done.unopened == 0 {
            done.finished = self
                .store
                .moved(&ns.name, ns.uid, ns.settings.sealed)
                .await?;
        }
        Ok(done)
    }

    /// The original `sealed` holds for the row of `pseudonym` in `ns`.
    async fn open_row(
        &self,
        ns: &Namespace,
        pseudonym: &str,
        sealed: &[u8],
    ) -> Result<String, Error> {
        let version = NamespaceKeys::sealed_version(sealed)
            .ok_or_else(|| Error::internal("a sealed original of an unknown format"))?;
        self.version(ns.uid, version).await?.open(pseudonym, sealed)
    }
}
