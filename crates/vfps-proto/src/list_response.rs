//! proto3 JSON for [`PseudonymServiceListResponse`](crate::v1::PseudonymServiceListResponse),
//! by hand: `totalSize` is an int64, and upstream's JSON transcoding (default
//! `GrpcJsonSettings`, `WriteInt64sAsStrings = false`) writes it as a number
//! where pbjson writes a string. Written as the generated messages are
//! (every field but an unset `totalSize`, in field-number order). Read:
//! `totalSize` as a number or a string, camelCase or proto field names,
//! `null` as the default, unknown fields skipped.

use std::fmt;

use serde::{
    de::{self, IgnoredAny, MapAccess, Visitor},
    ser::SerializeStruct,
    Deserialize, Deserializer, Serialize, Serializer,
};

use crate::v1::{Pseudonym, PseudonymServiceListResponse};

impl Serialize for PseudonymServiceListResponse {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = 3 + usize::from(self.total_size.is_some());
        let mut m = s.serialize_struct("vfps.api.v1.PseudonymServiceListResponse", fields)?;
        m.serialize_field("namespace", &self.namespace)?;
        if let Some(total) = self.total_size {
            m.serialize_field("totalSize", &total)?;
        }
        m.serialize_field("nextPageToken", &self.next_page_token)?;
        m.serialize_field("pseudonyms", &self.pseudonyms)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for PseudonymServiceListResponse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ListResponseVisitor)
    }
}

struct ListResponseVisitor;

impl<'de> Visitor<'de> for ListResponseVisitor {
    type Value = PseudonymServiceListResponse;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct vfps.api.v1.PseudonymServiceListResponse")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut page = PseudonymServiceListResponse::default();
        // Which fields were seen: namespace, totalSize, nextPageToken, pseudonyms.
        let mut seen = [false; 4];
        while let Some(key) = map.next_key::<String>()? {
            let field = match key.as_str() {
                "namespace" => 0,
                "totalSize" | "total_size" => 1,
                "nextPageToken" | "next_page_token" => 2,
                "pseudonyms" => 3,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
            match field {
                0 => page.namespace = map.next_value::<Option<String>>()?.unwrap_or_default(),
                1 => page.total_size = map.next_value::<Option<Int64>>()?.map(|n| n.0),
                2 => {
                    page.next_page_token = map.next_value::<Option<String>>()?.unwrap_or_default();
                }
                _ => {
                    page.pseudonyms = map
                        .next_value::<Option<Vec<Pseudonym>>>()?
                        .unwrap_or_default();
                }
            }
        }
        Ok(page)
    }
}

/// An int64 as proto3 JSON reads it: a number or a decimal string.
struct Int64(i64);

impl<'de> Deserialize<'de> for Int64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Int64Visitor).map(Int64)
    }
}

struct Int64Visitor;

impl Visitor<'_> for Int64Visitor {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a 64-bit integer, as a number or a string")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom("a 64-bit integer out of range"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
        v.parse()
            .map_err(|_| E::custom("a string that is not a 64-bit integer"))
    }
}
