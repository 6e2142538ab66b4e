//! Upstream vfps's FHIR operation `$create-pseudonym`: `namespace` and
//! `originalValue` as `valueString`s in, the same and `pseudonymValue` out.

use std::time::Instant;

use axum::{body::Bytes, extract::State, http::StatusCode, response::Response};
use serde_json::json;

use super::{fhir, outcome};
use crate::state::AppState;

pub use vfps_fhir::upstream::parameters;

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
