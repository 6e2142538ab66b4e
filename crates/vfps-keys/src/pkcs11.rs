//! `pkcs11:` — a master key on a PKCS#11 token (an HSM; SoftHSM2 in the
//! tests). The key is an AES-256 secret key object made on the token
//! (sensitive, never extractable): data keys are wrapped by AES-GCM *on the
//! token*, so the master key never leaves it.
//!
//! The setting is an RFC 7512 PKCS#11 URI, as other PKCS#11 consumers
//! (OpenSSL's engines, p11-kit, GnuTLS) take it:
//! `pkcs11:token=vfps;object=vfps-master?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/secrets/vfps-pin`
//! (`pin-value=` is taken too; a PIN is never shown).

use std::{path::PathBuf, sync::Mutex};

use cryptoki::{
    context::{CInitializeArgs, CInitializeFlags, Pkcs11},
    error::{Error as P11Error, RvError},
    mechanism::{aead::GcmParams, Mechanism},
    object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle},
    session::{Session, UserType},
    types::AuthPin,
};
use vfps_core::Error;

use crate::{random_bytes, wrap::Wrap, KEY_LEN};

const NONCE_LEN: usize = 12;
/// Bytes of the id given to a key `vfps keys init` makes.
const ID_LEN: usize = 8;

/// Where a PKCS#11 URI's PIN comes from.
#[derive(Clone, PartialEq, Eq)]
enum Pin {
    None,
    Value(String),
    Source(PathBuf),
}

/// A parsed `pkcs11:` URI (RFC 7512): the token and key object, the
/// module that speaks to the token, and the user PIN.
#[derive(Clone, PartialEq, Eq)]
pub struct Pkcs11Uri {
    module: PathBuf,
    token: String,
    object: String,
    pin: Pin,
}

impl std::fmt::Debug for Pkcs11Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// RFC 3986 percent-decoding of one attribute value.
fn decode(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{raw:?} has a bad percent-escape"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{raw:?} is not UTF-8"))
}

impl Pkcs11Uri {
    /// Parses the part after `pkcs11:`; every missing or unknown attribute
    /// is named.
    pub fn parse(rest: &str) -> Result<Self, String> {
        let usage =
            "pkcs11:token=<label>;object=<key label>?module-path=<library>&pin-source=file:<path>";
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (mut token, mut object) = (None, None);
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            match attr.split_once('=') {
                Some(("token", v)) => token = Some(decode(v)?),
                Some(("object", v)) => object = Some(decode(v)?),
                // Narrowing attributes of the URI scheme this source does
                // not need; taken and ignored as RFC 7512 allows.
                Some((
                    "type"
                    | "id"
                    | "manufacturer"
                    | "model"
                    | "serial"
                    | "library-description"
                    | "library-manufacturer"
                    | "library-version"
                    | "slot-description"
                    | "slot-manufacturer"
                    | "slot-id",
                    _,
                )) => {}
                _ => {
                    return Err(format!(
                        "VFPS_KEYS: {attr:?} is not a PKCS#11 URI path attribute ({usage})"
                    ))
                }
            }
        }
        let (mut module, mut pin) = (None, Pin::None);
        for attr in query.split('&').filter(|a| !a.is_empty()) {
            match attr.split_once('=') {
                Some(("module-path", v)) => module = Some(PathBuf::from(decode(v)?)),
                Some(("pin-value", v)) => pin = Pin::Value(decode(v)?),
                Some(("pin-source", v)) => {
                    let v = decode(v)?;
                    pin = Pin::Source(PathBuf::from(v.strip_prefix("file:").unwrap_or(&v)));
                }
                Some(("module-name", _)) => {
                    return Err(format!(
                        "VFPS_KEYS: give the PKCS#11 module as module-path=<library file> ({usage})"
                    ))
                }
                _ => {
                    return Err(format!(
                        "VFPS_KEYS: {:?} is not a PKCS#11 URI query attribute ({usage})",
                        attr.split_once('=').map_or(attr, |(k, _)| k)
                    ))
                }
            }
        }
        match (token, object, module) {
            (Some(token), Some(object), Some(module)) => Ok(Self {
                module,
                token,
                object,
                pin,
            }),
            (token, object, module) => Err(format!(
                "VFPS_KEYS: a PKCS#11 URI needs {} ({usage})",
                [
                    token.is_none().then_some("token="),
                    object.is_none().then_some("object="),
                    module.is_none().then_some("module-path="),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            )),
        }
    }

