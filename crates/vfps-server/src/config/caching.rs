//! `Pseudonymization__Caching__*`: the namespace and pseudonym caches.

use std::time::Duration;

use super::env::{parse_bool, parse_duration, setting, Env};

/// `Pseudonymization__Caching__*`, as upstream: one absolute expiration and size
/// limit (entries) for both caches, each cache switched on by itself, and each
/// limit overridable per cache (`…__Namespaces__SizeLimit`, …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caching {
    /// `…__Namespaces__IsEnabled`: saves a namespace read on every call.
    pub namespaces: bool,
    /// `…__Pseudonyms__IsEnabled`: saves the upsert of a repeated Create.
    pub pseudonyms: bool,
    /// `…__AbsoluteExpiration`: an entry expires this long after it was read
    /// from the store, however often it is served, bounding how stale it gets.
    pub absolute_expiration: Duration,
    /// `…__SizeLimit`: entries per cache, bounding each replica's memory.
    pub size_limit: usize,
    /// `…__Namespaces__{AbsoluteExpiration,SizeLimit}`, over the shared ones.
    pub namespace_limits: CacheLimits,
    /// `…__Pseudonyms__{AbsoluteExpiration,SizeLimit}`, over the shared ones.
    pub pseudonym_limits: CacheLimits,
}

/// One cache's own limits; unset ones are the shared ones.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheLimits {
    pub absolute_expiration: Option<Duration>,
    pub size_limit: Option<usize>,
}

impl Caching {
    /// The namespace cache's expiration and size.
    pub fn namespace_cache(&self) -> (Duration, usize) {
        self.resolve(self.namespace_limits)
    }
    /// The pseudonym cache's expiration and size.
    pub fn pseudonym_cache(&self) -> (Duration, usize) {
        self.resolve(self.pseudonym_limits)
    }
    fn resolve(&self, own: CacheLimits) -> (Duration, usize) {
        (
            own.absolute_expiration.unwrap_or(self.absolute_expiration),
            own.size_limit.unwrap_or(self.size_limit),
        )
    }
}

impl Default for Caching {
    fn default() -> Self {
        Self {
            namespaces: false,
            pseudonyms: false,
            absolute_expiration: Duration::from_secs(3600),
            size_limit: 32,
            namespace_limits: CacheLimits::default(),
            pseudonym_limits: CacheLimits::default(),
        }
    }
}

impl Caching {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let defaults = Self::default();
        Self {
            namespaces: setting(
                env,
                errors,
                "Pseudonymization__Caching__Namespaces__IsEnabled",
                defaults.namespaces,
                parse_bool,
                "true or false",
            ),
            pseudonyms: setting(
                env,
                errors,
                "Pseudonymization__Caching__Pseudonyms__IsEnabled",
                defaults.pseudonyms,
                parse_bool,
                "true or false",
            ),
            absolute_expiration: expiration(
                env,
                errors,
                "Pseudonymization__Caching__AbsoluteExpiration",
            )
            .unwrap_or(defaults.absolute_expiration),
            size_limit: size_limit(env, errors, "Pseudonymization__Caching__SizeLimit")
                .unwrap_or(defaults.size_limit),
            namespace_limits: CacheLimits {
                absolute_expiration: expiration(
                    env,
                    errors,
                    "Pseudonymization__Caching__Namespaces__AbsoluteExpiration",
                ),
                size_limit: size_limit(
                    env,
                    errors,
                    "Pseudonymization__Caching__Namespaces__SizeLimit",
                ),
            },
            pseudonym_limits: CacheLimits {
                absolute_expiration: expiration(
                    env,
                    errors,
                    "Pseudonymization__Caching__Pseudonyms__AbsoluteExpiration",
                ),
                size_limit: size_limit(
                    env,
                    errors,
                    "Pseudonymization__Caching__Pseudonyms__SizeLimit",
                ),
            },
        }
    }
}

/// A cache expiration, if set (and valid).
fn expiration(env: &Env, errors: &mut Vec<String>, key: &str) -> Option<Duration> {
    env.get(key)?;
    Some(setting(
        env,
        errors,
        key,
        Duration::ZERO,
        parse_duration,
        "a duration such as 0.01:00:00, 01:00:00 or 3600s",
    ))
}

/// A cache size limit, if set (and valid).
fn size_limit(env: &Env, errors: &mut Vec<String>, key: &str) -> Option<usize> {
    env.get(key)?;
    Some(setting(
        env,
        errors,
        key,
        1,
        |v| v.trim().parse::<usize>().ok().filter(|n| *n > 0),
        "a positive number of entries",
    ))
}
