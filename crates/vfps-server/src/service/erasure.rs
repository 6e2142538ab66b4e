//! One original's entry: found without making one (`$get-pseudonym`), and
//! erased — deleted where its namespace allows it, or anonymized
//! (`$delete-pseudonym`, `$anonymize-original`; see `vfps_store::erasure`).
//!
//! An erasure is acknowledged once no replica can answer the erased mapping:
//! the store commits it through the synchronous standby and announces it, and
//! with caches on the answer waits the settle delay, as a namespace delete's
//! does (every replica has then seen it or stopped trusting its caches).

use std::time::Instant;

use vfps_core::{Error, NamespaceName, OriginalValue, Pseudonym};
pub use vfps_store::erasure::Erasure;

use super::{CommitUnknown, Service};

impl Service {
    /// The pseudonym of `original` in `namespace`; `NOT_FOUND` when the
    /// namespace or the entry is not there.
    pub async fn find_pseudonym(
        &self,
        namespace: &str,
        original: &str,
        deadline: Instant,
    ) -> Result<Pseudonym, Error> {
        self.interactive.touch();
        let name = NamespaceName::parse(namespace)?;
        let original = OriginalValue::parse(original)?;
        let ns = self.read_namespace(&name, deadline).await?;
        super::multi::single_only(&ns)?;
        let stored = self.stored_original(&ns, &original, deadline).await?;
        let mut found = self
            .find_stored(&name, &stored, deadline)
            .await?
            .ok_or_else(|| {
                Error::not_found(format!(
                    "no pseudonym for this original in namespace {name}"
                ))
            })?;
        // The caller's original, not the row's index.
        found.original_value = original.as_str().to_owned();
        found.original_sealed = None;
        Ok(found)
    }

    /// Erases `original`'s entry in `namespace` (in a multi-pseudonym
    /// namespace, every pseudonym of it). `FAILED_PRECONDITION` when
    /// the namespace does not allow it (deletion off; anonymizing where the
    /// pseudonym is derived from the original, which anyone can recompute);
    /// `NOT_FOUND` when there is no such namespace or entry.
    pub async fn erase(
        &self,
        namespace: &str,
        original: &str,
        how: Erasure,
        deadline: Instant,
    ) -> Result<(), Error> {
        let name = NamespaceName::parse(namespace)?;
        let original = OriginalValue::parse(original)?;
        let ns = self.read_namespace(&name, deadline).await?;
        match how {
            Erasure::Delete if !ns.settings.deletable => {
                return Err(Error::failed_precondition(format!(
                    "namespace {name} does not allow deleting entries (it was not created with \
                     pseudonymDeletionAllowed)"
                )));
            }
            Erasure::Anonymize if ns.settings.method.is_deterministic() => {
                let who = match ns.settings.method.is_keyed() {
                    true => "whoever holds its key",
                    false => "anyone",
                };
                return Err(Error::failed_precondition(format!(
                    "namespace {name} derives each pseudonym from its original ({}): {who} can \
                     recompute the link, so an entry cannot be anonymized",
                    ns.settings.method.wire_name()
                )));
            }
            _ => {}
        }
        let stored = self.stored_original(&ns, &original, deadline).await?;
        let unknown = CommitUnknown::default();
        // While the namespace's rows are being moved, the entry may still
        // be in the other form: both are erased.
        let mut erased = None;
        for key in std::iter::once(&stored.key).chain(stored.also.as_ref()) {
            let this = self
                .retry("erase", deadline, || {
                    unknown.watch(self.store.erase(&name, key, how))
                })
                .await?;
            erased = erased.or(this);
        }
        if let Some(cache) = &self.pseudonyms {
            cache.remove(&(name.clone(), original.clone()));
        }
        if self.caches() {
            // Also when nothing was found: an earlier, interrupted attempt
            // may have committed the erasure moments ago.
            tokio::time::sleep(self.store.coherence().settle_delay()).await;
        }
        // Not erased by this attempt, but perhaps by an earlier one of this
        // call whose outcome is unknown.
        if erased.is_none() && !unknown.get() {
            return Err(Error::not_found(format!(
                "no entry for this original in namespace {name}"
            )));
        }
        tracing::info!(namespace = %name, erasure = ?how, "entry erased");
        Ok(())
    }
}
