//! The `Parameters` of the MII pseudonymization interface's operations, read
//! strictly and answered in kind.
//!
//! What callers send: the IG's `context` with a `valueIdentifier` (its
//! `value` names the namespace), `original` and `pseudonym` as
//! `valueIdentifier`; earlier releases and existing clients (such as the
//! FHIR pseudonymizer's MII client) send `target` for `context` and
//! `valueString`s. An answer echoes what was sent — the name (`context` or
//! `target`) and each value as it came, byte for byte — and gives the
//! pseudonym in the same form as the original (or pseudonym) it answers.

use serde_json::{json, Map, Value};
use vfps_core::Error;

/// A value as it came: an `Identifier` (kept whole, to echo it) or a string.
#[derive(Debug, Clone, PartialEq)]
pub enum Given {
    Identifier(Map<String, Value>),
    String(String),
}

impl Given {
    /// The value it carries (an Identifier's `value`).
    pub fn value(&self) -> &str {
        match self {
            Self::Identifier(i) => i.get("value").and_then(Value::as_str).unwrap_or_default(),
            Self::String(s) => s,
        }
    }

    /// The `system` an Identifier names (read checks it is a string).
    pub fn system(&self) -> Option<&str> {
        match self {
            Self::Identifier(i) => i.get("system").and_then(Value::as_str),
            Self::String(_) => None,
        }
    }

    /// The parameter as it came, under `name`.
    pub fn echo(&self, name: &str) -> Value {
        match self {
            Self::Identifier(i) => json!({"name": name, "valueIdentifier": i}),
            Self::String(s) => json!({"name": name, "valueString": s}),
        }
    }

    /// `value`, in the form of this given value: an Identifier in `system`,
    /// or a string.
    pub fn answer(&self, name: &str, value: &str, system: Option<&str>) -> Value {
        match self {
            Self::Identifier(_) => {
                let mut identifier = Map::new();
                if let Some(system) = system {
                    identifier.insert("system".into(), Value::String(system.to_owned()));
                }
                identifier.insert("value".into(), Value::String(value.to_owned()));
                json!({"name": name, "valueIdentifier": identifier})
            }
            Self::String(_) => json!({"name": name, "valueString": value}),
        }
    }
}

/// An operation's input parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// The namespace, as `context` (or `target`) named it.
    pub context: Given,
    /// Which name the caller used for it, to answer under the same one.
    pub context_name: &'static str,
    pub original: Option<Given>,
    pub pseudonym: Option<Given>,
    pub allow_create: Option<bool>,
    pub count: Option<i64>,
}

/// The parameters one operation takes besides `context`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Original,
    Pseudonym,
    AllowCreate,
    Count,
}

impl Param {
    fn name(self) -> &'static str {
        match self {
            Self::Original => "original",
            Self::Pseudonym => "pseudonym",
            Self::AllowCreate => "allowCreate",
            Self::Count => "count",
        }
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_argument(message)
}

/// Reads `body` (a `Parameters` resource) for an operation taking `context`,
/// the `required` parameters and the `optional` ones. A parameter missing,
/// given twice, of the wrong type or unknown to the operation is refused,
/// naming it (never its value).
pub fn read(body: &Value, required: &[Param], optional: &[Param]) -> Result<Input, Error> {
    if body.get("resourceType").and_then(Value::as_str) != Some("Parameters") {
        return Err(invalid("the body must be a FHIR Parameters resource"));
    }
    let params = match body.get("parameter") {
        None => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err(invalid("Parameters.parameter must be an array")),
    };
    let mut input = Input {
        context: Given::String(String::new()),
        context_name: "context",
        original: None,
        pseudonym: None,
        allow_create: None,
        count: None,
    };
    let mut context_seen = false;
    for p in params {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            return Err(invalid("every parameter needs a name"));
        };
        let values: Vec<(&String, &Value)> = p
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("value"))
            .collect();
        let [(kind, value)] = values.as_slice() else {
            return Err(invalid(format!(
                "parameter {name} must have exactly one value[x], it has {}",
                values.len()
            )));
        };
        let once = |seen: bool| {
            if seen {
                Err(invalid(format!("parameter {name} is given more than once")))
            } else {
                Ok(())
            }
        };
        match name {
            "context" | "target" => {
                once(context_seen)?;
                context_seen = true;
                input.context = identifier_or_string(name, kind, value)?;
                input.context_name = if name == "target" {
                    "target"
                } else {
                    "context"
                };
            }
            other => {
                let param = required
                    .iter()
                    .chain(optional)
                    .find(|p| p.name() == other)
                    .ok_or_else(|| {
                        invalid(format!(
                            "parameter {other:?} is not one this operation takes"
                        ))
                    })?;
                match param {
                    Param::Original => {
                        once(input.original.is_some())?;
                        input.original = Some(identifier_or_string(name, kind, value)?);
                    }
                    Param::Pseudonym => {
                        once(input.pseudonym.is_some())?;
                        input.pseudonym = Some(identifier_or_string(name, kind, value)?);
                    }
                    Param::AllowCreate => {
                        once(input.allow_create.is_some())?;
                        input.allow_create = Some(match (kind.as_str(), value) {
                            ("valueBoolean", Value::Bool(b)) => *b,
                            _ => {
                                return Err(invalid("parameter allowCreate must be a valueBoolean"))
                            }
                        });
                    }
                    Param::Count => {
                        once(input.count.is_some())?;
                        input.count = Some(match (kind.as_str(), value.as_i64()) {
                            ("valueInteger" | "valueUnsignedInt" | "valuePositiveInt", Some(n)) => {
                                n
                            }
                            _ => return Err(invalid("parameter count must be a valueInteger")),
                        });
                    }
                }
            }
        }
    }
    if !context_seen {
        return Err(invalid(
            "parameter context (a valueIdentifier naming the namespace) is required",
        ));
    }
    for p in required {
        let present = match p {
            Param::Original => input.original.is_some(),
            Param::Pseudonym => input.pseudonym.is_some(),
            Param::AllowCreate => input.allow_create.is_some(),
            Param::Count => input.count.is_some(),
        };
        if !present {
            return Err(invalid(format!("parameter {} is required", p.name())));
        }
    }
    Ok(input)
}

