//! Reading JSON bodies: duplicate properties refused (serde_json keeps the
//! last), and proto3 JSON's leniencies applied before a message is decoded.

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use vfps_fhir::json::strict;

/// A proto3 JSON message: `null` for a field means its default (the field is
/// dropped), and an integer may be written with a fraction of zero or an
/// exponent (`8.0`, `1e1`). An error names the field, never its value.
pub fn proto3<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut v = strict(body).map_err(|e| e.to_string())?;
    lenient(&mut v);
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        }
    })
}

fn lenient(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.retain(|_, field| !field.is_null());
            o.values_mut().for_each(lenient);
        }
        Value::Array(items) => items.iter_mut().for_each(lenient),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) {
                // Exactly representable: |f| below 2^53.
                if f.abs() < 9_007_199_254_740_992.0 {
                    *v = Value::from(f as i64);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use vfps_proto::v1::{NamespaceServiceCreateRequest, PseudonymServiceCreateRequest};

    /// Through the REST routes' body parser.
    fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, String> {
        crate::http::rest_body(&axum::body::Bytes::from(body.to_owned())).map_err(|e| e.message)
    }

    #[test]
    fn proto3_leniencies_apply_and_errors_name_the_field() {
        let r: NamespaceServiceCreateRequest = parse(
            r#"{"name":"x","description":null,"pseudonymGenerationMethod":null,"pseudonymLength":8.0}"#,
        )
        .unwrap();
        assert_eq!(
            (r.name.as_str(), r.description.as_str(), r.pseudonym_length),
            ("x", "", 8)
        );
        let r: NamespaceServiceCreateRequest =
            parse(r#"{"name":"x","pseudonymLength":1e1}"#).unwrap();
        assert_eq!(r.pseudonym_length, 10);
        let r: PseudonymServiceCreateRequest =
            parse(r#"{"namespace":"n","originalValue":null}"#).unwrap();
        assert_eq!(r.original_value, "");
        for bad in ["-3", "8.5", "true"] {
            let e = parse::<NamespaceServiceCreateRequest>(&format!(
                r#"{{"name":"x","pseudonymLength":{bad}}}"#
            ))
            .unwrap_err();
            assert!(e.contains("pseudonymLength: "), "{bad}: {e}");
        }
        let e =
            parse::<PseudonymServiceCreateRequest>(r#"{"originalValue":"a","originalValue":"b"}"#)
                .unwrap_err();
        assert!(e.contains("originalValue"), "{e}");
    }
}
