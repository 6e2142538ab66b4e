//! Who may do what: the permissions a namespace grants, and the access tokens
//! the database keeps (service-account `vfps_sat_…` and personal `vfps_pat_…`).
//!
//! A token's plaintext exists once, when it is minted; the database keeps its
//! SHA-256. [`TokenSecret`] has no `Display` and a redacting `Debug`, so the
//! plaintext cannot reach a log line by accident.

use std::{fmt, time::SystemTime};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::Error;

/// What a caller may do in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// List its pseudonyms (never their originals) and read its settings.
    Read,
    /// Create pseudonyms in it.
    Write,
    /// Resolve a pseudonym to its original: re-identification.
    ReverseLookup,
    /// Erase an original's entry (delete it, or anonymize it): a right of its
    /// own, since it destroys what research data is joined on.
    Erase,
}

impl Permission {
    pub const ALL: [Permission; 4] = [Self::Read, Self::Write, Self::ReverseLookup, Self::Erase];

    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::ReverseLookup => "reverse-lookup",
            Self::Erase => "erase",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == raw.trim())
    }
}

/// Longest namespace pattern of a grant (a namespace name or `*`).
const MAX_GRANT_NAMESPACE_BYTES: usize = 256;

/// Permissions in one namespace, or in every namespace (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// A namespace name, or `*` for all.
    pub namespace: String,
    pub permissions: Vec<Permission>,
}

impl Grant {
    /// Whether this grant gives `permission` in `namespace`.
    pub fn allows(&self, permission: Permission, namespace: &str) -> bool {
        (self.namespace == "*" || self.namespace == namespace)
            && self.permissions.contains(&permission)
    }

    /// Parses `<namespace>=<permission>[,<permission>…]`, e.g.
    /// `research=write,reverse-lookup` or `*=read`.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let (namespace, perms) = raw.rsplit_once('=').ok_or_else(|| {
            Error::invalid_argument(format!(
                "grant {raw:?}: expected <namespace>=<permission>[,<permission>…]"
            ))
        })?;
        if namespace.is_empty()
            || namespace.len() > MAX_GRANT_NAMESPACE_BYTES
            || namespace.chars().any(char::is_control)
        {
            return Err(Error::invalid_argument(format!(
                "grant {raw:?}: the namespace must be a name or *"
            )));
        }
        let mut permissions = Vec::new();
        for p in perms.split(',') {
            let permission = Permission::parse(p).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "grant {raw:?}: {p:?} is not a permission (read, write, reverse-lookup)"
                ))
            })?;
            if !permissions.contains(&permission) {
                permissions.push(permission);
            }
        }
        permissions.sort();
        Ok(Self {
            namespace: namespace.to_owned(),
            permissions,
        })
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let perms: Vec<&str> = self.permissions.iter().map(|p| p.name()).collect();
        write!(f, "{}={}", self.namespace, perms.join(","))
    }
}

/// Who a database token belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// `vfps_sat_…`: a service account (a program).
    ServiceAccount,
    /// `vfps_pat_…`: a person.
    Personal,
}

impl TokenKind {
    pub fn prefix(self) -> &'static str {
        match self {
            Self::ServiceAccount => "vfps_sat_",
            Self::Personal => "vfps_pat_",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::ServiceAccount => "service-account",
            Self::Personal => "personal",
        }
    }
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim() {
            "service-account" | "sat" => Some(Self::ServiceAccount),
            "personal" | "pat" => Some(Self::Personal),
            _ => None,
        }
    }
}

/// Random bytes in a token: 256 bits.
const SECRET_BYTES: usize = 32;
/// Characters after the prefix: the secret in unpadded URL-safe base64.
const SECRET_CHARS: usize = 43;

/// A token's plaintext. Shown once at creation; no `Display`, a redacting `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// A new random token of `kind`.
    pub fn mint(kind: TokenKind) -> Self {
        let bytes: [u8; SECRET_BYTES] = rand::random();
        Self(format!(
            "{}{}",
            kind.prefix(),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        ))
    }

    /// The plaintext, to show its owner once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash::of(&self.0)
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

/// The SHA-256 of a token's plaintext: what the database keeps and looks up.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    pub fn of(plaintext: &str) -> Self {
        Self(Sha256::digest(plaintext.as_bytes()).into())
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(<redacted>)")
    }
}

