//! Keys held apart from the database (docs/privacy.md, "Nothing at rest
//! re-identifies"): every original of a sealed namespace is stored as an
//! AEAD ciphertext under the namespace's data key, found again through a
//! blind index (HMAC-SHA-256 under a key of its own), and both keys are kept
//! in the database only wrapped by a key source that lives elsewhere.
//!
//! # Layout
//! - this file: [`NamespaceKeys`] (index, seal, open) and [`WrappedKeys`],
//!   their form at rest.
//! - [`source`]: the key sources (`VFPS_KEYS`): a key file, a key on a
//!   PKCS#11 token ([`pkcs11`]), or an AWS KMS key ([`kms`]); each is a
//!   [`Wrap`] ([`wrap`]).
//! - [`keyring`]: a process's keys, made and unwrapped through the store;
//!   what every path that reads or writes originals asks of them.
//!
//! # Choices
//! AES-256-GCM from `ring` (already the TLS stack's, constant-time,
//! hardware-accelerated on this machine's CPUs): 96-bit random nonces are
//! safe for 2³² seals per key, a bound a namespace's data key version stays
//! far below (rotation starts a new version). AES-GCM-SIV or XChaCha20
//! would lift that bound at the cost of a second crypto library; not worth
//! it at these volumes. HMAC-SHA-256 (ring) for the blind index: equal
//! originals give equal indexes, so lookup and the uniqueness that keeps one
//! pseudonym per original work on the index as they did on the original.

use ring::{aead, hmac, rand::SecureRandom};
use vfps_core::{Error, NamespaceUid};

pub mod keyring;
pub mod kms;
pub mod pkcs11;
pub mod source;
pub mod wrap;

pub use keyring::{Keyring, Stored};
pub use source::KeySource;
pub use wrap::Wrap;

/// What an original stored as its blind index starts with; the digit is
/// the index key's version (`~k1.…`). No original of a sealed namespace is
/// stored otherwise, so the mark needs no escaping.
pub const INDEX_MARK: &str = "~k";

/// The format byte of a sealed original.
const SEALED_FORMAT: u8 = 1;
const NONCE_LEN: usize = 12;
/// Bytes of a key (AES-256, and the HMAC key).
pub const KEY_LEN: usize = 32;

/// A namespace's keys, unwrapped: in this process's memory only.
pub struct NamespaceKeys {
    pub uid: NamespaceUid,
    pub version: u32,
    data: aead::LessSafeKey,
    index: hmac::Key,
    /// The keyed generation method's key, derived from the index key under
    /// a label of its own. The keyring uses the first version's only, so an
    /// original's keyed pseudonym never changes with a new key version.
    pseudonym: hmac::Key,
}

impl std::fmt::Debug for NamespaceKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceKeys")
            .field("uid", &self.uid)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A namespace's keys as the database keeps them: wrapped by the key source
/// (`wrapped_by` names its key, so a wrong one is told by name).
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedKeys {
    pub uid: NamespaceUid,
    pub version: u32,
    pub data: Vec<u8>,
    pub index: Vec<u8>,
    pub wrapped_by: String,
}

impl std::fmt::Debug for WrappedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrappedKeys")
            .field("uid", &self.uid)
            .field("version", &self.version)
            .field("wrapped_by", &self.wrapped_by)
            .finish_non_exhaustive()
    }
}

impl WrappedKeys {
    /// The same keys wrapped by `to` instead of `from` (a wrapping-key
    /// rotation: the keys, and so every sealed original, stay as they are).
    pub async fn rewrap(&self, from: &dyn Wrap, to: &dyn Wrap) -> Result<Self, Error> {
        if self.wrapped_by != from.key_id() {
            return Err(Error::failed_precondition(format!(
                "namespace keys (version {}) are wrapped by key {}, not {}",
                self.version,
                self.wrapped_by,
                from.key_id()
            )));
        }
        let mut out = self.clone();
        for (purpose, wrapped) in [("data", &mut out.data), ("index", &mut out.index)] {
            let context = key_context(purpose, self.uid, self.version);
            let key = from.unwrap(wrapped, &context).await?;
            *wrapped = to.wrap(&key, &context).await?;
        }
        out.wrapped_by = to.key_id();
        Ok(out)
    }
}

/// What a wrapped key is bound to: its purpose, namespace and version.
fn key_context(purpose: &str, uid: NamespaceUid, version: u32) -> Vec<u8> {
    let mut c = format!("vfps {purpose} key\0").into_bytes();
    c.extend_from_slice(&uid.0.to_le_bytes());
    c.extend_from_slice(&version.to_le_bytes());
    c
}

