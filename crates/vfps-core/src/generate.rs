//! The pseudonym generation methods of `vfps.api.v1`, producing exactly the formats
//! the deployed vfps produces.

use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine;
use rand::{Rng, RngCore};
use sha2::{Digest, Sha256};

use crate::{NamespaceSettings, OriginalValue};

/// `PseudonymGenerationMethod` of the wire contract. `UNSPECIFIED` generates
/// as method 1 and is kept as given (upstream stores and answers it so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GenerationMethod {
    Unspecified,
    SecureRandomBase64UrlEncoded,
    Sha256HexEncoded,
    Uuid4,
    Uuid7,
    FullRandomHexEncoded,
    FullRandomBase62Encoded,
    /// HMAC-SHA-256 of the original under the namespace's pseudonym key,
    /// upper-case hex: deterministic like SHA-256, but not computable
    /// without the key (held apart, `VFPS_KEYS`).
    HmacSha256HexEncoded,
}

/// A namespace's pseudonym key, for [`GenerationMethod::HmacSha256HexEncoded`]
/// (held by the key source's keyring; never in the database unwrapped).
pub trait PseudonymKey {
    /// HMAC-SHA-256 of `original` under the key.
    fn mac(&self, original: &str) -> [u8; 32];
}

impl GenerationMethod {
    /// From the enum number on the wire.
    pub fn from_wire(number: i32) -> Option<Self> {
        Some(match number {
            0 => Self::Unspecified,
            1 => Self::SecureRandomBase64UrlEncoded,
            2 => Self::Sha256HexEncoded,
            3 => Self::Uuid4,
            4 => Self::Uuid7,
            5 => Self::FullRandomHexEncoded,
            6 => Self::FullRandomBase62Encoded,
            7 => Self::HmacSha256HexEncoded,
            _ => return None,
        })
    }

    pub fn to_wire(self) -> i32 {
        match self {
            Self::Unspecified => 0,
            Self::SecureRandomBase64UrlEncoded => 1,
            Self::Sha256HexEncoded => 2,
            Self::Uuid4 => 3,
            Self::Uuid7 => 4,
            Self::FullRandomHexEncoded => 5,
            Self::FullRandomBase62Encoded => 6,
            Self::HmacSha256HexEncoded => 7,
        }
    }

