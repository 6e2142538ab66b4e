//! Valid-by-construction domain types and the records the store keeps.

use std::time::SystemTime;

use crate::{generate::GenerationMethod, Error};

/// Longest namespace name, in bytes. Names are part of two B-tree index keys, whose
/// rows PostgreSQL caps at about 2.7 kB.
pub const MAX_NAMESPACE_NAME_BYTES: usize = 128;
/// Longest original value, in bytes (same index-row reason).
pub const MAX_ORIGINAL_VALUE_BYTES: usize = 2048;
/// Longest generated part of a pseudonym, in characters or bytes of randomness.
pub const MAX_PSEUDONYM_LENGTH: u32 = 1024;
/// Longest prefix or suffix, in bytes.
pub const MAX_AFFIX_BYTES: usize = 64;
/// Most new pseudonyms one `$pseudonymize-multiple` may make.
pub const MAX_NEW_PSEUDONYMS: u32 = 1000;
/// Most pseudonyms one original may have in a multi-pseudonym namespace:
/// `count` 0 answers all of them at once, so their number bounds that
/// answer. A call that would pass it is refused; calls racing for one
/// original may pass it by one call's count.
pub const MAX_PSEUDONYMS_PER_ORIGINAL: u32 = 1000;
/// Longest identifier system a namespace may declare for its originals (a URI).
pub const MAX_SYSTEM_BYTES: usize = 1024;
/// Longest pseudonym a reverse lookup accepts, in bytes: more than any namespace
/// can generate (the longest method output plus both affixes).
pub const MAX_PSEUDONYM_VALUE_BYTES: usize = 4096;
/// Longest namespace description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest page token accepted: one this service issued is far shorter (a
/// timestamp and a pseudonym value), so anything longer is refused unread.
pub const MAX_PAGE_TOKEN_BYTES: usize = 8192;

/// Rejects text that not every store can keep: PostgreSQL's `text` cannot hold
/// U+0000, SQLite's can, and the two stores must agree. Checked before a value
/// joins a batch, so it fails its own call and no other.
pub fn storable<'a>(what: &str, raw: &'a str) -> Result<&'a str, Error> {
    if raw.contains('\0') {
        return Err(Error::invalid_argument(format!(
            "{what} must not contain the NUL character (U+0000)"
        )));
    }
    Ok(raw)
}

/// What an anonymized entry's original becomes (`$anonymize-original`): a
/// run longer than any original may be, so that no original ever equals it,
/// ending in a value unique in its namespace (`unique`), so that the entry's
/// pseudonym stays reserved in the table's place for it and resolves to no
/// one. Every lookup leaves such entries out ([`is_anonymized`]).
pub fn anonymized_original(unique: &str) -> String {
    let mut s = "~".repeat(MAX_ORIGINAL_VALUE_BYTES + 1);
    s.push_str(unique);
    s
}

/// Whether a stored original is an anonymized entry's (see
/// [`anonymized_original`]): longer than any original may be.
pub fn is_anonymized(stored_original: &str) -> bool {
    stored_original.len() > MAX_ORIGINAL_VALUE_BYTES
}

/// The name of a namespace: non-blank, at most [`MAX_NAMESPACE_NAME_BYTES`], no
/// control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceName(String);

