//! The admin UI's sessions: everything a session is lives in its cookie,
//! sealed (AES-256-GCM) with a key every replica shares
//! (`VFPS_UI_SESSION_KEY`), so any replica accepts any session and none keeps
//! state: a user whose replica died, or who is routed elsewhere, stays signed
//! in. The seal also binds each value to its purpose (a sign-in's pending
//! state cannot pass for a session).
//!
//! Cross-site request forgery: a session carries a random nonce, and every
//! state-changing request must bring [`SessionKey::csrf_token`] of it (a form
//! field, or the `X-CSRF-Token` header of the UI's scripts), which a page of
//! another site cannot read.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine};
use ring::{
    aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, NONCE_LEN},
    hmac,
    rand::{SecureRandom, SystemRandom},
};
use serde::{Deserialize, Serialize};

use super::{Access, Principal};

/// What a sealed value is for; part of what the seal authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A signed-in (or, with authorization off, anonymous) session.
    Session,
    /// A sign-in under way: PKCE verifier, state, nonce, where to return.
    SignIn,
}

impl Purpose {
    fn aad(self) -> &'static [u8] {
        match self {
            Self::Session => b"vfps-ui-session-v1",
            Self::SignIn => b"vfps-ui-sign-in-v1",
        }
    }
}

/// Longest sealed value opened; a longer cookie is refused unread.
const MAX_SEALED_BYTES: usize = 8 * 1024;

/// The key sealing sessions and making CSRF tokens. Cheap to share.
pub struct SessionKey {
    seal: LessSafeKey,
    csrf: hmac::Key,
    /// Whether the key was configured (shared by replicas) or made here.
    shared: bool,
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKey")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl SessionKey {
    /// From `VFPS_UI_SESSION_KEY`'s bytes: two keys derived by HMAC, one to
    /// seal and one for CSRF tokens.
    pub fn from_secret(secret: &[u8]) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let derive = |label: &[u8]| hmac::sign(&root, label);
        let seal = derive(b"vfps ui seal");
        let csrf = derive(b"vfps ui csrf");
        Self {
            seal: LessSafeKey::new(
                UnboundKey::new(&aead::AES_256_GCM, seal.as_ref())
                    .expect("an HMAC-SHA256 tag is a 32-byte AES key"),
            ),
            csrf: hmac::Key::new(hmac::HMAC_SHA256, csrf.as_ref()),
            shared: true,
        }
    }

    /// A key of this process alone (sessions end with it).
    pub fn random() -> Self {
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .expect("the system's random source works");
        Self {
            shared: false,
            ..Self::from_secret(&secret)
        }
    }

    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// `value` sealed for `purpose`, as cookie-safe text.
    pub fn seal(&self, purpose: Purpose, value: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's random source works");
        let mut sealed = value.to_vec();
        self.seal
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(purpose.aad()),
                &mut sealed,
            )
            .expect("a value under 64 GiB seals");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        B64.encode(out)
    }

    /// What was sealed for `purpose`, if `text` is such a seal by this key.
    pub fn open(&self, purpose: Purpose, text: &str) -> Option<Vec<u8>> {
        if text.len() > MAX_SEALED_BYTES {
            return None;
        }
        let raw = B64.decode(text.trim()).ok()?;
        if raw.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .seal
            .open_in_place(nonce, Aad::from(purpose.aad()), &mut sealed)
            .ok()?;
        Some(plain.to_vec())
    }

    /// The CSRF token of a session with this nonce.
    pub fn csrf_token(&self, session_nonce: &str) -> String {
        B64.encode(hmac::sign(&self.csrf, session_nonce.as_bytes()).as_ref())
    }

    /// Whether `token` is the CSRF token of a session with this nonce (in
    /// constant time).
    pub fn csrf_valid(&self, session_nonce: &str, token: &str) -> bool {
        match B64.decode(token.trim()) {
            Ok(tag) => hmac::verify(&self.csrf, session_nonce.as_bytes(), &tag).is_ok(),
            Err(_) => false,
        }
    }

    /// A session sealed into its cookie's value.
    pub fn seal_session(&self, session: &Session) -> String {
        let json = serde_json::to_vec(session).expect("a session serializes");
        self.seal(Purpose::Session, &json)
    }

    /// The session in a cookie's value, if it is one of ours and not expired.
    pub fn open_session(&self, text: &str) -> Option<Session> {
        let json = self.open(Purpose::Session, text)?;
        let session: Session = serde_json::from_slice(&json).ok()?;
        (session.expires_at > unix_now()).then_some(session)
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A random value, URL-safe: session nonces, OIDC state and PKCE verifiers.
pub fn random_text(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    SystemRandom::new()
        .fill(&mut raw)
        .expect("the system's random source works");
    B64.encode(raw)
}

/// One browser's session, as its cookie holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Who signed in (typed from the ID token: `jwt:<iss>#<sub>`); `None`: not signed in (with
    /// authorization off, the anonymous user everyone is).
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The name to show (`name`, else `preferred_username`, else `sub`).
    #[serde(rename = "n", default)]
    pub name: String,
    /// The roles of the ID token's role claim, judged by the configured rules
    /// on each request (as the API judges a JWT's).
    #[serde(rename = "r", default)]
    pub roles: Vec<String>,
    /// Unix seconds after which the cookie is worthless.
    #[serde(rename = "e")]
    pub expires_at: u64,
    /// Random, for the CSRF token.
    #[serde(rename = "c")]
    pub nonce: String,
    /// The ID token, for an RP-initiated sign-out's `id_token_hint`; left out
    /// when it would make the cookie too large.
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
    /// Unix milliseconds when the session began: an end of its user's
    /// sessions (see [`super::ends`]) ends those that began before it.
    #[serde(rename = "a", default)]
    pub issued_at_ms: u64,
    /// Unix seconds by which the user's roles must be confirmed again by the
    /// identity provider: a page renews the session then (its refresh
    /// token), or it ends; the API refuses it after. 0 (a cookie sealed
    /// before the rule): due now.
    #[serde(rename = "k", default)]
    pub recheck_by: u64,
    /// The provider's refresh token: how the roles are re-checked without the
    /// user. `None`: the session ends at its first re-check.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
}

