//! A process's namespace keys: unwrapped on first use from the database,
//! where the first replica that needs a namespace's keys makes them
//! (another replica's concurrent ones are refused by the store, and it
//! takes the first's), held in this process's memory only.
//!
//! Also what every path that reads or writes originals needs: the form an
//! original is stored in ([`Keyring::stored`]), sealing one for its row,
//! and opening a row read back ([`Keyring::open`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use vfps_core::{Error, Namespace, NamespaceSettings, NamespaceUid, OriginalValue, Pseudonym};
use vfps_store::{keys::StoredKeys, Store};

use crate::{NamespaceKeys, Wrap, WrappedKeys};

mod rotation;

pub use rotation::{Moving, Resealing};

/// The first key version of a namespace.
const FIRST_VERSION: u32 = 1;

/// The keys of this process.
pub struct Keyring {
    /// What wraps new keys.
    wrap: Box<dyn Wrap>,
    /// Sources whose wrapped keys are still opened while they are rewrapped
    /// under `wrap` (`VFPS_KEYS_PREVIOUS`).
    previous: Vec<Box<dyn Wrap>>,
    store: Arc<dyn Store>,
    /// Unwrapped keys by namespace incarnation and version.
    keys: Mutex<HashMap<(i64, u32), Arc<NamespaceKeys>>>,
    /// The newest version known of each incarnation.
    newest: Mutex<HashMap<i64, u32>>,
}

/// How an original is kept in one namespace: as it is (plain), or as its
/// blind index with the keys that seal it.
#[derive(Clone)]
pub struct Stored {
    /// What the store compares: the original, or its blind index.
    pub key: OriginalValue,
    /// The keys that seal it for its row (`None`: a plain namespace).
    pub keys: Option<Arc<NamespaceKeys>>,
    /// The keys whose pseudonym key the keyed method uses (the first
    /// version's; `None` for every other method).
    pub pseudonym: Option<Arc<NamespaceKeys>>,
    /// While the namespace's rows are being moved to the form `key` is in
    /// (`vfps keys encrypt-existing | decrypt-all`): the original in the
    /// other form, which a row not moved yet still holds — looked up first.
    pub also: Option<OriginalValue>,
    /// Whether the namespace was being moved when this was made: what a
    /// write says it knew (the store refuses it when that changed).
    pub moving: bool,
}

impl Stored {
    /// A new pseudonym for `original` in a namespace of `settings`.
    pub fn generate(
        &self,
        settings: &NamespaceSettings,
        original: &OriginalValue,
    ) -> Result<String, Error> {
        let key = self
            .pseudonym
            .as_deref()
            .map(|k| k as &dyn vfps_core::generate::PseudonymKey);
        vfps_core::generate::generate(settings, original, key)
    }

    /// The original sealed for the row of `pseudonym` (`None`: plain).
    pub fn seal(
        &self,
        pseudonym: &str,
        original: &OriginalValue,
    ) -> Result<Option<Vec<u8>>, Error> {
        self.keys
            .as_ref()
            .map(|k| k.seal(pseudonym, original.as_str()))
            .transpose()
    }
}

/// How originals are kept in one namespace: its keys, for many originals.
#[derive(Clone, Default)]
pub struct Keeper {
    /// The newest keys: what new originals are sealed under.
    keys: Option<Arc<NamespaceKeys>>,
    /// The keys of the namespace's index version: their index key finds an
    /// original whatever version sealed it.
    index: Option<Arc<NamespaceKeys>>,
    /// During a re-index: the keys of the index version rows move from.
    from: Option<Arc<NamespaceKeys>>,
    /// The first version's keys: their pseudonym key makes keyed pseudonyms.
    pseudonym: Option<Arc<NamespaceKeys>>,
    /// Whether originals are sealed (`keys` then set).
    sealed: bool,
    /// Whether the namespace's rows are being moved to that form.
    moving: bool,
}

impl Keeper {
    /// How `original` is kept.
    pub fn keep(&self, original: &OriginalValue) -> Result<Stored, Error> {
        let index = |keys: &Option<Arc<NamespaceKeys>>| match keys {
            Some(k) => OriginalValue::parse(&k.index(original.as_str())),
            None => Err(Error::internal(
                "a sealed namespace's keys were not fetched",
            )),
        };
        let (key, also) = match (self.sealed, self.moving, &self.from) {
            (true, false, _) => (index(&self.index)?, None),
            // Re-indexed: the old index; sealed: the plain original.
            (true, true, Some(_)) => (index(&self.index)?, Some(index(&self.from)?)),
            (true, true, None) => (index(&self.index)?, Some(original.clone())),
            (false, true, _) => (original.clone(), Some(index(&self.index)?)),
            (false, false, _) => (original.clone(), None),
        };
        Ok(Stored {
            key,
            keys: self.keys.clone(),
            pseudonym: self.pseudonym.clone(),
            also,
            moving: self.moving,
        })
    }
}