    /// For people: the token, object and module, never the PIN.
    pub fn describe(&self) -> String {
        format!(
            "pkcs11:token={};object={} (module {})",
            self.token,
            self.object,
            self.module.display()
        )
    }

    fn pin(&self) -> Result<Option<AuthPin>, Error> {
        match &self.pin {
            Pin::None => Ok(None),
            Pin::Value(v) => Ok(Some(AuthPin::from(v.clone()))),
            Pin::Source(path) => std::fs::read_to_string(path)
                .map(|s| Some(AuthPin::from(s.trim_end_matches(['\n', '\r']).to_owned())))
                .map_err(|e| {
                    Error::failed_precondition(format!(
                        "the PKCS#11 PIN file {}: {e}",
                        path.display()
                    ))
                }),
        }
    }

    /// A logged-in read-write session on the URI's token.
    fn session(&self) -> Result<Session, Error> {
        let fail = |what: &str, e: P11Error| {
            Error::failed_precondition(format!("{}: {what}: {e}", self.describe()))
        };
        let ctx = Pkcs11::new(&self.module).map_err(|e| fail("cannot load the module", e))?;
        match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
            Ok(()) | Err(P11Error::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
            Err(e) => return Err(fail("cannot initialise the module", e)),
        }
        let slots = ctx
            .get_slots_with_token()
            .map_err(|e| fail("cannot list the slots", e))?;
        let slot = slots
            .into_iter()
            .find(|s| {
                ctx.get_token_info(*s)
                    .is_ok_and(|t| t.label().trim_end() == self.token)
            })
            .ok_or_else(|| {
                Error::failed_precondition(format!(
                    "{}: no token labelled {:?}",
                    self.describe(),
                    self.token
                ))
            })?;
        let session = ctx
            .open_rw_session(slot)
            .map_err(|e| fail("cannot open a session", e))?;
        if let Some(pin) = self.pin()? {
            match session.login(UserType::User, Some(&pin)) {
                Ok(()) | Err(P11Error::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => {}
                Err(e) => return Err(fail("cannot log in (wrong PIN?)", e)),
            }
        }
        Ok(session)
    }

    /// The secret key objects labelled as the URI's object.
    fn find(&self, session: &Session) -> Result<Vec<ObjectHandle>, Error> {
        session
            .find_objects(&[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::Label(self.object.as_bytes().to_vec()),
            ])
            .map_err(|e| {
                Error::failed_precondition(format!("{}: cannot search keys: {e}", self.describe()))
            })
    }

    /// Makes the master key on the token: AES-256, sensitive, never
    /// extractable, with a random id; refused when the token has one of the
    /// label already. Answers the key id.
    pub fn init(&self) -> Result<String, Error> {
        let session = self.session()?;
        if !self.find(&session)?.is_empty() {
            return Err(Error::failed_precondition(format!(
                "{}: the token already holds a key labelled {:?}; it is never replaced",
                self.describe(),
                self.object
            )));
        }
        let id = random_bytes::<ID_LEN>()?;
        session
            .generate_key(
                &Mechanism::AesKeyGen,
                &[
                    Attribute::Class(ObjectClass::SECRET_KEY),
                    Attribute::KeyType(KeyType::AES),
                    Attribute::ValueLen((KEY_LEN as u64).into()),
                    Attribute::Token(true),
                    Attribute::Private(true),
                    Attribute::Sensitive(true),
                    Attribute::Extractable(false),
                    Attribute::Encrypt(true),
                    Attribute::Decrypt(true),
                    Attribute::Label(self.object.as_bytes().to_vec()),
                    Attribute::Id(id.to_vec()),
                ],
            )
            .map_err(|e| {
                Error::failed_precondition(format!("{}: cannot make the key: {e}", self.describe()))
            })?;
        Ok(hex::encode(id))
    }

    /// Opens the source: the key found on the token.
    pub fn open(&self) -> Result<Pkcs11Key, Error> {
        let session = self.session()?;
        let key = match self.find(&session)?.as_slice() {
            [one] => *one,
            [] => {
                return Err(Error::failed_precondition(format!(
                    "{}: the token holds no key labelled {:?} (`vfps keys init` with this URI makes one)",
                    self.describe(),
                    self.object
                )))
            }
            _ => {
                return Err(Error::failed_precondition(format!(
                    "{}: the token holds several keys labelled {:?}",
                    self.describe(),
                    self.object
                )))
            }
        };
        let id = session
            .get_attributes(key, &[AttributeType::Id])
            .ok()
            .and_then(|a| {
                a.into_iter().find_map(|a| match a {
                    Attribute::Id(id) if !id.is_empty() => Some(hex::encode(id)),
                    _ => None,
                })
            })
            .unwrap_or_else(|| format!("{}/{}", self.token, self.object));
        Ok(Pkcs11Key {
            session: Mutex::new(session),
            key,
            id,
            describe: self.describe(),
        })
    }
}

/// The master key on a PKCS#11 token, through one logged-in session.
pub struct Pkcs11Key {
    session: Mutex<Session>,
    key: ObjectHandle,
    id: String,
    describe: String,
}

impl Pkcs11Key {
    fn with_session<T>(&self, f: impl FnOnce(&Session) -> Result<T, Error>) -> Result<T, Error> {
        let session = self
            .session
            .lock()
            .map_err(|_| Error::internal("the PKCS#11 session's lock is poisoned"))?;
        f(&session)
    }
}

#[async_trait::async_trait]
impl Wrap for Pkcs11Key {
    fn key_id(&self) -> String {
        self.id.clone()
    }

