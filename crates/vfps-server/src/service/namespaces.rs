//! Namespaces: made, read, counted, listed and deleted, each call safe to
//! retry after an attempt whose commit lost its answer.

use std::time::Instant;

use vfps_core::{
    now_micros, storable, Error, ErrorKind, GenerationMethod, Namespace, NamespaceName,
    NamespaceSettings, NamespaceUid, MAX_DESCRIPTION_BYTES,
};

use super::{CommitUnknown, Service};

/// A request to create a namespace, as it comes off the wire.
#[derive(Debug, Clone, Default)]
pub struct NewNamespace {
    pub name: String,
    pub method: i32,
    pub length: u32,
    pub prefix: Option<String>,
    pub suffix: Option<String>,
    pub description: String,
    /// Whether an original's entry may be deleted later.
    pub deletable: bool,
    /// Whether an original may have many pseudonyms (a multi-pseudonym
    /// namespace).
    pub multi: bool,
    /// The identifier system of its originals, if declared now (see
    /// `service/original_system.rs`).
    pub original_system: Option<String>,
}

impl Service {
    pub async fn create_namespace(
        &self,
        req: NewNamespace,
        deadline: Instant,
    ) -> Result<Namespace, Error> {
        let name = NamespaceName::parse(&req.name)?;
        let method = GenerationMethod::from_wire(req.method).ok_or_else(|| {
            Error::invalid_argument(format!(
                "unknown pseudonym generation method {}",
                req.method
            ))
        })?;
        let settings = NamespaceSettings::parse(method, req.length, req.prefix, req.suffix)?
            .with_deletion(req.deletable)
            .with_multi(req.multi)?
            .with_original_system(
                req.original_system
                    .as_deref()
                    .map(vfps_core::OriginalSystem::parse)
                    .transpose()?,
            )
            .with_sealed(self.keys.is_some());
        if method.is_keyed() && self.keys.is_none() {
            return Err(Error::failed_precondition(format!(
                "{} keys each pseudonym with a key held apart from the database, and this \
                 server has no key source: set VFPS_KEYS (docs/privacy.md)",
                method.wire_name()
            )));
        }
        storable("description", &req.description)?;
        if req.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(Error::invalid_argument(format!(
                "description is {} bytes long, at most {MAX_DESCRIPTION_BYTES} are allowed",
                req.description.len()
            )));
        }
        let now = now_micros();
        let ns = Namespace {
            name,
            uid: NamespaceUid::random(),
            description: req.description,
            settings,
            created_at: now,
            last_updated_at: now,
        };
        let unknown = CommitUnknown::default();
        let created = self
            .retry("create_namespace", deadline, || {
                unknown.watch(self.store.create_namespace(&ns))
            })
            .await;
        match created {
            Ok(()) => {}
            // An earlier attempt may have committed and lost its answer (a
            // connection broken in a failover): its own row is no conflict.
            // The uid is this call's alone. If the row cannot be read, the
            // conflict stands.
            Err(e) if e.kind == ErrorKind::AlreadyExists && unknown.get() => {
                let stored = self
                    .retry("get_namespace", deadline, || {
                        self.store.get_namespace(&ns.name)
                    })
                    .await;
                if !matches!(stored, Ok(Some(s)) if s.uid == ns.uid) {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
        tracing::info!(namespace = %ns.name, method = ns.settings.method.wire_name(), "namespace created");
        if let Some(reveals) = ns.settings.method.reveals() {
            tracing::warn!(namespace = %ns.name, method = ns.settings.method.wire_name(), "{reveals}");
        }
        Ok(ns)
    }

    /// How many entries (pseudonyms) `name` holds; 0 when it does not exist.
    pub async fn pseudonym_count(&self, name: &str, deadline: Instant) -> Result<u64, Error> {
        let name = NamespaceName::parse(name)?;
        let counts = self
            .retry("count_created", deadline, || {
                self.store.count_created(Some(&name), None, None)
            })
            .await?;
        Ok(counts.iter().map(|c| c.count.max(0) as u64).sum())
    }

    pub async fn get_namespace(&self, name: &str, deadline: Instant) -> Result<Namespace, Error> {
        let name = NamespaceName::parse(name)?;
        self.retry("get_namespace", deadline, || {
            self.store.get_namespace(&name)
        })
        .await?
        .ok_or_else(|| Error::not_found(format!("namespace {name} not found")))
    }

    pub async fn list_namespaces(&self, deadline: Instant) -> Result<Vec<Namespace>, Error> {
        self.retry("list_namespaces", deadline, || self.store.list_namespaces())
            .await
    }

    /// Deletes a namespace. With caches on, the answer waits the store's settle
    /// delay after the commit: by then no replica serves the namespace from a
    /// cache any more (see `vfps_store::coherence`). Every replica must therefore
    /// have the same caching settings.
    pub async fn delete_namespace(&self, name: &str, deadline: Instant) -> Result<(), Error> {
        let name = NamespaceName::parse(name)?;
        // The incarnation to delete, so that a retry after an attempt that
        // committed but lost its answer (a connection broken in a failover)
        // knows the namespace it was asked to delete is gone, and says so.
        let target = self
            .retry("get_namespace", deadline, || {
                self.store.get_namespace(&name)
            })
            .await?;
        let deleted = match target {
            // Still through the store's delete, whose "not found" waits for the
            // synchronous standby: a delete committed on the primary alone (its
            // wait cancelled) must not be answered as done by this one.
            None => {
                self.retry("delete_namespace", deadline, || {
                    self.store.delete_namespace(&name, None)
                })
                .await?
            }
            Some(ns) => {
                let unknown = CommitUnknown::default();
                let gone = self
                    .retry("delete_namespace", deadline, || {
                        unknown.watch(self.store.delete_namespace(&name, Some(ns.uid)))
                    })
                    .await?;
                // Not deleted by this attempt, but perhaps by an earlier one of
                // this call whose outcome is unknown (or, in the same moment, by
                // another caller: that incarnation is gone either way).
                gone || unknown.get()
            }
        };
        self.forget(&name);
        if self.caches() {
            // Also after "not found": an earlier, interrupted attempt may have
            // committed the delete moments ago.
            tokio::time::sleep(self.store.coherence().settle_delay()).await;
        }
        if !deleted {
            return Err(Error::not_found(format!("namespace {name} not found")));
        }
        tracing::info!(namespace = %name, "namespace deleted with all its pseudonyms");
        Ok(())
    }
}