/// [`Keyring::keeper`] where there may be no keyring: a sealed or keyed
/// namespace then cannot be used, and says why.
pub async fn keeper(keyring: Option<&Keyring>, ns: &Namespace) -> Result<Keeper, Error> {
    match keyring {
        Some(k) => k.keeper(ns).await,
        None if ns.settings.sealed || ns.settings.moving || ns.settings.method.is_keyed() => {
            Err(no_keys(ns))
        }
        None => Ok(Keeper::default()),
    }
}

fn to_stored(w: &WrappedKeys) -> StoredKeys {
    StoredKeys {
        uid: w.uid,
        version: w.version,
        data: w.data.clone(),
        index: w.index.clone(),
        wrapped_by: w.wrapped_by.clone(),
    }
}

fn from_stored(s: StoredKeys) -> WrappedKeys {
    WrappedKeys {
        uid: s.uid,
        version: s.version,
        data: s.data,
        index: s.index,
        wrapped_by: s.wrapped_by,
    }
}

impl Keyring {
    pub fn new(wrap: Box<dyn Wrap>, store: Arc<dyn Store>) -> Self {
        Self {
            wrap,
            previous: Vec::new(),
            store,
            keys: Mutex::new(HashMap::new()),
            newest: Mutex::new(HashMap::new()),
        }
    }

    /// Also opens keys wrapped by `previous` (a wrapping key being rotated
    /// away from), until [`Keyring::rewrap`] has rewrapped them.
    pub fn with_previous(mut self, previous: Box<dyn Wrap>) -> Self {
        self.previous.push(previous);
        self
    }

    /// The key source, for people (never a key).
    pub fn describe(&self) -> String {
        let mut said = self.wrap.describe();
        for p in &self.previous {
            said.push_str(&format!(" (and, until rewrapped, {})", p.describe()));
        }
        said
    }

    fn sources(&self) -> Vec<&dyn Wrap> {
        std::iter::once(self.wrap.as_ref())
            .chain(self.previous.iter().map(|w| w.as_ref()))
            .collect()
    }

    fn cached(&self, uid: NamespaceUid, version: u32) -> Option<Arc<NamespaceKeys>> {
        self.keys.lock().ok()?.get(&(uid.0, version)).cloned()
    }

    fn remember(&self, keys: NamespaceKeys) -> Arc<NamespaceKeys> {
        let keys = Arc::new(keys);
        if let Ok(mut m) = self.keys.lock() {
            m.insert((keys.uid.0, keys.version), keys.clone());
        }
        if let Ok(mut n) = self.newest.lock() {
            let v = n.entry(keys.uid.0).or_insert(keys.version);
            *v = (*v).max(keys.version);
        }
        keys
    }

    /// Every stored version of `uid`, unwrapped and remembered; newest first.
    async fn load(&self, uid: NamespaceUid) -> Result<Vec<Arc<NamespaceKeys>>, Error> {
        let stored = self.store.namespace_keys(uid).await?;
        let mut out = Vec::with_capacity(stored.len());
        for s in stored {
            let version = s.version;
            match self.cached(uid, version) {
                Some(k) => out.push(k),
                None => {
                    let k = NamespaceKeys::unwrap_by(&from_stored(s), &self.sources()).await?;
                    out.push(self.remember(k));
                }
            }
        }
        Ok(out)
    }

