//! Rows read back: namespaces, pseudonyms and tokens decoded, List page
//! bounds.

use vfps_core::{
    access::TokenRecord, from_micros, Error, GenerationMethod, Namespace, NamespaceName,
    NamespaceSettings, NamespaceUid, OriginalSystem, Pseudonym,
};

use crate::tokens::{decode_grants, decode_hash, decode_kind};

/// A List page's bound (`AND pseudonym_value < ?3` after a token, nothing
/// before the first page) and its arguments: `?1` the namespace, `?2` the
/// limit. Two statements rather than one with an `OR`, so the
/// (namespace, pseudonym_value) index is walked from the position.
#[allow(
    clippy::ptr_arg,
    reason = "a `&String` is a sized `ToSql`; a `&str` is not"
)]
pub(crate) fn page_args<'a>(
    namespace: &'a String,
    limit: &'a i64,
    after: Option<&'a String>,
) -> (&'static str, Vec<&'a dyn rusqlite::ToSql>) {
    match after {
        Some(pseudonym) => (
            "AND pseudonym_value < ?3",
            vec![namespace, limit, pseudonym],
        ),
        None => ("", vec![namespace, limit]),
    }
}

pub(super) fn namespace_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<Namespace, Error>> {
    let name: String = r.get(0)?;
    let method: i32 = r.get(2)?;
    let length: i64 = r.get(3)?;
    let description: String = r.get(1)?;
    let prefix: Option<String> = r.get(4)?;
    let suffix: Option<String> = r.get(5)?;
    let created: i64 = r.get(6)?;
    let updated: i64 = r.get(7)?;
    let uid: i64 = r.get(8)?;
    let deletable: bool = r.get(9)?;
    let multi: bool = r.get(10)?;
    let system: Option<String> = r.get(11)?;
    let sealed: bool = r.get(12)?;
    let moving: bool = r.get(13)?;
    let index_version: u32 = r.get(14)?;
    let moving_from_index: Option<u32> = r.get(15)?;
    Ok((|| {
        let method = GenerationMethod::from_wire(method)
            .ok_or_else(|| Error::internal("stored namespace has an invalid generation method"))?;
        let length = u32::try_from(length)
            .map_err(|_| Error::internal("stored namespace has an invalid length"))?;
        Ok(Namespace {
            name: NamespaceName::parse(&name)?,
            uid: NamespaceUid(uid),
            description,
            settings: NamespaceSettings::parse(method, length, prefix, suffix)?
                .with_deletion(deletable)
                .with_multi(multi)?
                .with_original_system(system.as_deref().map(OriginalSystem::parse).transpose()?)
                .with_sealed(sealed)
                .with_moving(moving)
                .with_index(index_version, moving_from_index),
            created_at: from_micros(created),
            last_updated_at: from_micros(updated),
        })
    })())
}

pub(super) fn token_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<TokenRecord, Error>> {
    let id: String = r.get(0)?;
    let kind: String = r.get(1)?;
    let name: String = r.get(2)?;
    let hash: Vec<u8> = r.get(3)?;
    let admin: bool = r.get(4)?;
    let grants: String = r.get(5)?;
    let created: i64 = r.get(6)?;
    let expires: Option<i64> = r.get(7)?;
    let revoked: Option<i64> = r.get(8)?;
    Ok((|| {
        Ok(TokenRecord {
            id,
            kind: decode_kind(&kind)?,
            name,
            hash: decode_hash(&hash)?,
            admin,
            grants: decode_grants(&grants)?,
            created_at: from_micros(created),
            expires_at: expires.map(from_micros),
            revoked_at: revoked.map(from_micros),
        })
    })())
}

pub(super) fn pseudonym_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<Pseudonym, Error>> {
    let ns: String = r.get(0)?;
    let original: String = r.get(1)?;
    let pseudonym: String = r.get(2)?;
    let created: i64 = r.get(3)?;
    let updated: i64 = r.get(4)?;
    let sealed: Option<Vec<u8>> = r.get(5)?;
    Ok(NamespaceName::parse(&ns).map(|namespace| Pseudonym {
        namespace,
        original_value: original,
        pseudonym_value: pseudonym,
        created_at: from_micros(created),
        last_updated_at: from_micros(updated),
        original_sealed: sealed,
    }))
}
