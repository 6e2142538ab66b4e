//! Key sources (`VFPS_KEYS`): what wraps the namespaces' data keys. The
//! master key stays in its source; the database holds only what it wrapped.
//!
//! - `file:PATH` — a key file (a Kubernetes Secret mounted read-only, a
//!   file on an encrypted volume): one line `vfps-key-v1 <key id> <key>`,
//!   the key 32 random bytes in base64, the id the first 8 bytes of its
//!   SHA-256 in hex. `vfps keys init PATH` writes one (mode 0600, refusing
//!   to overwrite).
//! - `aws-kms:KEY-ARN` — an AWS KMS key ([`crate::kms`]): data keys made
//!   by `GenerateDataKey`, opened by `Decrypt`.
//! - `pkcs11:…` — an RFC 7512 URI naming an AES key on a PKCS#11 token
//!   ([`crate::pkcs11`]); `vfps keys init` with the URI makes the key on
//!   the token.

use std::path::{Path, PathBuf};

use base64::Engine;
use ring::aead;
use sha2::{Digest, Sha256};
use vfps_core::Error;

use crate::{random_bytes, wrap::Wrap, KEY_LEN};

/// A parsed `VFPS_KEYS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(PathBuf),
    /// An RFC 7512 URI: a key on a PKCS#11 token ([`crate::pkcs11`]).
    Pkcs11(crate::pkcs11::Pkcs11Uri),
    /// An AWS KMS key ([`crate::kms`]).
    AwsKms(crate::kms::KmsSettings),
}

impl KeySource {
    /// Parses `file:PATH`, `pkcs11:…` or `aws-kms:ARN` (its credentials
    /// and endpoint from this process's environment); anything else is
    /// refused naming what is taken.
    pub fn parse(setting: &str) -> Result<Self, String> {
        Self::parse_with(setting, &|k| std::env::var(k).ok())
    }

    /// [`KeySource::parse`], the environment read through `get`.
    pub fn parse_with(setting: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        match setting.split_once(':') {
            Some(("file", path)) if !path.trim().is_empty() => {
                Ok(Self::File(PathBuf::from(path.trim())))
            }
            Some(("file", _)) => Err("VFPS_KEYS=file: needs a path (file:/etc/vfps/keys)".into()),
            Some(("pkcs11", rest)) => crate::pkcs11::Pkcs11Uri::parse(rest).map(Self::Pkcs11),
            Some(("aws-kms", arn)) => crate::kms::KmsSettings::parse(arn, get).map(Self::AwsKms),
            _ => Err(format!(
                "VFPS_KEYS={:?} is not a key source: file:PATH, a pkcs11: URI or aws-kms:KEY-ARN is taken",
                // A PIN in a URI is not shown.
                setting.split('?').next().unwrap_or_default()
            )),
        }
    }

    /// The source opened: its key read and checked.
    pub fn open(&self) -> Result<Box<dyn Wrap>, Error> {
        match self {
            Self::File(path) => Ok(Box::new(FileKey::read(path)?)),
            Self::Pkcs11(uri) => Ok(Box::new(uri.open()?)),
            Self::AwsKms(kms) => Ok(Box::new(kms.open()?)),
        }
    }
}

/// The first line's tag of a key file.
const FILE_TAG: &str = "vfps-key-v1";
const NONCE_LEN: usize = 12;

/// A master key from a key file.
pub struct FileKey {
    key: aead::LessSafeKey,
    id: String,
}

/// The id of a master key: the first 8 bytes of its SHA-256, in hex.
fn key_id_of(key: &[u8; KEY_LEN]) -> String {
    hex::encode(&Sha256::digest(key)[..8])
}