impl NamespaceName {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw.trim().is_empty() {
            return Err(Error::invalid_argument("namespace name must not be blank"));
        }
        if raw.len() > MAX_NAMESPACE_NAME_BYTES {
            return Err(Error::invalid_argument(format!(
                "namespace name is {} bytes long, at most {MAX_NAMESPACE_NAME_BYTES} are allowed",
                raw.len()
            )));
        }
        if raw.chars().any(char::is_control) {
            return Err(Error::invalid_argument(
                "namespace name must not contain control characters",
            ));
        }
        Ok(Self(raw.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NamespaceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An original value: personal data. Deliberately has no `Display` and a redacting
/// `Debug`, so it cannot end up in a log line by accident.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OriginalValue(String);

impl OriginalValue {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw.trim().is_empty() {
            return Err(Error::invalid_argument("original value must not be blank"));
        }
        if raw.len() > MAX_ORIGINAL_VALUE_BYTES {
            return Err(Error::invalid_argument(format!(
                "original value is {} bytes long, at most {MAX_ORIGINAL_VALUE_BYTES} are allowed",
                raw.len()
            )));
        }
        Ok(Self(storable("original value", raw)?.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for OriginalValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OriginalValue(<{} bytes redacted>)", self.0.len())
    }
}

/// A pseudonym a caller asks about (reverse lookup, page tokens): non-blank,
/// storable, at most [`MAX_PSEUDONYM_VALUE_BYTES`]. Personal data like the
/// original it stands for: no `Display`, a redacting `Debug`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PseudonymValue(String);

impl PseudonymValue {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw.trim().is_empty() {
            return Err(Error::invalid_argument("pseudonym value must not be blank"));
        }
        if raw.len() > MAX_PSEUDONYM_VALUE_BYTES {
            return Err(Error::invalid_argument(format!(
                "pseudonym value is {} bytes long, at most {MAX_PSEUDONYM_VALUE_BYTES} are allowed",
                raw.len()
            )));
        }
        Ok(Self(storable("pseudonym value", raw)?.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PseudonymValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PseudonymValue(<{} bytes redacted>)", self.0.len())
    }
}

/// How a namespace makes pseudonyms. Only valid combinations can be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSettings {
    pub method: GenerationMethod,
    /// Length of the generated part, excluding prefix and suffix.
    pub length: u32,
    pub prefix: Option<String>,
    pub suffix: Option<String>,
    /// Whether an original's entry may be deleted (`$delete-pseudonym`), after
    /// which a Create of it makes a new pseudonym. Off unless asked for at
    /// creation: a deletion splits a subject's data in two.
    pub deletable: bool,
    /// Whether an original may have many pseudonyms (the MII interface's
    /// multi-pseudonym domains, `$pseudonymize-multiple`). Such a namespace
    /// answers no single-pseudonym Create: which of an original's pseudonyms
    /// would it be? Off unless asked for at creation.
    pub multi: bool,
    /// The identifier system its originals belong to (an MII `original`'s
    /// `system`): a namespace holds the values of one system, so equal values
    /// of two systems are never taken for one subject. `None` until declared
    /// or adopted by the first pseudonymization that names one (see
    /// [`OriginalSystem`]).
    pub original_system: Option<String>,
    /// Whether its originals are sealed at rest (docs/privacy.md): stored as
    /// a blind index beside an AEAD ciphertext under the namespace's data
    /// key, never in plain text. Set at creation when the deployment has a
    /// key source (`VFPS_KEYS`).
    pub sealed: bool,
    /// Whether its rows are being moved to the form `sealed` and
    /// `index_version` say (sealed, plain again, or indexed under a new key:
    /// `vfps keys encrypt-existing | decrypt-all | rotate --reindex`): until
    /// they all are, an original may still be stored in the old form, and
    /// every lookup by original tries both. No row is written in the old
    /// form meanwhile (the store refuses it).
    pub moving: bool,
    /// The key version of a sealed namespace's blind indexes (`~k<it>.…`).
    pub index_version: u32,
    /// While moving to sealed: the key version of the blind indexes rows
    /// are moved from (`None`: from plain originals).
    pub moving_from_index: Option<u32>,
}

/// An identifier system as a namespace may declare it: a non-blank URI of at
/// most [`MAX_SYSTEM_BYTES`] without control characters or spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginalSystem(String);

impl OriginalSystem {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw.is_empty()
            || raw.len() > MAX_SYSTEM_BYTES
            || raw.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(Error::invalid_argument(format!(
                "an identifier system must be a URI of 1 to {MAX_SYSTEM_BYTES} bytes without \
                 spaces or control characters"
            )));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl NamespaceSettings {
    /// These settings, with the originals' identifier system declared (or
    /// not).
    pub fn with_original_system(self, system: Option<OriginalSystem>) -> Self {
        Self {
            original_system: system.map(OriginalSystem::into_string),
            ..self
        }
    }

    /// These settings, with entries deletable or not.
    pub fn with_deletion(self, deletable: bool) -> Self {
        Self { deletable, ..self }
    }

    /// These settings, single- or multi-pseudonym. A multi-pseudonym
    /// namespace needs a random method: a method that derives the pseudonym
    /// from the original (SHA-256) has only one to give (`INVALID_ARGUMENT`).
    pub fn with_multi(self, multi: bool) -> Result<Self, Error> {
        if multi && self.method.is_deterministic() {
            return Err(Error::invalid_argument(format!(
                "a multi-pseudonym namespace needs a random generation method: {} derives \
                 the one pseudonym an original can have from it",
                self.method.wire_name()
            )));
        }
        Ok(Self { multi, ..self })
    }

    /// Checks the wire contract's rules: a zero length or a wrong length for a
    /// fixed-length method is `OUT_OF_RANGE`.
    pub fn parse(
        method: GenerationMethod,
        length: u32,
        prefix: Option<String>,
        suffix: Option<String>,
    ) -> Result<Self, Error> {
        if length == 0 {
            return Err(Error::out_of_range(
                "pseudonym length must be greater than 0",
            ));
        }
        if let Some(required) = method.fixed_length() {
            if length != required {
                return Err(Error::out_of_range(format!(
                    "pseudonym length must be {required} for {}, got {length}",
                    method.wire_name()
                )));
            }
        }
        if length > MAX_PSEUDONYM_LENGTH {
            return Err(Error::out_of_range(format!(
                "pseudonym length must be at most {MAX_PSEUDONYM_LENGTH}, got {length}"
            )));
        }
        for (what, affix) in [("prefix", &prefix), ("suffix", &suffix)] {
            if let Some(a) = affix {
                if a.len() > MAX_AFFIX_BYTES || a.chars().any(char::is_control) {
                    return Err(Error::invalid_argument(format!(
                        "pseudonym {what} must be at most {MAX_AFFIX_BYTES} bytes without control characters"
                    )));
                }
            }
        }
        Ok(Self {
            method,
            length,
            prefix,
            suffix,
            deletable: false,
            multi: false,
            original_system: None,
            sealed: false,
            moving: false,
            index_version: 1,
            moving_from_index: None,
        })
    }

    /// These settings, with originals sealed at rest or not.
    pub fn with_sealed(self, sealed: bool) -> Self {
        Self { sealed, ..self }
    }

    /// These settings, with rows being moved to the form `sealed` says.
    pub fn with_moving(self, moving: bool) -> Self {
        Self { moving, ..self }
    }

    /// These settings, with blind indexes under key version `version`, and
    /// rows moved from those under `from` (a re-index) or not.
    pub fn with_index(self, version: u32, from: Option<u32>) -> Self {
        Self {
            index_version: version,
            moving_from_index: from,
            ..self
        }
    }
}

/// A namespace as stored. Namespaces are immutable once created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub name: NamespaceName,
    /// Tells incarnations of one name apart: a namespace deleted and created again
    /// gets a new uid, so a replica holding the old one in a cache is caught by the
    /// store instead of writing with the old settings. Never on the wire.
    pub uid: NamespaceUid,
    pub description: String,
    pub settings: NamespaceSettings,
    pub created_at: SystemTime,
    pub last_updated_at: SystemTime,
}

/// The identity of one incarnation of a namespace (see [`Namespace::uid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NamespaceUid(pub i64);

impl NamespaceUid {
    /// A fresh random uid. 0 is left to namespaces created before uids existed.
    pub fn random() -> Self {
        loop {
            let uid = rand::random::<i64>();
            if uid != 0 {
                return Self(uid);
            }
        }
    }
}

/// A stored mapping. `Debug` redacts both values.
#[derive(Clone, PartialEq, Eq)]
pub struct Pseudonym {
    pub namespace: NamespaceName,
    /// The original; in a sealed namespace's row as the store reads it, its
    /// blind index until the service opens [`Pseudonym::original_sealed`].
    pub original_value: String,
    /// A sealed namespace's original as stored: the AEAD ciphertext
    /// (`vfps-keys`), opened by the service; `None` in plain namespaces.
    pub original_sealed: Option<Vec<u8>>,
    pub pseudonym_value: String,
    pub created_at: SystemTime,
    pub last_updated_at: SystemTime,
}

impl std::fmt::Debug for Pseudonym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pseudonym")
            .field("namespace", &self.namespace)
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

/// One page of a listing. Items carry no original value at the API; the store
/// returns what it has and the API layer drops it.
#[derive(Debug, Clone)]
pub struct PseudonymPage {
    pub items: Vec<Pseudonym>,
    /// Where the next page starts, if there is one.
    pub next: Option<PageCursor>,
    pub total_size: Option<i64>,
}

/// Keyset position: the last item of a page. Pages go in descending order of
/// the pseudonym, which carries nothing of the originals, of their order or
/// of when they were made (docs/privacy.md): a listing hands a `read` caller
/// no order of originals and no creation order. The token is the pseudonym
/// (which the caller already sees), nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    pub pseudonym_value: String,
}

/// What a page token starts with in this form; earlier tokens were
/// `<micros>:<pseudonym>` and are still taken (their time is not used).
const PAGE_TOKEN_MARK: &str = "p:";

impl PageCursor {
    /// Encodes as opaque URL-safe base64.
    pub fn encode(&self) -> String {
        use base64::Engine;
        let raw = format!("{PAGE_TOKEN_MARK}{}", self.pseudonym_value);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    pub fn decode(token: &str) -> Result<Self, Error> {
        use base64::Engine;
        let bad = || Error::invalid_argument("page_token is not a token this service issued");
        if token.len() > MAX_PAGE_TOKEN_BYTES {
            return Err(Error::invalid_argument(format!(
                "page_token is {} bytes long, at most {MAX_PAGE_TOKEN_BYTES} are allowed",
                token.len()
            )));
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let pseudonym = match raw.strip_prefix(PAGE_TOKEN_MARK) {
            Some(p) => p,
            None => {
                let (micros, pseudonym) = raw.split_once(':').ok_or_else(bad)?;
                micros.parse::<i64>().map_err(|_| bad())?;
                pseudonym
            }
        };
        Ok(Self {
            pseudonym_value: PseudonymValue::parse(pseudonym)
                .map_err(|_| bad())?
                .as_str()
                .to_owned(),
        })
    }
}

/// A creation or update time as callers see it: the UTC day (docs/privacy.md).
/// Pseudonyms made together (an original's siblings, a batch's members) share
/// their stored times to the microsecond; at a day's resolution they share it
/// with everything else made that day.
pub fn shown_time(t: SystemTime) -> SystemTime {
    if crate::generate::revealing() {
        return t;
    }
    let micros = to_micros(t);
    from_micros(micros - micros.rem_euclid(86_400_000_000))
}

/// Converts a `SystemTime` to microseconds since the UNIX epoch (the stores'
/// resolution).
pub fn to_micros(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// Inverse of [`to_micros`].
pub fn from_micros(micros: i64) -> SystemTime {
    let d = std::time::Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

/// The current time truncated to microseconds, so what is returned equals what is stored.
pub fn now_micros() -> SystemTime {
    from_micros(to_micros(SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_names_and_values_are_rejected() {
        assert!(NamespaceName::parse(" \t").is_err());
        assert!(OriginalValue::parse("   ").is_err());
        assert!(OriginalValue::parse("").is_err());
        assert!(OriginalValue::parse("x").is_ok());
    }

    #[test]
    fn nul_characters_are_rejected_everywhere_a_caller_sends_text() {
        let e = OriginalValue::parse("a\0b").unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::InvalidArgument);
        assert!(e.message.contains("NUL"), "{e}");
        assert!(PseudonymValue::parse("p\0").is_err());
        assert!(NamespaceName::parse("n\0").is_err());
        assert!(storable("description", "d\0").is_err());
        let token = PageCursor {
            pseudonym_value: "p\0".into(),
        }
        .encode();
        assert!(PageCursor::decode(&token).is_err());
    }

    #[test]
    fn pseudonym_values_are_bounded_and_never_shown() {
        assert!(PseudonymValue::parse(" ").is_err());
        assert!(PseudonymValue::parse(&"x".repeat(MAX_PSEUDONYM_VALUE_BYTES + 1)).is_err());
        let v = PseudonymValue::parse("secret-pseudonym").unwrap();
        assert!(!format!("{v:?}").contains("secret"));
        assert_ne!(NamespaceUid::random(), NamespaceUid::random());
    }

    #[test]
    fn original_value_debug_never_shows_the_value() {
        let v = OriginalValue::parse("secret-patient-id").unwrap();
        assert!(!format!("{v:?}").contains("secret"));
    }

    #[test]
    fn a_multi_pseudonym_namespace_needs_a_random_method() {
        let sha =
            NamespaceSettings::parse(GenerationMethod::Sha256HexEncoded, 64, None, None).unwrap();
        let e = sha.clone().with_multi(true).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::InvalidArgument);
        assert!(e.message.contains("random generation method"), "{e}");
        assert!(!sha.with_multi(false).unwrap().multi);
        let hex = NamespaceSettings::parse(GenerationMethod::FullRandomHexEncoded, 8, None, None)
            .unwrap();
        assert!(!hex.multi, "off unless asked for");
        assert!(hex.with_multi(true).unwrap().multi);
    }

    #[test]
    fn fixed_length_methods_demand_their_length() {
        let e = NamespaceSettings::parse(GenerationMethod::Sha256HexEncoded, 32, None, None)
            .unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::OutOfRange);
        assert!(
            NamespaceSettings::parse(GenerationMethod::Sha256HexEncoded, 64, None, None).is_ok()
        );
        let e = NamespaceSettings::parse(GenerationMethod::Uuid4, 0, None, None).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::OutOfRange);
    }

    #[test]
    fn page_cursor_round_trips_and_rejects_garbage() {
        let c = PageCursor {
            pseudonym_value: "a:b".into(),
        };
        assert_eq!(PageCursor::decode(&c.encode()).unwrap(), c);
        assert!(PageCursor::decode("!!!").is_err());
        assert!(PageCursor::decode("bm9jb2xvbg").is_err());
        // A token of the earlier form (`<micros>:<pseudonym>`) still pages on.
        use base64::Engine;
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("1700000000123456:p-9");
        assert_eq!(PageCursor::decode(&old).unwrap().pseudonym_value, "p-9");
    }

    /// Callers see the day a pseudonym was made, not its microsecond:
    /// siblings and batch members stored with one time share it with all
    /// made that day.
    #[test]
    fn shown_times_are_days() {
        let t = from_micros(1_765_100_000_123_456);
        assert_eq!(to_micros(shown_time(t)), 1_765_065_600_000_000);
        assert_eq!(shown_time(shown_time(t)), shown_time(t));
    }

    #[test]
    fn micros_round_trip() {
        let t = now_micros();
        assert_eq!(from_micros(to_micros(t)), t);
    }
}