/// Fresh random bytes from the system's generator.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| Error::internal("the system's random generator failed"))?;
    Ok(b)
}

impl NamespaceKeys {
    fn from_bytes(
        uid: NamespaceUid,
        version: u32,
        data: &[u8; KEY_LEN],
        index: &[u8; KEY_LEN],
    ) -> Result<Self, Error> {
        let data = aead::UnboundKey::new(&aead::AES_256_GCM, data)
            .map_err(|_| Error::internal("a data key of the wrong length"))?;
        let index = hmac::Key::new(hmac::HMAC_SHA256, index);
        let pseudonym = hmac::Key::new(
            hmac::HMAC_SHA256,
            hmac::sign(&index, b"vfps pseudonym key\0").as_ref(),
        );
        Ok(Self {
            uid,
            version,
            data: aead::LessSafeKey::new(data),
            index,
            pseudonym,
        })
    }

    /// New keys for `uid` (version `version`), and their wrapped form.
    pub async fn generate(
        uid: NamespaceUid,
        version: u32,
        wrap: &dyn Wrap,
    ) -> Result<(Self, WrappedKeys), Error> {
        let (data, wrapped_data) = wrap.generate(&key_context("data", uid, version)).await?;
        let (index, wrapped_index) = wrap.generate(&key_context("index", uid, version)).await?;
        let wrapped = WrappedKeys {
            uid,
            version,
            data: wrapped_data,
            index: wrapped_index,
            wrapped_by: wrap.key_id(),
        };
        Ok((Self::from_bytes(uid, version, &data, &index)?, wrapped))
    }

    /// The keys `wrapped` holds, unwrapped by `wrap`.
    pub async fn unwrap(wrapped: &WrappedKeys, wrap: &dyn Wrap) -> Result<Self, Error> {
        Self::unwrap_by(wrapped, &[wrap]).await
    }

    /// The keys `wrapped` holds, unwrapped by whichever of `sources` holds
    /// the key that wrapped them (the current one, or one being rotated
    /// away from); none: refused naming every key id.
    pub async fn unwrap_by(wrapped: &WrappedKeys, sources: &[&dyn Wrap]) -> Result<Self, Error> {
        let Some(wrap) = sources.iter().find(|w| w.key_id() == wrapped.wrapped_by) else {
            let held: Vec<String> = sources.iter().map(|w| w.key_id()).collect();
            return Err(Error::failed_precondition(format!(
                "namespace keys (version {}) are wrapped by key {}, but the key source holds {}",
                wrapped.version,
                wrapped.wrapped_by,
                held.join(" and ")
            )));
        };
        let (uid, version) = (wrapped.uid, wrapped.version);
        let data = wrap
            .unwrap(&wrapped.data, &key_context("data", uid, version))
            .await?;
        let index = wrap
            .unwrap(&wrapped.index, &key_context("index", uid, version))
            .await?;
        Self::from_bytes(uid, version, &data, &index)
    }

    /// The blind index of `original`: what the database keeps and compares
    /// in its place (`~k<version>.` and 43 base64url characters).
    pub fn index(&self, original: &str) -> String {
        use base64::Engine;
        let tag = hmac::sign(&self.index, original.as_bytes());
        format!(
            "{INDEX_MARK}{}.{}",
            self.version,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref())
        )
    }

    /// What a sealed original is bound to: its namespace and its row (the
    /// pseudonym, unique in the namespace), so it cannot be moved.
    fn binding(&self, pseudonym: &str) -> Vec<u8> {
        let mut ad = b"vfps original\0".to_vec();
        ad.extend_from_slice(&self.uid.0.to_le_bytes());
        ad.extend_from_slice(pseudonym.as_bytes());
        ad
    }

    /// `original` sealed for the row of `pseudonym`: format, key version,
    /// nonce, ciphertext and tag.
    pub fn seal(&self, pseudonym: &str, original: &str) -> Result<Vec<u8>, Error> {
        let nonce = random_bytes::<NONCE_LEN>()?;
        let mut body = original.as_bytes().to_vec();
        self.data
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(self.binding(pseudonym)),
                &mut body,
            )
            .map_err(|_| Error::internal("sealing an original failed"))?;
        let mut out = Vec::with_capacity(1 + 4 + NONCE_LEN + body.len());
        out.push(SEALED_FORMAT);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The key version a sealed original was sealed under.
    pub fn sealed_version(sealed: &[u8]) -> Option<u32> {
        (sealed.len() > 5 && sealed[0] == SEALED_FORMAT)
            .then(|| u32::from_le_bytes([sealed[1], sealed[2], sealed[3], sealed[4]]))
    }

    /// The original of the row of `pseudonym`; refused (`Internal`, no
    /// value named) when it was sealed for another row or key, or altered.
    pub fn open(&self, pseudonym: &str, sealed: &[u8]) -> Result<String, Error> {
        let bad = || {
            Error::internal(format!(
                "a sealed original of namespace uid {} does not open under key version {} \
                 (altered, moved, or sealed under another key)",
                self.uid.0, self.version
            ))
        };
        if Self::sealed_version(sealed) != Some(self.version) || sealed.len() < 5 + NONCE_LEN {
            return Err(bad());
        }
        let nonce =
            aead::Nonce::try_assume_unique_for_key(&sealed[5..5 + NONCE_LEN]).map_err(|_| bad())?;
        let mut body = sealed[5 + NONCE_LEN..].to_vec();
        let plain = self
            .data
            .open_in_place(nonce, aead::Aad::from(self.binding(pseudonym)), &mut body)
            .map_err(|_| bad())?;
        String::from_utf8(plain.to_vec()).map_err(|_| bad())
    }
}