    /// The newest keys of the incarnation `uid`, made (and stored) when it
    /// has none yet.
    pub async fn current(&self, uid: NamespaceUid) -> Result<Arc<NamespaceKeys>, Error> {
        let newest = self.newest.lock().ok().and_then(|n| n.get(&uid.0).copied());
        if let Some(k) = newest.and_then(|v| self.cached(uid, v)) {
            return Ok(k);
        }
        if let Some(k) = self.load(uid).await?.into_iter().next() {
            return Ok(k);
        }
        let (keys, wrapped) =
            NamespaceKeys::generate(uid, FIRST_VERSION, self.wrap.as_ref()).await?;
        if self.store.put_namespace_keys(&to_stored(&wrapped)).await? {
            return Ok(self.remember(keys));
        }
        // Another replica's came first: theirs.
        self.load(uid)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::unavailable("a namespace's keys were made and are not there yet"))
    }

    /// The keys of version `version` of `uid` (an older row's).
    pub async fn version(
        &self,
        uid: NamespaceUid,
        version: u32,
    ) -> Result<Arc<NamespaceKeys>, Error> {
        if let Some(k) = self.cached(uid, version) {
            return Ok(k);
        }
        self.load(uid)
            .await?
            .into_iter()
            .find(|k| k.version == version)
            .ok_or_else(|| {
                Error::failed_precondition(format!(
                    "key version {version} of namespace uid {} is not in the database",
                    uid.0
                ))
            })
    }

    /// The newest key version of `uid`, read anew from the database and
    /// taken up for new seals (`None`: it has no keys yet).
    pub async fn refresh(&self, uid: NamespaceUid) -> Result<Option<u32>, Error> {
        Ok(self.load(uid).await?.first().map(|k| k.version))
    }

    /// Unwraps the stored keys of every namespace that has any: whether this
    /// key source opens them. Answers how many namespaces' keys it opened;
    /// a key of another source, or one altered, is refused by name
    /// (`FAILED_PRECONDITION`, `INTERNAL`), an unreachable database as
    /// `UNAVAILABLE`.
    pub async fn check(&self) -> Result<usize, Error> {
        let mut opened = 0;
        for ns in self.store.list_namespaces().await? {
            if !ns.settings.sealed && !ns.settings.moving && !ns.settings.method.is_keyed() {
                continue;
            }
            let keys = self.load(ns.uid).await.map_err(|e| {
                Error::new(
                    e.kind,
                    format!("the keys of namespace {}: {}", ns.name, e.message),
                )
            })?;
            opened += usize::from(!keys.is_empty());
        }
        Ok(opened)
    }

    /// The keys of version `version` for blind indexes: the first version's
    /// made when `uid` has none yet.
    async fn index_keys(
        &self,
        uid: NamespaceUid,
        version: u32,
    ) -> Result<Arc<NamespaceKeys>, Error> {
        match version {
            FIRST_VERSION => self.pseudonym_keys(uid).await,
            v => self.version(uid, v).await,
        }
    }

    /// The first version's keys, made when `uid` has none yet: their
    /// pseudonym key makes the keyed method's pseudonyms (and their index
    /// key indexes originals until a re-index).
    pub async fn pseudonym_keys(&self, uid: NamespaceUid) -> Result<Arc<NamespaceKeys>, Error> {
        if let Some(k) = self.cached(uid, FIRST_VERSION) {
            return Ok(k);
        }
        if self.load(uid).await?.is_empty() {
            self.current(uid).await?;
        }
        self.version(uid, FIRST_VERSION).await
    }

    /// How originals are kept in `ns`: its keys, fetched once for a batch.
    pub async fn keeper(&self, ns: &Namespace) -> Result<Keeper, Error> {
        let pseudonym = match ns.settings.method.is_keyed() {
            true => Some(self.pseudonym_keys(ns.uid).await?),
            false => None,
        };
        let keys = match ns.settings.sealed {
            true => Some(self.current(ns.uid).await?),
            false => None,
        };
        // A plain namespace being moved finds its rows still sealed by index.
        let index = match ns.settings.sealed || ns.settings.moving {
            true => Some(self.index_keys(ns.uid, ns.settings.index_version).await?),
            false => None,
        };
        let from = match (ns.settings.moving, ns.settings.moving_from_index) {
            (true, Some(v)) => Some(self.index_keys(ns.uid, v).await?),
            _ => None,
        };
        Ok(Keeper {
            keys,
            index,
            from,
            pseudonym,
            sealed: ns.settings.sealed,
            moving: ns.settings.moving,
        })
    }

    /// How `original` is kept in `ns`.
    pub async fn stored(&self, ns: &Namespace, original: &OriginalValue) -> Result<Stored, Error> {
        self.keeper(ns).await?.keep(original)
    }

    /// `p`, a row of `ns` as the store read it, with its original opened
    /// (a plain row is left as it is).
    pub async fn open(&self, ns: &Namespace, mut p: Pseudonym) -> Result<Pseudonym, Error> {
        let Some(sealed) = p.original_sealed.take() else {
            return Ok(p);
        };
        let version = NamespaceKeys::sealed_version(&sealed)
            .ok_or_else(|| Error::internal("a sealed original of an unknown format"))?;
        let keys = self.version(ns.uid, version).await?;
        p.original_value = keys.open(&p.pseudonym_value, &sealed)?;
        Ok(p)
    }
}

/// [`Keyring::stored`] where there may be no keyring: a sealed namespace
/// then cannot be used, and says why.
pub async fn stored(
    keyring: Option<&Keyring>,
    ns: &Namespace,
    original: &OriginalValue,
) -> Result<Stored, Error> {
    keeper(keyring, ns).await?.keep(original)
}

/// [`Keyring::open`] where there may be no keyring.
pub async fn open(
    keyring: Option<&Keyring>,
    ns: &Namespace,
    p: Pseudonym,
) -> Result<Pseudonym, Error> {
    match keyring {
        Some(k) => k.open(ns, p).await,
        None if p.original_sealed.is_some() => Err(no_keys(ns)),
        None => Ok(p),
    }
}

fn no_keys(ns: &Namespace) -> Error {
    let what = match ns.settings.sealed {
        true => "the originals of namespace {} are sealed",
        false => "namespace {} makes keyed pseudonyms",
    };
    Error::failed_precondition(format!(
        "{}, and this replica has no key source (VFPS_KEYS)",
        what.replace("{}", ns.name.as_str())
    ))
}