fn identifier_or_string(name: &str, kind: &str, value: &Value) -> Result<Given, Error> {
    let given = match (kind, value) {
        ("valueIdentifier", Value::Object(i)) => {
            match i.get("value") {
                Some(Value::String(_)) => {}
                _ => {
                    return Err(invalid(format!(
                        "parameter {name}: its Identifier needs a value (a string)"
                    )))
                }
            }
            if i.get("system").is_some_and(|s| !s.is_string()) {
                return Err(invalid(format!(
                    "parameter {name}: its Identifier's system must be a string"
                )));
            }
            Given::Identifier(i.clone())
        }
        ("valueString", Value::String(s)) => Given::String(s.clone()),
        _ => {
            return Err(invalid(format!(
                "parameter {name} must be a valueIdentifier (or a valueString), not {kind}"
            )))
        }
    };
    if given.value().trim().is_empty() {
        return Err(invalid(format!("parameter {name} must not be blank")));
    }
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(params: Value) -> Value {
        json!({"resourceType": "Parameters", "parameter": params})
    }

    #[test]
    fn the_igs_identifiers_and_earlier_strings_are_read_and_echoed_in_kind() {
        let ig = read(
            &body(json!([
                {"name": "context", "valueIdentifier": {"system": "https://s", "value": "Transfer1"}},
                {"name": "original", "valueIdentifier": {"system": "https://o", "value": "D1"}},
            ])),
            &[Param::Original],
            &[Param::AllowCreate],
        )
        .unwrap();
        assert_eq!(ig.context.value(), "Transfer1");
        assert_eq!(ig.context_name, "context");
        let original = ig.original.unwrap();
        assert_eq!(
            original.echo("original"),
            json!({"name": "original", "valueIdentifier": {"system": "https://o", "value": "D1"}})
        );
        assert_eq!(
            original.answer("pseudonym", "P", ig.context.system()),
            json!({"name": "pseudonym", "valueIdentifier": {"system": "https://s", "value": "P"}})
        );
        let old = read(
            &body(json!([
                {"name": "target", "valueString": "domain"},
                {"name": "original", "valueString": "D1"},
                {"name": "allowCreate", "valueBoolean": true},
            ])),
            &[Param::Original],
            &[Param::AllowCreate],
        )
        .unwrap();
        assert_eq!(old.context_name, "target");
        assert_eq!(old.allow_create, Some(true));
        assert_eq!(
            old.original
                .unwrap()
                .answer("pseudonym", "P", old.context.system()),
            json!({"name": "pseudonym", "valueString": "P"})
        );
    }

    #[test]
    fn bad_parameters_are_refused_naming_the_parameter() {
        let cases = [
            (
                json!([{"name": "original", "valueString": "x"}]),
                "parameter context",
            ),
            (
                json!([{"name": "context", "valueString": "n"}]),
                "parameter original is required",
            ),
            (
                json!([{"name": "context", "valueString": "n"}, {"name": "target", "valueString": "m"},
                       {"name": "original", "valueString": "x"}]),
                "target is given more than once",
            ),
            (
                json!([{"name": "context", "valueString": "n"}, {"name": "original", "valueString": "x"},
                       {"name": "original", "valueString": "y"}]),
                "original is given more than once",
            ),
            (
                json!([{"name": "context", "valueString": "n"}, {"name": "original", "valueInteger": 3}]),
                "original must be a valueIdentifier",
            ),
            (
                json!([{"name": "context", "valueString": "n"}, {"name": "original", "valueString": "x"},
                       {"name": "count", "valueInteger": 1}]),
                "\"count\" is not one this operation takes",
            ),
            (
                json!([{"name": "context", "valueIdentifier": {"system": "s"}}, {"name": "original", "valueString": "x"}]),
                "context: its Identifier needs a value",
            ),
            (
                json!([{"name": "context", "valueString": "n"}, {"name": "original", "valueString": " "}]),
                "original must not be blank",
            ),
            (
                json!([{"name": "context", "valueString": "n", "valueCode": "m"}, {"name": "original", "valueString": "x"}]),
                "exactly one value[x]",
            ),
        ];
        for (params, named) in cases {
            let e = read(&body(params.clone()), &[Param::Original], &[]).unwrap_err();
            assert_eq!(e.kind, vfps_core::ErrorKind::InvalidArgument);
            assert!(e.message.contains(named), "{params}: {}", e.message);
            assert!(
                !e.message.contains("\"x\""),
                "a value in the message: {}",
                e.message
            );
        }
        let e = read(&json!({"resourceType": "Patient"}), &[], &[]).unwrap_err();
        assert!(e.message.contains("Parameters resource"));
    }
}