    async fn wrap(&self, key: &[u8; KEY_LEN], context: &[u8]) -> Result<Vec<u8>, Error> {
        let mut nonce = random_bytes::<NONCE_LEN>()?;
        let sealed = self.with_session(|s| {
            let params = GcmParams::new(&mut nonce, context, 128.into())
                .map_err(|e| Error::internal(format!("AES-GCM parameters: {e}")))?;
            s.encrypt(&Mechanism::AesGcm(params), self.key, key)
                .map_err(|e| {
                    Error::unavailable(format!(
                        "{}: wrapping a data key failed: {e}",
                        self.describe
                    ))
                })
        })?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    async fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<[u8; KEY_LEN], Error> {
        let bad = || {
            Error::failed_precondition(format!(
                "a data key does not unwrap under key {} of {} (altered, or wrapped for another \
                 namespace)",
                self.id, self.describe
            ))
        };
        if wrapped.len() < NONCE_LEN {
            return Err(bad());
        }
        let mut nonce: [u8; NONCE_LEN] = wrapped[..NONCE_LEN].try_into().map_err(|_| bad())?;
        let plain = self.with_session(|s| {
            let params = GcmParams::new(&mut nonce, context, 128.into())
                .map_err(|e| Error::internal(format!("AES-GCM parameters: {e}")))?;
            s.decrypt(&Mechanism::AesGcm(params), self.key, &wrapped[NONCE_LEN..])
                .map_err(|_| bad())
        })?;
        plain.try_into().map_err(|_| bad())
    }

    fn describe(&self) -> String {
        format!("{} key {}", self.describe, self.id)
    }
}
