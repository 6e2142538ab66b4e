//! Reading JSON bodies strictly: an object with a property twice is refused
//! (FHIR JSON forbids it; serde_json would keep the last).

use serde_json::Value;

/// The JSON of `body`, refusing an object with a property twice.
pub fn strict(body: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(body).map(|Strict(v)| v)
}

/// JSON read into a [`Value`], refusing an object with a property twice
/// (serde_json keeps the last).
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "property {key:?} appears twice in one object"
                )));
            }
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_twice_is_refused_naming_it() {
        let e = strict(br#"{"a":1,"b":{"c":1,"c":2}}"#).unwrap_err();
        assert!(e.to_string().contains("\"c\" appears twice"), "{e}");
        assert_eq!(
            strict(br#"[1,{"a":null}]"#).unwrap(),
            serde_json::json!([1, {"a": null}])
        );
    }
}
