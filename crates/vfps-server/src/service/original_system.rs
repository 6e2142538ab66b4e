//! The identity of an original: a namespace holds the values of one
//! identifier system (docs/fhir.md, "Whose originals").
//!
//! An MII `original` is an `Identifier`: a system and a value. Two systems
//! may issue the same value to two people (a patient number of one hospital,
//! a sample number of a laboratory), so a value alone is not a subject. Each
//! namespace therefore belongs to one system: declared when it is made, or
//! adopted once by the first pseudonymization that names one, never changed
//! after. An original of another system is refused, naming both; a value
//! given without a system (gRPC, REST, CSV jobs, the UI, `valueString`) is
//! taken to be of the namespace's. Namespaces made before keep their entries
//! and pseudonyms: the first system named adopts them.

use std::time::Instant;

use vfps_core::{Error, NamespaceName, OriginalSystem};

use super::Service;

/// Whether a check may declare the system of a namespace that has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// A pseudonymization: the first system named becomes the namespace's.
    Yes,
    /// A lookup or an erasure: checked against a declared system only.
    No,
}

impl Service {
    /// Checks that an original given in `given` (its `system`, if it named
    /// one) belongs in `namespace`, adopting it as [`Adopt`] says; answers
    /// the namespace's system after. `INVALID_ARGUMENT` naming both systems
    /// when it does not belong; `NOT_FOUND` without the namespace.
    pub async fn original_system(
        &self,
        namespace: &str,
        given: Option<&str>,
        adopt: Adopt,
        deadline: Instant,
    ) -> Result<Option<String>, Error> {
        let name = NamespaceName::parse(namespace)?;
        let mut ns = self.namespace_for_create(&name, deadline).await?;
        let Some(given) = given else {
            return Ok(ns.settings.original_system.clone());
        };
        let given = OriginalSystem::parse(given).map_err(|e| {
            Error::invalid_argument(format!("the original's system: {}", e.message))
        })?;
        // A cached namespace may be another replica's adoption (or another
        // incarnation) behind: what is not plainly its own is read again.
        if ns.settings.original_system.as_deref() != Some(given.as_str()) {
            ns = self.read_namespace(&name, deadline).await?;
        }
        if ns.settings.original_system.is_none() && adopt == Adopt::Yes {
            let adopted = self
                .retry("adopt_original_system", deadline, || {
                    self.store.adopt_original_system(&name, ns.uid, &given)
                })
                .await?;
            let Some(adopted) = adopted else {
                self.forget_namespace(&name);
                return Err(Error::not_found(format!("namespace {name} not found")));
            };
            if adopted.settings.original_system.as_deref() == Some(given.as_str()) {
                tracing::info!(namespace = %name, system = given.as_str(), "namespace adopted the identifier system of its originals");
            }
            ns = std::sync::Arc::new(adopted);
            self.namespaces
                .insert(name.clone(), ns.clone(), Instant::now());
        }
        match &ns.settings.original_system {
            Some(own) if own != given.as_str() => Err(Error::invalid_argument(format!(
                "namespace {name} holds originals of the identifier system {own}; this original \
                 is of {}: equal values of two systems are not one subject, so they are never \
                 given one pseudonym (use a namespace of its own for each system)",
                given.as_str()
            ))),
            own => Ok(own.clone()),
        }
    }
}