impl vfps_core::generate::PseudonymKey for NamespaceKeys {
    fn mac(&self, original: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(hmac::sign(&self.pseudonym, original.as_bytes()).as_ref());
        out
    }
}

/// Whether a stored original is a blind index (its row's original sealed).
pub fn is_index(stored: &str) -> bool {
    stored.starts_with(INDEX_MARK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FileKey;

    async fn keys(uid: i64) -> (NamespaceKeys, WrappedKeys, FileKey) {
        let file = FileKey::generate().unwrap();
        let (k, w) = NamespaceKeys::generate(NamespaceUid(uid), 1, &file)
            .await
            .unwrap();
        (k, w, file)
    }

    #[tokio::test]
    async fn an_original_seals_and_opens_for_its_row_only() {
        let (k, _, _) = keys(7).await;
        let sealed = k.seal("p-1", "patient 4711").unwrap();
        assert!(!sealed.windows(b"patient".len()).any(|w| w == b"patient"));
        assert_eq!(k.open("p-1", &sealed).unwrap(), "patient 4711");
        // Another row, another namespace, altered bytes: refused, naming no value.
        let e = k.open("p-2", &sealed).unwrap_err();
        assert!(!e.message.contains("4711"), "{}", e.message);
        let (other, _, _) = keys(8).await;
        assert!(other.open("p-1", &sealed).is_err());
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert!(k.open("p-1", &altered).is_err());
        // Two seals of one original differ (fresh nonces).
        assert_ne!(k.seal("p-1", "patient 4711").unwrap(), sealed);
    }

    #[tokio::test]
    async fn the_index_is_stable_keyed_and_reveals_no_original() {
        let (k, wrapped, file) = keys(7).await;
        let i = k.index("patient 4711");
        assert_eq!(i, k.index("patient 4711"));
        assert_ne!(i, k.index("patient 4712"));
        assert!(i.starts_with("~k1.") && is_index(&i), "{i}");
        assert_eq!(i.len(), 4 + 43);
        assert!(!i.contains("4711"));
        // Another namespace's key gives another index.
        let (other, _, _) = keys(7).await;
        assert_ne!(other.index("patient 4711"), i);
        // Unwrapped again, the same keys.
        let again = NamespaceKeys::unwrap(&wrapped, &file).await.unwrap();
        assert_eq!(again.index("patient 4711"), i);
        let sealed = k.seal("p", "x").unwrap();
        assert_eq!(again.open("p", &sealed).unwrap(), "x");
    }

    #[tokio::test]
    async fn wrapped_keys_open_only_under_their_key_and_place() {
        let (_, wrapped, file) = keys(7).await;
        let other = FileKey::generate().unwrap();
        let e = NamespaceKeys::unwrap(&wrapped, &other).await.unwrap_err();
        assert!(e.message.contains(&file.key_id()), "{}", e.message);
        // Moved to another namespace: the wrap is bound to its uid.
        let moved = WrappedKeys {
            uid: NamespaceUid(8),
            ..wrapped.clone()
        };
        assert!(NamespaceKeys::unwrap(&moved, &file).await.is_err());
        // The data key wrapped where the index key goes: refused.
        let swapped = WrappedKeys {
            data: wrapped.index.clone(),
            index: wrapped.data.clone(),
            ..wrapped
        };
        assert!(NamespaceKeys::unwrap(&swapped, &file).await.is_err());
    }
}
