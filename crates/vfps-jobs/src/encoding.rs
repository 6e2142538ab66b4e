//! The text encodings a CSV job may name, as upstream takes them from .NET:
//! UTF-8 (with or without a byte order mark), UTF-16 (little- or big-endian),
//! ISO-8859-1 and Windows-1252.
//!
//! A job never re-encodes what it does not change: the CSV structure is found
//! in the raw code units (the delimiter, quote and line breaks are ASCII in
//! every encoding here), unmapped fields are copied byte for byte, and only a
//! mapped field is decoded and its replacement encoded.

use std::fmt;

/// A character encoding of a CSV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Utf8,
    Utf16Le,
    Utf16Be,
    /// Every byte is the code point of the same number (true ISO-8859-1, as
    /// .NET's `iso-8859-1`, not the WHATWG alias of Windows-1252).
    Latin1,
    Windows1252,
}

/// Windows-1252's 0x80..=0x9F; the five bytes it leaves undefined map to the
/// C1 control of the same number, as .NET and WHATWG decode them.
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{0081}', '\u{201A}', '\u{0192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{02C6}', '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{008D}', '\u{017D}', '\u{008F}',
    '\u{0090}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{02DC}', '\u{2122}', '\u{0161}', '\u{203A}', '\u{0153}', '\u{009D}', '\u{017E}', '\u{0178}',
];

/// Why bytes could not be decoded, or a value encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodingError {
    #[error("a byte sequence that is not valid {0}")]
    Undecodable(Encoding),
    #[error("a character that {0} cannot represent")]
    Unencodable(Encoding),
}