    /// Parses a configuration value: the enum name (with or without the
    /// `PSEUDONYM_GENERATION_METHOD_` prefix, any case) or its number.
    pub fn parse_config(raw: &str) -> Option<Self> {
        let t = raw.trim();
        if let Ok(n) = t.parse::<i32>() {
            return Self::from_wire(n);
        }
        // The proto names (`PSEUDONYM_GENERATION_METHOD_UUID4`, `UUID4`) and
        // upstream's .NET enum names (`SecureRandomBase64UrlEncoded`, as its
        // appsettings.json writes them), case-insensitively.
        let upper = t.to_ascii_uppercase();
        let short = upper
            .strip_prefix("PSEUDONYM_GENERATION_METHOD_")
            .unwrap_or(&upper)
            .replace('_', "");
        Some(match short.as_str() {
            "UNSPECIFIED" => Self::Unspecified,
            "SECURERANDOMBASE64URLENCODED" => Self::SecureRandomBase64UrlEncoded,
            "SHA256HEXENCODED" => Self::Sha256HexEncoded,
            "UUID4" => Self::Uuid4,
            "UUID7" => Self::Uuid7,
            "FULLRANDOMHEXENCODED" => Self::FullRandomHexEncoded,
            "FULLRANDOMBASE62ENCODED" => Self::FullRandomBase62Encoded,
            "HMACSHA256HEXENCODED" => Self::HmacSha256HexEncoded,
            _ => return None,
        })
    }

    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Unspecified => "PSEUDONYM_GENERATION_METHOD_UNSPECIFIED",
            Self::SecureRandomBase64UrlEncoded => {
                "PSEUDONYM_GENERATION_METHOD_SECURE_RANDOM_BASE64URL_ENCODED"
            }
            Self::Sha256HexEncoded => "PSEUDONYM_GENERATION_METHOD_SHA256_HEX_ENCODED",
            Self::Uuid4 => "PSEUDONYM_GENERATION_METHOD_UUID4",
            Self::Uuid7 => "PSEUDONYM_GENERATION_METHOD_UUID7",
            Self::FullRandomHexEncoded => "PSEUDONYM_GENERATION_METHOD_FULL_RANDOM_HEX_ENCODED",
            Self::FullRandomBase62Encoded => {
                "PSEUDONYM_GENERATION_METHOD_FULL_RANDOM_BASE62_ENCODED"
            }
            Self::HmacSha256HexEncoded => "PSEUDONYM_GENERATION_METHOD_HMAC_SHA256_HEX_ENCODED",
        }
    }

    /// The only length a fixed-format method accepts.
    pub fn fixed_length(self) -> Option<u32> {
        match self {
            Self::Sha256HexEncoded | Self::HmacSha256HexEncoded => Some(64),
            Self::Uuid4 | Self::Uuid7 => Some(36),
            _ => None,
        }
    }

    /// Whether generating twice for the same original yields the same value. A
    /// collision of a deterministic method cannot be resolved by regenerating.
    pub fn is_deterministic(self) -> bool {
        matches!(self, Self::Sha256HexEncoded | Self::HmacSha256HexEncoded)
    }

    /// Whether generating needs the namespace's pseudonym key.
    pub fn is_keyed(self) -> bool {
        self == Self::HmacSha256HexEncoded
    }

    /// What a pseudonym of this method reveals by construction, when it
    /// reveals anything (docs/privacy.md): said when such a namespace is made.
    pub fn reveals(self) -> Option<&'static str> {
        match self {
            Self::Sha256HexEncoded => Some(
                "SHA-256 pseudonyms reveal their originals to anyone who can list the possible \
                 originals (patient numbers, dates of birth) and hash each: use a random method",
            ),
            Self::Uuid7 => Some(
                "UUIDv7 pseudonyms carry their creation time to the millisecond and sort in \
                 creation order: use a random method (UUIDv4, FULL_RANDOM_*)",
            ),
            _ => None,
        }
    }
}

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Bytes in front of the `length` random bytes of the base64url method,
/// where upstream puts a host tag and a tick counter: random here too, so the
/// pseudonym keeps upstream's length and alphabet and carries no host or time
/// (docs/privacy.md).
const BASE64URL_LEADING_BYTES: usize = 8;

/// `VFPS_UNSAFE_REVEALING_PSEUDONYMS`: the layout and orders that reveal,
/// restored on purpose for the harness's self-test of P10 only (as
/// `VFPS_UNSAFE_JOBS_RESTART_FROM_ZERO` is for P7): the base64url method puts
/// a host tag and the millisecond clock in front of its random bytes, jobs and
/// Bundles make pseudonyms in the originals' order with a time each, List
/// pages go newest first, and times are shown to the microsecond. The harness
/// must fail on it. Off unless set at startup.
static REVEALING: AtomicBool = AtomicBool::new(false);

/// Turns the revealing self-test mode on (startup only; see [`REVEALING`]).
pub fn reveal_for_self_test() {
    REVEALING.store(true, Ordering::Relaxed);
}

/// Whether the revealing self-test mode is on (see [`REVEALING`]).
pub fn revealing() -> bool {
    REVEALING.load(Ordering::Relaxed)
}

/// The self-test mode's leading bytes: SHA-256 of the instance name (the
/// host name without one) and the low 32 bits of the millisecond clock.
fn revealing_lead() -> [u8; BASE64URL_LEADING_BYTES] {
    static TAG: std::sync::OnceLock<[u8; 4]> = std::sync::OnceLock::new();
    let tag = TAG.get_or_init(|| {
        let host = std::env::var("VFPS_INSTANCE_NAME")
            .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
            .unwrap_or_default();
        let digest = Sha256::digest(host.trim().as_bytes());
        [digest[0], digest[1], digest[2], digest[3]]
    });
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut lead = [0u8; BASE64URL_LEADING_BYTES];
    lead[..4].copy_from_slice(tag);
    lead[4..].copy_from_slice(&((ms & u128::from(u32::MAX)) as u32).to_le_bytes());
    lead
}