/// The kind of a bearer credential that has the shape of a database token
/// (prefix and exactly 43 URL-safe base64 characters); `None` for anything else,
/// which is then treated as a JWT.
pub fn database_token_kind(credential: &str) -> Option<TokenKind> {
    [TokenKind::ServiceAccount, TokenKind::Personal]
        .into_iter()
        .find(|k| {
            credential.strip_prefix(k.prefix()).is_some_and(|rest| {
                rest.len() == SECRET_CHARS
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
        })
}

/// Longest token name.
pub const MAX_TOKEN_NAME_BYTES: usize = 200;

/// A database token as stored: never its plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Public identifier: named in audit events, used to revoke.
    pub id: String,
    pub kind: TokenKind,
    /// Whose or what it is, for people reading the list.
    pub name: String,
    pub hash: TokenHash,
    /// May create and delete namespaces and manage tokens.
    pub admin: bool,
    pub grants: Vec<Grant>,
    pub created_at: SystemTime,
    pub expires_at: Option<SystemTime>,
    pub revoked_at: Option<SystemTime>,
}

impl TokenRecord {
    /// A new record for a freshly minted secret; the caller shows the secret
    /// once and stores the record.
    pub fn new(
        kind: TokenKind,
        name: &str,
        admin: bool,
        grants: Vec<Grant>,
        expires_at: Option<SystemTime>,
    ) -> Result<(Self, TokenSecret), Error> {
        if name.trim().is_empty()
            || name.len() > MAX_TOKEN_NAME_BYTES
            || name.chars().any(char::is_control)
        {
            return Err(Error::invalid_argument(format!(
                "a token name must be 1 to {MAX_TOKEN_NAME_BYTES} bytes without control characters"
            )));
        }
        let secret = TokenSecret::mint(kind);
        let record = Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            kind,
            name: name.to_owned(),
            hash: secret.hash(),
            admin,
            grants,
            created_at: crate::now_micros(),
            expires_at,
            revoked_at: None,
        };
        Ok((record, secret))
    }

    /// Whether the token may be used at `now`.
    pub fn usable(&self, now: SystemTime) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| now < e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_and_print_back() {
        let g = Grant::parse("research=write,reverse-lookup,write").unwrap();
        assert_eq!(g.namespace, "research");
        assert_eq!(
            g.permissions,
            [Permission::Write, Permission::ReverseLookup]
        );
        assert_eq!(g.to_string(), "research=write,reverse-lookup");
        assert_eq!(Grant::parse("a=b=read").unwrap().namespace, "a=b");
        assert!(g.allows(Permission::Write, "research"));
        assert!(!g.allows(Permission::Read, "research"));
        assert!(!g.allows(Permission::Write, "other"));
        assert!(Grant::parse("*=read")
            .unwrap()
            .allows(Permission::Read, "any"));
        for bad in ["research", "=read", "x=rw", "x=", "x\n=read"] {
            let e = Grant::parse(bad).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn minted_tokens_have_the_shape_and_hash_they_are_looked_up_by() {
        let s = TokenSecret::mint(TokenKind::ServiceAccount);
        assert_eq!(
            database_token_kind(s.expose()),
            Some(TokenKind::ServiceAccount)
        );
        assert_eq!(s.hash(), TokenHash::of(s.expose()));
        assert_ne!(s, TokenSecret::mint(TokenKind::ServiceAccount));
        let p = TokenSecret::mint(TokenKind::Personal);
        assert_eq!(database_token_kind(p.expose()), Some(TokenKind::Personal));
        assert!(!format!("{s:?}").contains(&s.expose()[9..]));
        // One character short, one too many, a foreign character: not a token.
        let short = &s.expose()[..s.expose().len() - 1];
        assert_eq!(database_token_kind(short), None);
        assert_eq!(database_token_kind(&format!("{}A", s.expose())), None);
        assert_eq!(database_token_kind(&short.replace('_', "/")), None);
        assert_eq!(database_token_kind("eyJhbGciOiJFUzI1NiJ9.e30.sig"), None);
    }

    #[test]
    fn revoked_or_expired_tokens_are_unusable() {
        let now = crate::now_micros();
        let (mut r, _) =
            TokenRecord::new(TokenKind::Personal, "someone", false, vec![], None).unwrap();
        assert!(r.usable(now));
        r.expires_at = Some(now);
        assert!(!r.usable(now));
        r.expires_at = None;
        r.revoked_at = Some(now);
        assert!(!r.usable(now));
        assert!(TokenRecord::new(TokenKind::Personal, " ", false, vec![], None).is_err());
    }
}