impl std::fmt::Debug for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl FileKey {
    fn from_bytes(key: &[u8; KEY_LEN]) -> Result<Self, Error> {
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, key)
            .map_err(|_| Error::internal("a master key of the wrong length"))?;
        Ok(Self {
            key: aead::LessSafeKey::new(unbound),
            id: key_id_of(key),
        })
    }

    /// A new random master key (not yet written anywhere).
    pub fn generate() -> Result<Self, Error> {
        Self::from_bytes(&random_bytes::<KEY_LEN>()?)
    }

    /// Writes a new key file at `path` (mode 0600; an existing file is
    /// never overwritten): its key id.
    pub fn init(path: &Path) -> Result<String, Error> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let key = random_bytes::<KEY_LEN>()?;
        let id = key_id_of(&key);
        let line = format!(
            "{FILE_TAG} {id} {}\n",
            base64::engine::general_purpose::STANDARD.encode(key)
        );
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| {
                Error::failed_precondition(format!("cannot create {}: {e}", path.display()))
            })?;
        file.write_all(line.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::internal(format!("cannot write {}: {e}", path.display())))?;
        Ok(id)
    }

    /// Reads the key file at `path`: refused by name when it is missing,
    /// readable by every user (its owner and its group may: a Kubernetes
    /// Secret mounted for the pod's group), or not a key file.
    pub fn read(path: &Path) -> Result<Self, Error> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::failed_precondition(format!("key file {shown}: {e}")))?;
        if meta.permissions().mode() & 0o007 != 0 {
            return Err(Error::failed_precondition(format!(
                "key file {shown} is open to every user (mode {:o}): chmod 600 it (640 for a \
                 group of its own)",
                meta.permissions().mode() & 0o777
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::failed_precondition(format!("key file {shown}: {e}")))?;
        let bad = || {
            Error::failed_precondition(format!(
                "key file {shown} is not a vfps key file (one line: {FILE_TAG} <key id> <base64 key>; \
                 `vfps keys init` writes one)"
            ))
        };
        let line = text
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .ok_or_else(bad)?;
        let mut parts = line.split_whitespace();
        let (Some(FILE_TAG), Some(id), Some(key), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let key: [u8; KEY_LEN] = base64::engine::general_purpose::STANDARD
            .decode(key)
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or_else(bad)?;
        let file = Self::from_bytes(&key)?;
        if file.id != id {
            return Err(Error::failed_precondition(format!(
                "key file {shown} names key {id} but holds key {}: it was altered",
                file.id
            )));
        }
        Ok(file)
    }
}

#[async_trait::async_trait]
impl Wrap for FileKey {
    fn key_id(&self) -> String {
        self.id.clone()
    }

    async fn wrap(&self, key: &[u8; KEY_LEN], context: &[u8]) -> Result<Vec<u8>, Error> {
        let nonce = random_bytes::<NONCE_LEN>()?;
        let mut body = key.to_vec();
        self.key
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(context),
                &mut body,
            )
            .map_err(|_| Error::internal("wrapping a data key failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&body);
        Ok(out)
    }

    async fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<[u8; KEY_LEN], Error> {
        let bad = || {
            Error::failed_precondition(format!(
                "a data key does not unwrap under key {} (altered, or wrapped for another namespace)",
                self.id
            ))
        };
        if wrapped.len() < NONCE_LEN {
            return Err(bad());
        }
        let nonce =
            aead::Nonce::try_assume_unique_for_key(&wrapped[..NONCE_LEN]).map_err(|_| bad())?;
        let mut body = wrapped[NONCE_LEN..].to_vec();
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(context), &mut body)
            .map_err(|_| bad())?;
        plain.try_into().map_err(|_| bad())
    }

    fn describe(&self) -> String {
        format!("key file (key {})", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "vfps-keys-{name}-{}-{:x}",
            std::process::id(),
            u64::from_le_bytes(random_bytes::<8>().unwrap())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("keys")
    }

    #[tokio::test]
    async fn a_key_file_is_written_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let path = scratch("init");
        let id = FileKey::init(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let key = FileKey::read(&path).unwrap();
        assert_eq!(key.key_id(), id);
        assert!(key.describe().contains(&id));
        // Never overwritten.
        let e = FileKey::init(&path).unwrap_err();
        assert!(e.message.contains("cannot create"), "{}", e.message);
        // A wrap round-trips, bound to its context.
        let secret = random_bytes::<KEY_LEN>().unwrap();
        let wrapped = key.wrap(&secret, b"ctx").await.unwrap();
        assert_eq!(key.unwrap(&wrapped, b"ctx").await.unwrap(), secret);
        assert!(key.unwrap(&wrapped, b"other").await.is_err());
    }

    #[test]
    fn a_bad_key_file_is_refused_by_name() {
        use std::os::unix::fs::PermissionsExt;
        let path = scratch("bad");
        FileKey::init(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = FileKey::read(&path).unwrap_err();
        assert!(e.message.contains("chmod 600"), "{}", e.message);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(FILE_TAG, "other-tag")).unwrap();
        let e = FileKey::read(&path).unwrap_err();
        assert!(e.message.contains("not a vfps key file"), "{}", e.message);
        // An id that is not the key's: altered.
        let mut parts: Vec<&str> = text.split_whitespace().collect();
        parts[1] = "0000000000000000";
        std::fs::write(&path, parts.join(" ")).unwrap();
        let e = FileKey::read(&path).unwrap_err();
        assert!(e.message.contains("altered"), "{}", e.message);
        let e = FileKey::read(&path.with_file_name("missing")).unwrap_err();
        assert!(e.message.contains("missing"), "{}", e.message);
    }

    #[test]
    fn key_sources_parse_or_are_refused_by_name() {
        assert_eq!(
            KeySource::parse("file:/etc/vfps/keys").unwrap(),
            KeySource::File("/etc/vfps/keys".into())
        );
        assert!(KeySource::parse("file:")
            .unwrap_err()
            .contains("needs a path"));
        let e = KeySource::parse("vault:x").unwrap_err();
        assert!(e.contains("vault:x") && e.contains("file:PATH"), "{e}");
    }
}
