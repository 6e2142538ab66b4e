//! proto3 JSON for [`Meta`](crate::v1::Meta), by hand: its timestamps are
//! written in UTC with a `Z` (`2026-12-02T00:18:41.688988Z`), as protobuf's
//! JSON mapping and upstream's responses write them; pbjson_types writes
//! `+00:00`. Read: camelCase or proto field names, RFC 3339 with any offset,
//! `null` as absent, unknown fields skipped.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use pbjson_types::Timestamp;
use serde::{
    de::{self, IgnoredAny, MapAccess, Visitor},
    ser::{self, SerializeStruct},
    Deserialize, Deserializer, Serialize, Serializer,
};

use crate::v1::Meta;

/// A timestamp as protobuf's JSON mapping writes it.
struct Utc3339<'a>(&'a Timestamp);

impl Serialize for Utc3339<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let nanos = u32::try_from(self.0.nanos)
            .map_err(|_| ser::Error::custom("a timestamp's nanos are negative"))?;
        let t = DateTime::<Utc>::from_timestamp(self.0.seconds, nanos)
            .ok_or_else(|| ser::Error::custom("a timestamp out of range"))?;
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields =
            usize::from(self.created_at.is_some()) + usize::from(self.last_updated_at.is_some());
        let mut m = s.serialize_struct("vfps.api.v1.Meta", fields)?;
        if let Some(t) = &self.created_at {
            m.serialize_field("createdAt", &Utc3339(t))?;
        }
        if let Some(t) = &self.last_updated_at {
            m.serialize_field("lastUpdatedAt", &Utc3339(t))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MetaVisitor)
    }
}

struct MetaVisitor;

impl<'de> Visitor<'de> for MetaVisitor {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct vfps.api.v1.Meta")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
        let mut meta = Meta::default();
        let (mut created, mut updated) = (false, false);
        while let Some(key) = map.next_key::<String>()? {
            let (seen, slot) = match key.as_str() {
                "createdAt" | "created_at" => (&mut created, &mut meta.created_at),
                "lastUpdatedAt" | "last_updated_at" => (&mut updated, &mut meta.last_updated_at),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
            *slot = map.next_value::<Option<Timestamp>>()?;
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_in_utc_with_z_and_read_back() {
        let meta = Meta {
            created_at: Some(Timestamp {
                seconds: 1_796_170_721,
                nanos: 688_988_000,
            }),
            last_updated_at: Some(Timestamp {
                seconds: 1_796_170_721,
                nanos: 0,
            }),
        };
        let json = serde_json::to_string(&meta).unwrap();
        assert_eq!(
            json,
            r#"{"createdAt":"2026-12-02T00:18:41.688988Z","lastUpdatedAt":"2026-12-02T00:18:41Z"}"#
        );
        assert_eq!(serde_json::from_str::<Meta>(&json).unwrap(), meta);
        let other: Meta = serde_json::from_str(
            r#"{"created_at":"2026-12-02T01:18:41.688988+01:00","lastUpdatedAt":null,"x":1}"#,
        )
        .unwrap();
        assert_eq!(other.created_at, meta.created_at);
        assert_eq!(other.last_updated_at, None);
        assert!(serde_json::from_str::<Meta>(r#"{"createdAt":null,"created_at":null}"#).is_err());
        assert_eq!(serde_json::to_string(&Meta::default()).unwrap(), "{}");
    }
}
