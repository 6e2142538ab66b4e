//! What a job is asked to do: its direction, column mappings and dialect —
//! parsed once, when the job is created, so a runner never meets a bad spec.

use serde::{Deserialize, Serialize};
use vfps_core::{Error, NamespaceName};

use crate::encoding::Encoding;

/// Which way a job's mappings transform values (upstream's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Originals become their pseudonyms (created where missing); needs write.
    Pseudonymize,
    /// Pseudonyms become their originals; needs reverse-lookup.
    Depseudonymize,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pseudonymize => "pseudonymize",
            Self::Depseudonymize => "depseudonymize",
        }
    }
}

/// The source column of a mapping: by header name, or by 0-based index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnMapping {
    /// A header name, or a 0-based index (also with a header, when no header
    /// field has that name).
    pub source_column: String,
    #[serde(with = "namespace_name")]
    pub namespace: NamespaceName,
    /// A new column appended under this name; `None` replaces in place.
    pub target_column: Option<String>,
}

/// A namespace name in a stored spec: its text, parsed again when read.
mod namespace_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use vfps_core::NamespaceName;

    pub fn serialize<S: Serializer>(n: &NamespaceName, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(n.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NamespaceName, D::Error> {
        let raw = String::deserialize(d)?;
        NamespaceName::parse(&raw).map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// Most column mappings a job may have.
pub const MAX_MAPPINGS: usize = 64;

/// A job's spec, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub direction: Direction,
    pub mappings: Vec<ColumnMapping>,
    /// One ASCII character.
    pub delimiter: u8,
    pub encoding: Encoding,
    pub has_header: bool,
    /// The uploaded file's name, shown only (never part of an object key).
    pub file_name: Option<String>,
}

/// A spec as it comes off the wire.
#[derive(Debug, Clone, Default)]
pub struct RawSpec {
    pub direction: Option<Direction>,
    pub mappings: Vec<(String, String, Option<String>)>,
    pub delimiter: String,
    pub encoding: String,
    pub has_header: bool,
    pub file_name: String,
}

impl Spec {
    /// Checks every part of a requested spec, naming each bad value.
    pub fn parse(raw: RawSpec) -> Result<Self, Error> {
        let bad = Error::invalid_argument;
        let delimiter = match raw.delimiter.as_str() {
            "" => b',',
            d if d.len() == 1 && d.is_ascii() && !matches!(d, "\"" | "\r" | "\n") => d.as_bytes()[0],
            "\\t" => b'\t',
            d => {
                return Err(bad(format!(
                    "delimiter {d:?} is not valid: one ASCII character other than a quote or a line break"
                )))
            }
        };
        let encoding = if raw.encoding.trim().is_empty() {
            Encoding::Utf8
        } else {
            Encoding::parse(&raw.encoding).ok_or_else(|| {
                bad(format!(
                    "encoding {:?} is not supported (utf-8, utf-16, utf-16BE, iso-8859-1, windows-1252)",
                    raw.encoding
                ))
            })?
        };
        if raw.mappings.is_empty() {
            return Err(bad("a job needs at least one column mapping".into()));
        }
        if raw.mappings.len() > MAX_MAPPINGS {
            return Err(bad(format!(
                "a job may map at most {MAX_MAPPINGS} columns, {} were given",
                raw.mappings.len()
            )));
        }
        let mut mappings = Vec::with_capacity(raw.mappings.len());
        for (source, namespace, target) in raw.mappings {
            if source.trim().is_empty() {
                return Err(bad(
                    "a column mapping needs a source column (a header name or a 0-based index)"
                        .into(),
                ));
            }
            if !raw.has_header && source.parse::<usize>().is_err() {
                return Err(bad(format!(
                    "source column {source:?} is not a 0-based column index, and the file has no header row"
                )));
            }
            let namespace = NamespaceName::parse(&namespace)?;
            let target = target.filter(|t| !t.is_empty());
            if let Some(t) = &target {
                if t.chars().any(|c| c == '\r' || c == '\n') {
                    return Err(bad(format!(
                        "target column {t:?} must not contain a line break"
                    )));
                }
            }
            mappings.push(ColumnMapping {
                source_column: source,
                namespace,
                target_column: target,
            });
        }
        let file_name = Some(raw.file_name)
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.chars().filter(|c| !c.is_control()).take(255).collect());
        Ok(Self {
            direction: raw.direction.unwrap_or(Direction::Pseudonymize),
            mappings,
            delimiter,
            encoding,
            has_header: raw.has_header,
            file_name,
        })
    }

    /// The namespaces the job uses, each once, in mapping order.
    pub fn namespaces(&self) -> Vec<&NamespaceName> {
        let mut out: Vec<&NamespaceName> = Vec::new();
        for m in &self.mappings {
            if !out.contains(&&m.namespace) {
                out.push(&m.namespace);
            }
        }
        out
    }

    /// The delimiter as it is shown.
    pub fn delimiter_text(&self) -> String {
        char::from(self.delimiter).to_string()
    }

    /// Resolves the mappings against the header's field names (or, without a
    /// header, the first record's field count).
    pub fn plan(&self, header: Option<&[String]>, fields: usize) -> Result<Plan, String> {
        let mut in_place: Vec<(usize, usize)> = Vec::new();
        let mut appended = Vec::new();
        let namespaces = self.namespaces();
        for m in &self.mappings {
            let index = header
                .and_then(|h| h.iter().position(|name| *name == m.source_column))
                .or_else(|| {
                    m.source_column
                        .parse::<usize>()
                        .ok()
                        .filter(|&i| i < fields)
                })
                .ok_or_else(|| match header {
                    Some(_) => format!(
                        "column {:?} is not in the header (nor a 0-based index below {fields})",
                        m.source_column
                    ),
                    None => format!(
                        "column index {} is out of range: the first record has {fields} fields",
                        m.source_column
                    ),
                })?;
            let slot = namespaces
                .iter()
                .position(|n| **n == m.namespace)
                .unwrap_or_default();
            match &m.target_column {
                None => {
                    if in_place.iter().any(|(i, _)| *i == index) {
                        return Err(format!(
                            "column {:?} is mapped in place twice",
                            m.source_column
                        ));
                    }
                    in_place.push((index, slot));
                }
                Some(name) => appended.push(Appended {
                    source: index,
                    slot,
                    name: name.clone(),
                }),
            }
        }
        in_place.sort_unstable();
        Ok(Plan {
            in_place,
            appended,
            fields,
        })
    }
}

/// A new column: the value of `source`, transformed in namespace `slot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub source: usize,
    pub slot: usize,
    pub name: String,
}