/// Generates the full stored pseudonym: `prefix + generated + suffix`.
/// `key` is the namespace's pseudonym key, which only the keyed method
/// needs; without one it is refused (`FAILED_PRECONDITION`).
pub fn generate(
    settings: &NamespaceSettings,
    original: &OriginalValue,
    key: Option<&dyn PseudonymKey>,
) -> Result<String, crate::Error> {
    let len = settings.length as usize;
    let mut rng = rand::rng();
    let core = match settings.method {
        GenerationMethod::Unspecified | GenerationMethod::SecureRandomBase64UrlEncoded => {
            let mut bytes = vec![0u8; BASE64URL_LEADING_BYTES + len];
            rng.fill_bytes(&mut bytes);
            if revealing() {
                bytes[..BASE64URL_LEADING_BYTES].copy_from_slice(&revealing_lead());
            }
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        }
        GenerationMethod::Sha256HexEncoded => {
            hex::encode_upper(Sha256::digest(original.as_str().as_bytes()))
        }
        GenerationMethod::Uuid4 => uuid::Uuid::new_v4().hyphenated().to_string(),
        GenerationMethod::Uuid7 => uuid::Uuid::now_v7().hyphenated().to_string(),
        GenerationMethod::FullRandomHexEncoded => {
            let mut bytes = vec![0u8; len.div_ceil(2)];
            rng.fill_bytes(&mut bytes);
            let mut s = hex::encode(bytes);
            s.truncate(len);
            s
        }
        GenerationMethod::FullRandomBase62Encoded => (0..len)
            .map(|_| char::from(BASE62[rng.random_range(0..BASE62.len())]))
            .collect(),
        GenerationMethod::HmacSha256HexEncoded => {
            let key = key.ok_or_else(|| {
                crate::Error::failed_precondition(format!(
                    "{} needs the namespace's pseudonym key, and this replica has no key \
                     source (VFPS_KEYS)",
                    settings.method.wire_name()
                ))
            })?;
            hex::encode_upper(key.mac(original.as_str()))
        }
    };
    let prefix = settings.prefix.as_deref().unwrap_or("");
    let suffix = settings.suffix.as_deref().unwrap_or("");
    Ok(format!("{prefix}{core}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(method: GenerationMethod, length: u32) -> NamespaceSettings {
        NamespaceSettings::parse(method, length, Some("pre-".into()), Some("-suf".into())).unwrap()
    }

    fn core(s: &str) -> &str {
        s.strip_prefix("pre-")
            .unwrap()
            .strip_suffix("-suf")
            .unwrap()
    }

    fn original() -> OriginalValue {
        OriginalValue::parse("hello").unwrap()
    }

    #[test]
    fn base64url_of_length_32_is_54_url_safe_chars() {
        let p = generate(
            &settings(GenerationMethod::SecureRandomBase64UrlEncoded, 32),
            &original(),
            None,
        )
        .unwrap();
        let c = core(&p);
        assert_eq!(c.len(), 54);
        assert!(c
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'));
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(c)
            .unwrap();
        assert_eq!(decoded.len(), 40);
    }

    /// The default method put SHA-256 of the host name and the millisecond
    /// clock in front of the random bytes: every pseudonym of one replica
    /// shared its first 6 characters, and any two made in the same 49 days
    /// told their creation times apart to the millisecond.
    #[test]
    fn base64url_pseudonyms_carry_no_host_and_no_time() {
        let s = settings(GenerationMethod::SecureRandomBase64UrlEncoded, 32);
        let made: Vec<Vec<u8>> = (0..64)
            .map(|_| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(core(&generate(&s, &original(), None).unwrap()))
                    .unwrap()
            })
            .collect();
        // Made within a few milliseconds on one host: with a host tag and a
        // clock, the first 6 bytes would repeat; random, 64 draws of 48 bits
        // never do.
        let leading: std::collections::HashSet<&[u8]> = made.iter().map(|b| &b[..6]).collect();
        assert_eq!(leading.len(), made.len(), "pseudonyms share a leading tag");
        // And no byte position is constant across them.
        for i in 0..8 {
            let values: std::collections::HashSet<u8> = made.iter().map(|b| b[i]).collect();
            assert!(values.len() > 1, "byte {i} is the same in every pseudonym");
        }
    }

    #[test]
    fn sha256_is_upper_case_hex_of_the_original() {
        let p = generate(
            &settings(GenerationMethod::Sha256HexEncoded, 64),
            &original(),
            None,
        )
        .unwrap();
        assert_eq!(
            core(&p),
            "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824"
        );
    }

    #[test]
    fn uuids_are_lower_case_hyphenated_with_their_version() {
        let v4 = generate(&settings(GenerationMethod::Uuid4, 36), &original(), None).unwrap();
        let v7 = generate(&settings(GenerationMethod::Uuid7, 36), &original(), None).unwrap();
        for (p, version) in [(&v4, 4), (&v7, 7)] {
            let u = uuid::Uuid::parse_str(core(p)).unwrap();
            assert_eq!(u.get_version_num(), version);
            assert_eq!(core(p), core(p).to_lowercase());
            assert_eq!(core(p).len(), 36);
        }
    }

    #[test]
    fn hex_and_base62_have_exactly_length_chars() {
        for len in [1, 7, 32] {
            let h = generate(
                &settings(GenerationMethod::FullRandomHexEncoded, len),
                &original(),
                None,
            )
            .unwrap();
            assert_eq!(core(&h).len(), len as usize);
            assert!(core(&h)
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            let b = generate(
                &settings(GenerationMethod::FullRandomBase62Encoded, len),
                &original(),
                None,
            )
            .unwrap();
            assert_eq!(core(&b).len(), len as usize);
            assert!(core(&b).chars().all(|c| c.is_ascii_alphanumeric()));
        }
    }

    #[test]
    fn config_names_and_numbers_parse() {
        assert_eq!(
            GenerationMethod::parse_config("uuid4"),
            Some(GenerationMethod::Uuid4)
        );
        assert_eq!(
            GenerationMethod::parse_config("PSEUDONYM_GENERATION_METHOD_SHA256_HEX_ENCODED"),
            Some(GenerationMethod::Sha256HexEncoded)
        );
        assert_eq!(
            GenerationMethod::parse_config("0"),
            Some(GenerationMethod::Unspecified)
        );
        assert_eq!(
            GenerationMethod::parse_config("Unspecified"),
            Some(GenerationMethod::Unspecified)
        );
        // Upstream's appsettings.json writes its .NET enum names.
        assert_eq!(
            GenerationMethod::parse_config("SecureRandomBase64UrlEncoded"),
            Some(GenerationMethod::SecureRandomBase64UrlEncoded)
        );
        assert_eq!(
            GenerationMethod::parse_config("FullRandomBase62Encoded"),
            Some(GenerationMethod::FullRandomBase62Encoded)
        );
        assert_eq!(GenerationMethod::parse_config("9"), None);
        assert_eq!(GenerationMethod::parse_config("md5"), None);
    }

    /// A stand-in key: the keyring's is HMAC-SHA-256 (vfps-keys tests it).
    struct Salted(&'static str);

    impl PseudonymKey for Salted {
        fn mac(&self, original: &str) -> [u8; 32] {
            Sha256::digest(format!("{}{original}", self.0)).into()
        }
    }

    #[test]
    fn the_keyed_method_needs_its_key_and_follows_it() {
        let s = settings(GenerationMethod::HmacSha256HexEncoded, 64);
        let e = generate(&s, &original(), None).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::FailedPrecondition);
        assert!(e.message.contains("VFPS_KEYS"), "{}", e.message);
        let a = generate(&s, &original(), Some(&Salted("a"))).unwrap();
        assert_eq!(a, generate(&s, &original(), Some(&Salted("a"))).unwrap());
        assert_ne!(a, generate(&s, &original(), Some(&Salted("b"))).unwrap());
        let c = core(&a);
        assert_eq!(c.len(), 64);
        assert!(c
            .chars()
            .all(|ch| ch.is_ascii_digit() || ch.is_ascii_uppercase()));
        assert_ne!(c, hex::encode_upper(Sha256::digest("hello")));
        assert_eq!(
            GenerationMethod::parse_config("HmacSha256HexEncoded"),
            Some(GenerationMethod::HmacSha256HexEncoded)
        );
        assert_eq!(
            GenerationMethod::from_wire(7),
            Some(GenerationMethod::HmacSha256HexEncoded)
        );
        assert!(GenerationMethod::HmacSha256HexEncoded.reveals().is_none());
    }
}
