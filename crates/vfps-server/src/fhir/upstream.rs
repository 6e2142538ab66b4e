//! Upstream vfps's FHIR operation `$create-pseudonym`: `namespace` and
//! `originalValue` as `valueString`s in, the same and `pseudonymValue` out.

use std::time::Instant;

use axum::{body::Bytes, extract::State, http::StatusCode, response::Response};
use serde_json::{json, Value};
use vfps_core::Error;

use super::{fhir, outcome};
use crate::state::AppState;

/// Reads `namespace` and `originalValue` (`valueString`) from a `Parameters`
/// resource. Anything ambiguous is refused rather than resolved by a guess:
/// a property twice in one object (FHIR JSON forbids it), a parameter with
/// more than one `value[x]`, either parameter given twice.
pub fn parameters(body: &[u8]) -> Result<(String, String), Error> {
    let v = crate::http::json::strict(body)
        .map_err(|e| Error::invalid_argument(format!("the body is not JSON: {e}")))?;
    if v.get("resourceType").and_then(Value::as_str) != Some("Parameters") {
        return Err(Error::invalid_argument(
            "the body must be a FHIR Parameters resource",
        ));
    }
    let params = v
        .get("parameter")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for p in params {
        let values = p
            .as_object()
            .map_or(0, |o| o.keys().filter(|k| k.starts_with("value")).count());
        if values > 1 {
            return Err(Error::invalid_argument(format!(
                "parameter {} has {values} value[x] properties; a parameter has one",
                p.get("name").and_then(Value::as_str).unwrap_or("(unnamed)")
            )));
        }
    }
    let find = |name: &str| -> Result<String, Error> {
        let mut named = params
            .iter()
            .filter(|p| p.get("name").and_then(Value::as_str) == Some(name));
        let first = named.next();
        if named.next().is_some() {
            return Err(Error::invalid_argument(format!(
                "parameter {name} is given more than once"
            )));
        }
        first
            .and_then(|p| p.get("valueString"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::invalid_argument(format!("parameter {name} with a valueString is required"))
            })
    };
    Ok((find("namespace")?, find("originalValue")?))
}

pub(super) async fn create_pseudonym(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let d = state.deadline(None);
    let started = Instant::now();
    let result = async {
        let who = state
            .auth
            .authenticate(crate::http::authorization(&headers), d)
            .await?;
        let (namespace, original) = parameters(&body)?;
        state.auth.authorize(
            &who,
            crate::auth::Operation::CreatePseudonym,
            Some(&namespace),
        )?;
        state
            .service
            .create_pseudonym(&namespace, &original, d)
            .await
    }
    .await;
    state.metrics.observe_request(
        "fhir",
        "create-pseudonym",
        started.elapsed(),
        result.as_ref().err(),
    );
    match result {
        Ok(p) => fhir(
            StatusCode::OK,
            json!({
                "resourceType": "Parameters",
                "parameter": [
                    {"name": "namespace", "valueString": p.namespace.as_str()},
                    {"name": "originalValue", "valueString": p.original_value},
                    {"name": "pseudonymValue", "valueString": p.pseudonym_value},
                ],
            }),
        ),
        Err(e) => outcome(&e),
    }
}

#[cfg(test)]
mod tests {
    use vfps_core::ErrorKind;

    use super::*;

    #[test]
    fn ambiguous_parameters_are_refused_naming_what_is_ambiguous() {
        let ok = br#"{"resourceType":"Parameters","parameter":[
            {"name":"namespace","valueString":"n"},{"name":"originalValue","valueString":"A"},
            {"name":"somethingElse","valueInteger":1}]}"#;
        assert_eq!(parameters(ok).unwrap(), ("n".into(), "A".into()));
        for (body, named) in [
            (
                r#"{"resourceType":"Parameters","parameter":[{"name":"namespace","valueString":"n"},
                {"name":"originalValue","valueString":"A"},{"name":"originalValue","valueString":"B"}]}"#,
                "originalValue is given more than once",
            ),
            (
                r#"{"resourceType":"Parameters","parameter":[{"name":"namespace","valueString":"n"},
                {"name":"namespace","valueString":"m"},{"name":"originalValue","valueString":"A"}]}"#,
                "namespace is given more than once",
            ),
            (
                r#"{"resourceType":"Parameters","parameter":[{"name":"namespace","valueString":"n"},
                {"name":"originalValue","valueString":"A","valueString":"B"}]}"#,
                "\"valueString\" appears twice",
            ),
            (
                r#"{"resourceType":"Parameters","parameter":[{"name":"namespace","valueString":"n"},
                {"name":"originalValue","valueString":"A","valueInteger":1}]}"#,
                "originalValue has 2 value[x]",
            ),
            (
                r#"{"resourceType":"Parameters","resourceType":"Parameters","parameter":[]}"#,
                "\"resourceType\" appears twice",
            ),
        ] {
            let e = parameters(body.as_bytes()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.contains(named), "{named}: {}", e.message);
        }
    }
}
