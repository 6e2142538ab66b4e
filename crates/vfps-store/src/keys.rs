//! Namespaces' keys as the database keeps them: wrapped by the key source
//! (`vfps-keys`; the database never holds a key it can use), one row a
//! namespace incarnation and key version. Made lazily by the first replica
//! that needs them; a concurrent second writer's keys are not stored, and
//! it reads the first's.

use async_trait::async_trait;
use vfps_core::{Error, NamespaceUid};

/// One key version of a namespace incarnation, wrapped.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredKeys {
    pub uid: NamespaceUid,
    pub version: u32,
    /// The data key (AES-256-GCM), wrapped.
    pub data: Vec<u8>,
    /// The blind index key (HMAC-SHA-256), wrapped.
    pub index: Vec<u8>,
    /// The id of the key that wrapped them.
    pub wrapped_by: String,
}

impl std::fmt::Debug for StoredKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKeys")
            .field("uid", &self.uid)
            .field("version", &self.version)
            .field("wrapped_by", &self.wrapped_by)
            .finish_non_exhaustive()
    }
}

/// Namespaces' wrapped keys, in both stores.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Every key version of the incarnation `uid`, newest first.
    async fn namespace_keys(&self, uid: NamespaceUid) -> Result<Vec<StoredKeys>, Error>;
    /// Stores `keys` unless their version exists: whether these were
    /// stored (`false`: another writer's are there; read those). Durable
    /// like a write.
    async fn put_namespace_keys(&self, keys: &StoredKeys) -> Result<bool, Error>;
}