impl Encoding {
    /// Every name accepted (lower case), as .NET's `Encoding.GetEncoding` knows them.
    pub const NAMES: &'static [(&'static str, Encoding)] = &[
        ("utf-8", Self::Utf8),
        ("utf8", Self::Utf8),
        ("utf-16", Self::Utf16Le),
        ("utf16", Self::Utf16Le),
        ("utf-16le", Self::Utf16Le),
        ("unicode", Self::Utf16Le),
        ("utf-16be", Self::Utf16Be),
        ("unicodefffe", Self::Utf16Be),
        ("iso-8859-1", Self::Latin1),
        ("iso8859-1", Self::Latin1),
        ("latin1", Self::Latin1),
        ("l1", Self::Latin1),
        ("windows-1252", Self::Windows1252),
        ("cp1252", Self::Windows1252),
        ("x-cp1252", Self::Windows1252),
    ];

    /// The encoding a name denotes (case-insensitive, surrounding blanks ignored).
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase();
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| *e)
    }

    /// The canonical name, as jobs are shown.
    pub fn name(self) -> &'static str {
        match self {
            Self::Utf8 => "utf-8",
            Self::Utf16Le => "utf-16",
            Self::Utf16Be => "utf-16BE",
            Self::Latin1 => "iso-8859-1",
            Self::Windows1252 => "windows-1252",
        }
    }

    /// Bytes per code unit: 2 for UTF-16, else 1.
    pub fn unit_bytes(self) -> usize {
        match self {
            Self::Utf16Le | Self::Utf16Be => 2,
            _ => 1,
        }
    }

    /// The code unit at byte `i` (which must be a unit boundary).
    #[inline]
    pub fn unit(self, bytes: &[u8], i: usize) -> u16 {
        match self {
            Self::Utf16Le => u16::from_le_bytes([bytes[i], bytes[i + 1]]),
            Self::Utf16Be => u16::from_be_bytes([bytes[i], bytes[i + 1]]),
            _ => u16::from(bytes[i]),
        }
    }

    /// The byte order mark this encoding's files may start with.
    pub fn bom(self) -> &'static [u8] {
        match self {
            Self::Utf8 => b"\xEF\xBB\xBF",
            Self::Utf16Le => b"\xFF\xFE",
            Self::Utf16Be => b"\xFE\xFF",
            Self::Latin1 | Self::Windows1252 => b"",
        }
    }

    /// The encoding a file starting with `head` is actually in, given that
    /// `self` was chosen, and the length of its byte order mark. A UTF-16 file
    /// says its byte order by its mark (as .NET's reader detects it); a mark of
    /// another Unicode encoding than the one chosen is refused.
    pub fn detect(self, head: &[u8]) -> Result<(Self, usize), String> {
        let marks = [Self::Utf8, Self::Utf16Le, Self::Utf16Be];
        let Some(found) = marks.into_iter().find(|e| head.starts_with(e.bom())) else {
            return Ok((self, 0));
        };
        match (self, found) {
            (a, b) if a == b => Ok((a, b.bom().len())),
            (Self::Utf16Le | Self::Utf16Be, Self::Utf16Le | Self::Utf16Be) => {
                Ok((found, found.bom().len()))
            }
            _ => Err(format!(
                "the file starts with a {} byte order mark, but the job's encoding is {}",
                found.name(),
                self.name()
            )),
        }
    }

    /// Decodes a field's bytes.
    pub fn decode(self, bytes: &[u8]) -> Result<String, EncodingError> {
        match self {
            Self::Utf8 => std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|_| EncodingError::Undecodable(self)),
            Self::Utf16Le | Self::Utf16Be => {
                if !bytes.len().is_multiple_of(2) {
                    return Err(EncodingError::Undecodable(self));
                }
                let units = (0..bytes.len()).step_by(2).map(|i| self.unit(bytes, i));
                char::decode_utf16(units)
                    .collect::<Result<String, _>>()
                    .map_err(|_| EncodingError::Undecodable(self))
            }
            Self::Latin1 => Ok(bytes.iter().map(|&b| char::from(b)).collect()),
            Self::Windows1252 => Ok(bytes
                .iter()
                .map(|&b| match b {
                    0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
                    _ => char::from(b),
                })
                .collect()),
        }
    }

    /// Checks that `bytes` decode, without keeping the text (whole chunks of
    /// the input: a file with an undecodable byte fails its job).
    pub fn validate(self, bytes: &[u8]) -> Result<(), EncodingError> {
        match self {
            Self::Utf8 => std::str::from_utf8(bytes)
                .map(|_| ())
                .map_err(|_| EncodingError::Undecodable(self)),
            Self::Utf16Le | Self::Utf16Be => {
                if !bytes.len().is_multiple_of(2) {
                    return Err(EncodingError::Undecodable(self));
                }
                let units = (0..bytes.len()).step_by(2).map(|i| self.unit(bytes, i));
                char::decode_utf16(units)
                    .try_for_each(|c| c.map(|_| ()))
                    .map_err(|_| EncodingError::Undecodable(self))
            }
            Self::Latin1 | Self::Windows1252 => Ok(()),
        }
    }

    /// Appends `text` encoded to `out`.
    pub fn encode_into(self, text: &str, out: &mut Vec<u8>) -> Result<(), EncodingError> {
        match self {
            Self::Utf8 => out.extend_from_slice(text.as_bytes()),
            Self::Utf16Le => text
                .encode_utf16()
                .for_each(|u| out.extend_from_slice(&u.to_le_bytes())),
            Self::Utf16Be => text
                .encode_utf16()
                .for_each(|u| out.extend_from_slice(&u.to_be_bytes())),
            Self::Latin1 => {
                for c in text.chars() {
                    let b =
                        u8::try_from(u32::from(c)).map_err(|_| EncodingError::Unencodable(self))?;
                    out.push(b);
                }
            }
            Self::Windows1252 => {
                for c in text.chars() {
                    let b = match u32::from(c) {
                        n @ (0..=0x7F | 0xA0..=0xFF) => n as u8,
                        _ => CP1252_HIGH
                            .iter()
                            .position(|&h| h == c)
                            .map(|p| 0x80 + p as u8)
                            .ok_or(EncodingError::Unencodable(self))?,
                    };
                    out.push(b);
                }
            }
        }
        Ok(())
    }

    /// Appends one ASCII character as a code unit.
    #[inline]
    pub fn push_ascii(self, c: u8, out: &mut Vec<u8>) {
        match self {
            Self::Utf16Le => out.extend_from_slice(&[c, 0]),
            Self::Utf16Be => out.extend_from_slice(&[0, c]),
            _ => out.push(c),
        }
    }
}