/// How often a signed-in session's roles are confirmed again with the
/// identity provider unless `VFPS_UI_ROLE_RECHECK_INTERVAL` says more often.
pub const ROLE_RECHECK_INTERVAL: Duration = Duration::from_secs(15 * 60);

impl Session {
    /// A session of no one in particular: a browser's first visit.
    pub fn anonymous(lifetime: Duration) -> Self {
        Self {
            subject: None,
            name: String::new(),
            roles: Vec::new(),
            expires_at: unix_now() + lifetime.as_secs(),
            nonce: random_text(16),
            id_token: None,
            issued_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            recheck_by: unix_now() + ROLE_RECHECK_INTERVAL.as_secs(),
            refresh_token: None,
        }
    }

    /// Signed in, and its roles due to be confirmed again.
    pub fn recheck_due(&self) -> bool {
        self.signed_in() && self.recheck_by <= unix_now()
    }

    /// When the session began.
    pub fn issued_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.issued_at_ms)
    }

    pub fn signed_in(&self) -> bool {
        self.subject.is_some()
    }

    /// Who the session is to the authorization rules.
    pub fn principal(&self) -> Option<Principal> {
        let subject = self.subject.clone()?;
        Some(Principal {
            subject,
            token_id: None,
            access: Access::Roles(self.roles.clone()),
            valid_until: Some(UNIX_EPOCH + Duration::from_secs(self.expires_at)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SessionKey {
        SessionKey::from_secret(b"0123456789abcdef0123456789abcdef")
    }

    fn alice() -> Session {
        Session {
            subject: Some("alice".into()),
            name: "Alice".into(),
            roles: vec!["vfps-admin".into()],
            ..Session::anonymous(Duration::from_secs(60))
        }
    }

    #[test]
    fn a_session_sealed_by_one_replica_opens_on_another_with_the_same_key() {
        let a = alice();
        let sealed = key().seal_session(&a);
        assert_eq!(key().open_session(&sealed), Some(a.clone()));
        assert!(!sealed.contains("alice") && !sealed.contains("vfps-admin"));
        // Another key, a flipped byte, or the wrong purpose: nothing.
        let other = SessionKey::from_secret(b"another key, thirty-two bytes !!");
        assert_eq!(other.open_session(&sealed), None);
        let mut bytes = B64.decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(key().open_session(&B64.encode(bytes)), None);
        let sign_in = key().seal(Purpose::SignIn, &serde_json::to_vec(&a).unwrap());
        assert_eq!(key().open_session(&sign_in), None);
        assert_eq!(key().open_session("not base64 !"), None);
        assert_eq!(key().open_session(""), None);
    }

    #[test]
    fn an_expired_session_opens_to_nothing() {
        let old = Session {
            expires_at: unix_now() - 1,
            ..alice()
        };
        assert_eq!(key().open_session(&key().seal_session(&old)), None);
    }

    #[test]
    fn a_csrf_token_is_good_for_its_own_session_only() {
        let k = key();
        let a = alice();
        let token = k.csrf_token(&a.nonce);
        assert!(k.csrf_valid(&a.nonce, &token));
        let b = Session::anonymous(Duration::from_secs(60));
        assert!(!k.csrf_valid(&b.nonce, &token));
        assert!(!k.csrf_valid(&a.nonce, ""));
        assert!(!k.csrf_valid(&a.nonce, "garbage"));
        let other = SessionKey::from_secret(b"another key, thirty-two bytes !!");
        assert!(!other.csrf_valid(&a.nonce, &token));
    }

    #[test]
    fn a_signed_in_session_is_a_principal_with_its_roles() {
        let p = alice().principal().unwrap();
        assert_eq!(p.subject, "alice");
        assert_eq!(p.access, Access::Roles(vec!["vfps-admin".into()]));
        assert_eq!(Session::anonymous(Duration::from_secs(1)).principal(), None);
    }
}