/// The mappings resolved to field indexes; namespaces by their slot in
/// [`Spec::namespaces`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// `(field, slot)`, by field.
    pub in_place: Vec<(usize, usize)>,
    pub appended: Vec<Appended>,
    /// Fields every record must have; others are malformed.
    pub fields: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(mappings: &[(&str, &str, Option<&str>)]) -> RawSpec {
        RawSpec {
            direction: None,
            mappings: mappings
                .iter()
                .map(|(s, n, t)| (s.to_string(), n.to_string(), t.map(str::to_owned)))
                .collect(),
            delimiter: String::new(),
            encoding: String::new(),
            has_header: true,
            file_name: "patients.csv".into(),
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let spec = Spec::parse(raw(&[("id", "ns", None)])).unwrap();
        assert_eq!(spec.delimiter, b',');
        assert_eq!(spec.encoding, Encoding::Utf8);
        assert_eq!(spec.direction, Direction::Pseudonymize);
        assert_eq!(spec.file_name.as_deref(), Some("patients.csv"));
    }

    #[test]
    fn each_bad_value_is_named() {
        let mut r = raw(&[("id", "ns", None)]);
        r.delimiter = "\"".into();
        assert!(Spec::parse(r)
            .unwrap_err()
            .message
            .contains("delimiter \"\\\"\""));
        let mut r = raw(&[("id", "ns", None)]);
        r.encoding = "ebcdic".into();
        assert!(Spec::parse(r).unwrap_err().message.contains("\"ebcdic\""));
        assert!(Spec::parse(raw(&[])).is_err());
        assert!(Spec::parse(raw(&[("", "ns", None)])).is_err());
        assert!(Spec::parse(raw(&[("id", " ", None)])).is_err());
        let mut r = raw(&[("id", "ns", None)]);
        r.has_header = false;
        assert!(Spec::parse(r).unwrap_err().message.contains("\"id\""));
    }

    #[test]
    fn columns_resolve_by_name_then_by_index() {
        let spec = Spec::parse(raw(&[
            ("name", "a", None),
            ("0", "b", Some("id_pseudonym")),
            ("name", "b", Some("name_b")),
        ]))
        .unwrap();
        let header = vec!["id".to_owned(), "name".to_owned()];
        let plan = spec.plan(Some(&header), 2).unwrap();
        assert_eq!(plan.in_place, [(1, 0)]);
        assert_eq!(
            plan.appended
                .iter()
                .map(|a| (a.source, a.slot))
                .collect::<Vec<_>>(),
            [(0, 1), (1, 1)]
        );
        let missing = Spec::parse(raw(&[("nope", "a", None)])).unwrap();
        assert!(missing
            .plan(Some(&header), 2)
            .unwrap_err()
            .contains("\"nope\""));
        let twice = Spec::parse(raw(&[("id", "a", None), ("0", "b", None)])).unwrap();
        assert!(twice.plan(Some(&header), 2).unwrap_err().contains("twice"));
    }
}
