//! Rows read back: the driver's errors classified, namespaces, pseudonyms and
//! tokens decoded.

use tokio_postgres::Row;
use vfps_core::{
    access::TokenRecord, Error, GenerationMethod, Namespace, NamespaceName, NamespaceSettings,
    NamespaceUid, OriginalSystem, PageCursor, Pseudonym,
};

use super::{sqlstate, READ_ONLY_WARNINGS};
use crate::tokens::{decode_grants, decode_hash, decode_kind};

/// Classifies a driver error by its SQLSTATE (see [`sqlstate`]) or, without
/// one, as a lost connection (`Unavailable`) or a client bug (`Internal`).
pub fn classify(e: &tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return match sqlstate::kind_of(code) {
            // The message names the condition (never a value: those are in
            // the detail, which is not used).
            vfps_core::ErrorKind::Unavailable if code == "25006" => {
                let e = Error::unavailable(format!(
                    "database unavailable ({code}): {}; the server accepts no writes (a standby, \
                     or read-only): check Host and Target Session Attributes if it lasts",
                    db.message()
                ))
                .because(sqlstate::transient_cause(code));
                if let Some(held) = READ_ONLY_WARNINGS.pass() {
                    tracing::warn!(held_back = held, "{}", e.message);
                }
                e
            }
            vfps_core::ErrorKind::Unavailable => {
                Error::unavailable(format!("database unavailable ({code}): {}", db.message()))
                    .because(sqlstate::transient_cause(code))
            }
            // The message names the problem, never the value (that would be in
            // the detail, which is not used).
            vfps_core::ErrorKind::InvalidArgument => Error::invalid_argument(format!(
                "the database cannot store this value ({code}): {}",
                db.message()
            )),
            // An undefined table or column in our own statements: the schema
            // is missing (or upstream's, not adopted yet).
            kind if code == "42P01" || code == "42703" => Error::new(
                kind,
                format!(
                    "database error {code}: {} (the schema is not migrated: run `vfps migrate` \
                     or set ForceRunDatabaseMigrations=true)",
                    db.message()
                ),
            ),
            // Its message is the hold's own, for the caller to read.
            _ if code == sqlstate::RESTORE_HOLD => Error::restore_hold(db.message()),
            kind => Error::new(kind, format!("database error {code}: {}", db.message())),
        };
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        Error::unavailable(format!("database connection lost: {e}"))
    } else {
        Error::internal(format!("database client error: {e}"))
    }
}

pub(super) fn token_from_row(r: &Row) -> Result<TokenRecord, Error> {
    let get_err = |e: tokio_postgres::Error| classify(&e);
    let kind: String = r.try_get(1).map_err(get_err)?;
    let hash: Vec<u8> = r.try_get(3).map_err(get_err)?;
    let grants: String = r.try_get(5).map_err(get_err)?;
    Ok(TokenRecord {
        id: r.try_get(0).map_err(get_err)?,
        kind: decode_kind(&kind)?,
        name: r.try_get(2).map_err(get_err)?,
        hash: decode_hash(&hash)?,
        admin: r.try_get(4).map_err(get_err)?,
        grants: decode_grants(&grants)?,
        created_at: r.try_get(6).map_err(get_err)?,
        expires_at: r.try_get(7).map_err(get_err)?,
        revoked_at: r.try_get(8).map_err(get_err)?,
    })
}

pub(super) fn namespace_from_row(r: &Row) -> Result<Namespace, Error> {
    let bad = |what: &str| Error::internal(format!("stored namespace has an invalid {what}"));
    let get_err = |e: tokio_postgres::Error| classify(&e);
    let method: i32 = r.try_get(2).map_err(get_err)?;
    let length: i32 = r.try_get(3).map_err(get_err)?;
    let settings = NamespaceSettings::parse(
        GenerationMethod::from_wire(method).ok_or_else(|| bad("generation method"))?,
        u32::try_from(length).map_err(|_| bad("length"))?,
        r.try_get(4).map_err(get_err)?,
        r.try_get(5).map_err(get_err)?,
    )?
    .with_deletion(r.try_get(9).map_err(get_err)?)
    .with_multi(r.try_get(10).map_err(get_err)?)?
    .with_original_system(
        r.try_get::<_, Option<&str>>(11)
            .map_err(get_err)?
            .map(OriginalSystem::parse)
            .transpose()?,
    )
    .with_sealed(r.try_get(12).map_err(get_err)?)
    .with_moving(r.try_get(13).map_err(get_err)?)
    .with_index(
        u32::try_from(r.try_get::<_, i32>(14).map_err(get_err)?)
            .map_err(|_| bad("index key version"))?,
        r.try_get::<_, Option<i32>>(15)
            .map_err(get_err)?
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad("index key version"))?,
    );
    Ok(Namespace {
        name: NamespaceName::parse(r.try_get(0).map_err(get_err)?)?,
        uid: NamespaceUid(r.try_get(8).map_err(get_err)?),
        description: r.try_get(1).map_err(get_err)?,
        settings,
        created_at: r.try_get(6).map_err(get_err)?,
        last_updated_at: r.try_get(7).map_err(get_err)?,
    })
}

/// A List page's bound (`AND pseudonym_value < $3` after a token, nothing
/// before the first page) and its arguments: `$1` the namespace, `$2` the
/// limit. Two statements rather than one with an `OR`, so a generic plan
/// still walks the (namespace, pseudonym_value) index from the position.
pub(crate) fn page_args<'a>(
    namespace: &'a &'a str,
    limit: &'a i64,
    after: Option<&'a PageCursor>,
) -> (
    &'static str,
    Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)>,
) {
    match after {
        Some(cursor) => (
            "AND pseudonym_value < $3",
            vec![namespace, limit, &cursor.pseudonym_value],
        ),
        None => ("", vec![namespace, limit]),
    }
}

pub(super) fn pseudonym_from_row(r: &Row) -> Result<Pseudonym, Error> {
    let get = |i: usize| -> Result<String, Error> { r.try_get(i).map_err(|e| classify(&e)) };
    Ok(Pseudonym {
        namespace: NamespaceName::parse(&get(0)?)?,
        original_value: get(1)?,
        pseudonym_value: get(2)?,
        created_at: r.try_get(3).map_err(|e| classify(&e))?,
        last_updated_at: r.try_get(4).map_err(|e| classify(&e))?,
        original_sealed: r.try_get(5).map_err(|e| classify(&e))?,
    })
}

/// Makes a transaction write WAL, so that its COMMIT waits for the synchronous
/// standby even if it changed nothing (see the `postgres` module docs).
pub(super) const DURABLE: &str = "SELECT pg_logical_emit_message(true, 'vfps', 'durable read')";