impl serde::Serialize for Encoding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Encoding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown encoding {name:?}")))
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_canonical_names_parse() {
        assert_eq!(Encoding::parse(" UTF-8 "), Some(Encoding::Utf8));
        assert_eq!(Encoding::parse("Unicode"), Some(Encoding::Utf16Le));
        assert_eq!(Encoding::parse("ISO-8859-1"), Some(Encoding::Latin1));
        assert_eq!(Encoding::parse("Windows-1252"), Some(Encoding::Windows1252));
        assert_eq!(Encoding::parse("ebcdic"), None);
        for (_, e) in Encoding::NAMES {
            assert_eq!(Encoding::parse(e.name()), Some(*e));
        }
    }

    #[test]
    fn every_encoding_round_trips_what_it_can_represent() {
        let text = "Müller, \"Zoë\" €";
        for e in [
            Encoding::Utf8,
            Encoding::Utf16Le,
            Encoding::Utf16Be,
            Encoding::Windows1252,
        ] {
            let mut out = Vec::new();
            e.encode_into(text, &mut out).unwrap();
            assert_eq!(e.decode(&out).unwrap(), text, "{e}");
            e.validate(&out).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(
            Encoding::Latin1.encode_into("€", &mut out),
            Err(EncodingError::Unencodable(Encoding::Latin1))
        );
        Encoding::Latin1.encode_into("Müller", &mut out).unwrap();
        assert_eq!(out, b"M\xFCller");
    }

    #[test]
    fn latin1_and_windows_1252_differ_in_the_c1_range() {
        assert_eq!(Encoding::Latin1.decode(b"\x80").unwrap(), "\u{80}");
        assert_eq!(Encoding::Windows1252.decode(b"\x80").unwrap(), "€");
        assert_eq!(Encoding::Windows1252.decode(b"\x81").unwrap(), "\u{81}");
        let mut out = Vec::new();
        Encoding::Windows1252
            .encode_into("\u{81}", &mut out)
            .unwrap();
        assert_eq!(out, b"\x81");
    }

    #[test]
    fn broken_input_is_undecodable() {
        assert!(Encoding::Utf8.decode(b"a\xFFb").is_err());
        assert!(Encoding::Utf8.validate(b"\xC3").is_err());
        // An unpaired surrogate, and an odd byte count.
        assert!(Encoding::Utf16Le.decode(&[0x00, 0xD8, b'a', 0]).is_err());
        assert!(Encoding::Utf16Be.validate(&[0, b'a', 0]).is_err());
    }

    #[test]
    fn a_byte_order_mark_sets_utf16s_byte_order_and_another_encodings_mark_is_refused() {
        assert_eq!(
            Encoding::Utf16Le.detect(b"\xFE\xFF\0a"),
            Ok((Encoding::Utf16Be, 2))
        );
        assert_eq!(
            Encoding::Utf8.detect(b"\xEF\xBB\xBFa"),
            Ok((Encoding::Utf8, 3))
        );
        assert_eq!(Encoding::Utf8.detect(b"abc"), Ok((Encoding::Utf8, 0)));
        assert!(Encoding::Utf8
            .detect(b"\xFF\xFEa\0")
            .unwrap_err()
            .contains("utf-16 byte order mark"));
        // A one-byte encoding's file that starts with a Unicode mark is
        // refused rather than mangled.
        assert!(Encoding::Latin1.detect(b"\xEF\xBB\xBFa").is_err());
    }
}
