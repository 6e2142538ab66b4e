//! `VFPS_UI_*`: the admin UI's sessions (what upstream keeps in ASP.NET's data
//! protection keys, shared here by a setting so every replica accepts every
//! session).

use std::time::Duration;

use super::env::{duration, Env};

/// The least length of `VFPS_UI_SESSION_KEY`: 32 bytes of text.
pub const MIN_SESSION_KEY_BYTES: usize = 32;

#[derive(Clone, PartialEq, Eq)]
pub struct UiConfig {
    /// `VFPS_UI_SESSION_KEY`: the secret sealing session cookies. Every
    /// replica needs the same one, or a user sent to another replica is
    /// signed out; unset, each process makes its own (said at start-up).
    pub session_key: Option<Vec<u8>>,
    /// `VFPS_UI_SESSION_LIFETIME` (8h): how long a sign-in lasts, whatever the
    /// identity provider's token lifetimes (as upstream's cookie sessions).
    pub session_lifetime: Duration,
    /// `VFPS_UI_PUBLIC_URL`: the address users reach vfps at
    /// (`https://vfps.example.org`), for the sign-in's redirect address. Unset:
    /// the request's `Host` and, behind a proxy, `X-Forwarded-Proto`.
    pub public_url: Option<String>,
    /// `VFPS_UI_ROLE_RECHECK_INTERVAL` (15m, at most 15m): how often a
    /// signed-in session's roles are confirmed again with the identity
    /// provider; a session whose user lost them (or whose sign-in the provider
    /// ended) ends then.
    pub role_recheck: Duration,
}

impl std::fmt::Debug for UiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiConfig")
            .field("session_key", &self.session_key.as_ref().map(|_| "(set)"))
            .field("session_lifetime", &self.session_lifetime)
            .field("public_url", &self.public_url)
            .field("role_recheck", &self.role_recheck)
            .finish()
    }
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            session_key: None,
            session_lifetime: Duration::from_secs(8 * 3600),
            public_url: None,
            role_recheck: crate::auth::session::ROLE_RECHECK_INTERVAL,
        }
    }
}

impl UiConfig {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let d = Self::default();
        let session_key = env.text("VFPS_UI_SESSION_KEY").map(String::into_bytes);
        if let Some(k) = &session_key {
            if k.len() < MIN_SESSION_KEY_BYTES {
                // The length only: the key itself is never written anywhere.
                errors.push(format!(
                    "VFPS_UI_SESSION_KEY is {} bytes long; it must be at least {MIN_SESSION_KEY_BYTES} \
                     (e.g. `openssl rand -hex 32`)",
                    k.len()
                ));
            }
        }
        let session_lifetime =
            duration(env, errors, "VFPS_UI_SESSION_LIFETIME", d.session_lifetime);
        if session_lifetime < Duration::from_secs(60) {
            errors.push("VFPS_UI_SESSION_LIFETIME must be at least 1m".into());
        }
        let public_url = env
            .text("VFPS_UI_PUBLIC_URL")
            .map(|u| u.trim_end_matches('/').to_owned());
        if let Some(u) = &public_url {
            let scheme_ok = u.starts_with("https://") || u.starts_with("http://");
            let host = u.split_once("://").map_or("", |(_, rest)| rest);
            if !scheme_ok || host.is_empty() || host.contains(['?', '#']) {
                errors.push(format!(
                    "VFPS_UI_PUBLIC_URL={u:?} is not valid: expected http(s)://host[:port][/path]"
                ));
            }
        }
        let role_recheck = duration(env, errors, "VFPS_UI_ROLE_RECHECK_INTERVAL", d.role_recheck);
        if role_recheck < Duration::from_secs(1) || role_recheck > d.role_recheck {
            errors.push(format!(
                "VFPS_UI_ROLE_RECHECK_INTERVAL must be between 1s and {}m: a session's roles are \
                 confirmed with the identity provider at least that often",
                d.role_recheck.as_secs() / 60
            ));
        }
        Self {
            session_key,
            session_lifetime,
            public_url,
            role_recheck,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> (UiConfig, Vec<String>) {
        let env = Env::new(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut errors = Vec::new();
        (UiConfig::from_env(&env, &mut errors), errors)
    }

    #[test]
    fn a_short_session_key_is_refused_without_being_named() {
        let (_, errors) = parse(&[("VFPS_UI_SESSION_KEY", "hunter2")]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("7 bytes"), "{errors:?}");
        assert!(!errors[0].contains("hunter2"), "{errors:?}");
        let (ok, errors) = parse(&[("VFPS_UI_SESSION_KEY", &"k".repeat(32))]);
        assert!(errors.is_empty() && ok.session_key.is_some(), "{errors:?}");
        assert!(!format!("{ok:?}").contains("kkkk"));
    }

    #[test]
    fn the_public_url_must_be_an_http_address() {
        let (c, errors) = parse(&[("VFPS_UI_PUBLIC_URL", "https://vfps.example.org/")]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.public_url.as_deref(), Some("https://vfps.example.org"));
        for bad in ["vfps.example.org", "ftp://x", "https://"] {
            let (_, errors) = parse(&[("VFPS_UI_PUBLIC_URL", bad)]);
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        }
        let (_, errors) = parse(&[("VFPS_UI_SESSION_LIFETIME", "10s")]);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn roles_are_rechecked_at_least_every_fifteen_minutes() {
        let (c, errors) = parse(&[]);
        assert!(errors.is_empty());
        assert_eq!(c.role_recheck, Duration::from_secs(900));
        let (c, errors) = parse(&[("VFPS_UI_ROLE_RECHECK_INTERVAL", "2s")]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.role_recheck, Duration::from_secs(2));
        let (_, errors) = parse(&[("VFPS_UI_ROLE_RECHECK_INTERVAL", "1h")]);
        assert!(errors[0].contains("between 1s and 15m"), "{errors:?}");
    }
}
