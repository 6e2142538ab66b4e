//! An upstream `appsettings.json`, flattened the way ASP.NET's configuration
//! reads it: nested objects and array indexes joined with `__`, so
//! `{"Init": {"v1": {"Namespaces": [{"Name": "x"}]}}}` is `Init__v1__Namespaces__0__Name=x`.

use std::path::Path;

use serde_json::Value;

/// Largest settings file read.
const MAX_BYTES: u64 = 1024 * 1024;

pub(super) fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_BYTES {
        return Err(format!("larger than {MAX_BYTES} bytes"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    flatten_document(&text)
}

pub(super) fn flatten_document(text: &str) -> Result<Vec<(String, String)>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    let mut out = Vec::new();
    flatten(&value, "", &mut out);
    Ok(out)
}

fn flatten(value: &Value, prefix: &str, out: &mut Vec<(String, String)>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}__{k}")
        }
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| flatten(v, &join(k), out)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(v, &join(&i.to_string()), out)),
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        Value::Null => out.push((prefix.to_owned(), String::new())),
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_objects_and_arrays_become_double_underscore_keys() {
        let pairs = flatten_document(
            r#"{"Init": {"v1": {"Namespaces": [{"Name": "default", "PseudonymLength": 32}]}},
                "Pseudonymization": {"Caching": {"Namespaces": {"IsEnabled": true}}},
                "Empty": null}"#,
        )
        .unwrap();
        assert!(pairs.contains(&("Init__v1__Namespaces__0__Name".into(), "default".into())));
        assert!(pairs.contains(&(
            "Init__v1__Namespaces__0__PseudonymLength".into(),
            "32".into()
        )));
        assert!(pairs.contains(&(
            "Pseudonymization__Caching__Namespaces__IsEnabled".into(),
            "true".into()
        )));
        assert!(pairs.contains(&("Empty".into(), String::new())));
        assert!(flatten_document("[1]").is_err());
        assert!(flatten_document("{").is_err());
    }
}
