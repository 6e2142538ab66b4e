//! The MII interface over HTTP, as a client of the IG sends it: `Parameters`
//! with `valueIdentifier`s (the context in a system of its own), and the
//! answers read back. No value is ever logged.

use std::time::Duration;

use serde_json::{json, Value};

/// The system the harness's contexts are named in.
const SYSTEM: &str = "https://vfps.example/fhir/sid/vfps-chaos-domain";

/// What one FHIR call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An HTTP status and the body (JSON, or `Null` when it was none).
    Status(u16, Value),
    /// No answer: the deadline passed or the connection was lost after
    /// sending (the call may have been performed).
    Lost(String),
    /// Not sent: no connection could be made.
    NotSent(String),
}

/// `Parameters` of (name, identifier value) pairs; `context` gets the system.
pub fn parameters(pairs: &[(&str, &str)]) -> Value {
    let parameter: Vec<Value> = pairs
        .iter()
        .map(|(name, value)| {
            let identifier = if *name == "context" {
                json!({"system": SYSTEM, "value": value})
            } else {
                json!({"value": value})
            };
            json!({"name": name, "valueIdentifier": identifier})
        })
        .collect();
    json!({"resourceType": "Parameters", "parameter": parameter})
}

/// The value of the parameter `name` (an Identifier's or a string).
pub fn value_of<'a>(parameters: &'a Value, name: &str) -> Option<&'a str> {
    let p = parameters["parameter"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?;
    p["valueIdentifier"]["value"]
        .as_str()
        .or_else(|| p["valueString"].as_str())
}

/// The original a `$de-pseudonymize` answered (the `value` part of `original`).
pub fn original_of(parameters: &Value) -> Option<&str> {
    let original = parameters["parameter"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "original")?;
    let value = original["part"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "value")?;
    value["valueIdentifier"]["value"]
        .as_str()
        .or_else(|| value["valueString"].as_str())
}

/// A batch Bundle of `$pseudonymize` entries.
pub fn batch(entries: &[Value]) -> Value {
    bundle("batch", entries)
}

/// A transaction Bundle of `$pseudonymize` entries.
pub fn transaction(entries: &[Value]) -> Value {
    bundle("transaction", entries)
}

fn bundle(kind: &str, entries: &[Value]) -> Value {
    let entry: Vec<Value> = entries
        .iter()
        .map(|resource| {
            json!({
                "request": {"method": "POST", "url": "$pseudonymize"},
                "resource": resource,
            })
        })
        .collect();
    json!({"resourceType": "Bundle", "type": kind, "entry": entry})
}

/// The entry a refused transaction's `OperationOutcome` names
/// (`Bundle.entry[i]`).
pub fn failing_entry(outcome: &Value) -> Option<usize> {
    outcome["issue"][0]["expression"][0]
        .as_str()?
        .strip_prefix("Bundle.entry[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Each entry of a `batch-response`: its status code and resource.
pub fn batch_answers(bundle: &Value) -> Option<Vec<(u16, Value)>> {
    bundle["entry"]
        .as_array()?
        .iter()
        .map(|e| {
            let status = e["response"]["status"].as_str()?;
            let code = status.split_whitespace().next()?.parse().ok()?;
            Some((code, e["resource"].clone()))
        })
        .collect()
}

/// POSTs `body` to `url` within `timeout`.
pub async fn post(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    body: &Value,
    timeout: Duration,
) -> Reply {
    let mut request = http
        .post(url)
        .timeout(timeout)
        .header("content-type", "application/fhir+json")
        .json(body);
    if let Some(auth) = bearer {
        request = request.header("authorization", auth);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.json::<Value>().await.unwrap_or(Value::Null);
            Reply::Status(status, body)
        }
        Err(e) if e.is_connect() => Reply::NotSent(kind(&e)),
        Err(e) => Reply::Lost(kind(&e)),
    }
}

/// What ended a call without an answer, without its URL.
fn kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        "connection lost".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answers_of_the_ig_are_read_back() {
        let asked = parameters(&[("context", "ns"), ("original", "o1")]);
        assert_eq!(value_of(&asked, "original"), Some("o1"));
        assert_eq!(value_of(&asked, "context"), Some("ns"));
        let back = json!({"resourceType": "Parameters", "parameter": [
            {"name": "original", "part": [
                {"name": "context", "valueIdentifier": {"value": "ns"}},
                {"name": "value", "valueIdentifier": {"value": "o1"}},
                {"name": "pseudonym", "valueIdentifier": {"value": "p1"}}]}]});
        assert_eq!(original_of(&back), Some("o1"));
        let answer = json!({"type": "batch-response", "entry": [
            {"response": {"status": "200 OK"}, "resource": asked},
            {"response": {"status": "404 Not Found"}, "resource": {}}]});
        let answers = batch_answers(&answer).unwrap();
        assert_eq!(answers[0].0, 200);
        assert_eq!(answers[1].0, 404);
        let refused = json!({"resourceType": "OperationOutcome", "issue": [
            {"code": "not-found", "expression": ["Bundle.entry[7]"]}]});
        assert_eq!(failing_entry(&refused), Some(7));
        assert_eq!(failing_entry(&json!({"issue": []})), None);
        assert_eq!(transaction(&[asked])["type"], "transaction");
    }
}
