//! Upstream vfps's FHIR operation `$create-pseudonym`: its `Parameters`
//! (`namespace`, `originalValue`), read strictly.

use serde_json::Value;
use vfps_core::Error;

/// Reads `namespace` and `originalValue` (`valueString`) from a `Parameters`
/// resource. Anything ambiguous is refused rather than resolved by a guess:
/// a property twice in one object (FHIR JSON forbids it), a parameter with
/// more than one `value[x]`, either parameter given twice.
pub fn parameters(body: &[u8]) -> Result<(String, String), Error> {
    let v = crate::json::strict(body)
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
