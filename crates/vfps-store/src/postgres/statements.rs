//! The statements every connection prepares once, on first use, and finds again
//! by index ([`Prepared`] is a slot in the connection's array): the hot path
//! never parses, plans or hashes SQL text after a connection's first call.

/// The insert both [`UPSERT`] and [`INSERT_NEW`] are: the batch's rows of
/// live namespaces, sorted by key.
macro_rules! insert {
    () => {
        "WITH live AS MATERIALIZED (
        SELECT name, uid, originals_sealed, originals_moving, originals_index_version
        FROM namespaces
        WHERE name = ANY($1::text[]) AND NOT multi_pseudonym FOR KEY SHARE)
    INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at,
        last_updated_at, original_sealed)
    SELECT i.namespace, i.original_value, i.pseudonym_value, i.created_at, i.created_at,
        i.original_sealed
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int8[], $6::bytea[],
            $7::bool[])
        AS i(namespace, original_value, pseudonym_value, created_at, namespace_uid,
            original_sealed, moving)
    JOIN live ON live.name = i.namespace AND live.uid = i.namespace_uid
        AND live.originals_sealed = (i.original_sealed IS NOT NULL)
        AND live.originals_moving = i.moving
        AND (NOT live.originals_sealed
            OR starts_with(i.original_value, '~k' || live.originals_index_version || '.'))
    ORDER BY i.namespace, i.original_value"
    };
}

/// One create-path round trip: lock the batch's namespaces, insert what is new,
/// return the inserted rows.
///
/// - The namespaces are locked `FOR KEY SHARE` first (what a foreign key would
///   do, once per statement instead of once per row): a concurrent delete of one
///   of them waits for this commit and then deletes these rows too, or this
///   statement waits for the delete and then finds the namespace gone. Only that
///   namespace's row is locked, so deleting one namespace never stops writes to
///   the others.
/// - A row whose namespace is gone, or is another incarnation (uid) than the one
///   its pseudonym was generated for, or keeps its originals in another form
///   than the caller knew (sealed or plain, moving or not, blind indexes
///   under another key version: the fence of `vfps keys encrypt-existing |
///   decrypt-all | rotate --reindex`, whose switches take the namespace
///   row `FOR UPDATE`, so they wait for every insert under way and every later
///   one sees them), is skipped:
///   this is what lets the service cache namespace settings on the create
///   path without any coherence protocol.
///   A stale entry only ever costs a skipped row, which the caller notices and
///   answers from the database.
/// - A taken original or pseudonym is skipped by `ON CONFLICT`; originals that
///   had a pseudonym already are read with [`Prepared::Existing`], a second
///   statement only for them.
/// - Rows are inserted sorted by key, so concurrent batches lock index entries in
///   the same order.
///
/// The statement reads no table but `namespaces` (the conflict check is the
/// unique indexes' own): a plan chosen while `pseudonyms` was small stays right
/// as it grows. (Returning the existing rows from this statement too, through a
/// join with `pseudonyms`, was tried: a plan cached on a fresh database scanned
/// the whole table on every batch once it had grown.)
pub const UPSERT: &str = concat!(
    insert!(),
    "
    ON CONFLICT DO NOTHING
    RETURNING namespace, original_value, pseudonym_value, created_at, last_updated_at,
        original_sealed"
);

/// [`UPSERT`] for rows that are most likely all new (a CSV job's next rows): a
/// plain insert, without speculative insertion (a check of both unique
/// indexes before each row, a confirming WAL record after it) and returning
/// nothing — on this project's machines the database spends about 1.4x less
/// CPU per row (docs/performance.md). A taken original or pseudonym, or an
/// original twice in the batch, fails it whole (`unique_violation`); a row
/// whose namespace is gone or another incarnation is skipped, as by
/// [`UPSERT`], which the caller sees in the count of inserted rows. Either way
/// the caller then upserts the batch.
pub const INSERT_NEW: &str = insert!();

/// The existing rows of originals (a fresh snapshot, so rows committed
/// concurrently are seen), each with a WAL record so the commit waits for the
/// synchronous standby to have everything up to it, those rows included. The
/// `LIMIT 1` (the key is unique) keeps it an index probe per original on its
/// cached plan (see [`GET_PSEUDONYMS`]).
pub(super) const EXISTING: &str =
    "SELECT p.namespace, p.original_value, p.pseudonym_value, p.created_at, p.last_updated_at,
        p.original_sealed, pg_logical_emit_message(true, 'vfps', 'durable read')
    FROM unnest($1::text[], $2::text[]) AS i(namespace, original_value)
    CROSS JOIN LATERAL (
        SELECT * FROM pseudonyms p
        WHERE p.namespace = i.namespace AND p.original_value = i.original_value LIMIT 1) p";

/// The rows of many pseudonyms, for Gets batched by the coalescer: the unique
/// `(namespace, pseudonym_value)` index, probed once per pair.
///
/// Like every statement here it runs on a cached generic plan after five
/// executions, planned for an array of unknown length. The `LIMIT 1` (the pair
/// is unique) keeps the lookup a subquery per pair: without it PostgreSQL 15
/// joins the array with the table, and its generic plan hashes a sequential
/// scan of `pseudonyms` while the table is a few thousand rows, a plan kept
/// until the next analyze of the table (a test checks the plan). A table of a
/// page or two is scanned, as by [`Prepared::GetPseudonym`].
///
/// A multi-pseudonym namespace's entries are in `multi_pseudonyms`, probed
/// by its key after `pseudonyms`: the `LIMIT 1` over the `UNION ALL` stops
/// at the first branch with a row, so a single-pseudonym namespace's hit
/// costs no second probe.
const GET_PSEUDONYMS: &str =
    "SELECT p.namespace, p.original_value, p.pseudonym_value, p.created_at, p.last_updated_at,
        p.original_sealed
    FROM unnest($1::text[], $2::text[]) AS i(namespace, pseudonym_value)
    CROSS JOIN LATERAL (
        (SELECT p.namespace, p.original_value, p.pseudonym_value, p.created_at,
            p.last_updated_at, p.original_sealed
        FROM pseudonyms p
        WHERE p.namespace = i.namespace AND p.pseudonym_value = i.pseudonym_value LIMIT 1)
        UNION ALL
        (SELECT m.namespace, m.original_value, m.pseudonym_value, m.created_at,
            m.last_updated_at, m.original_sealed
        FROM multi_pseudonyms m
        WHERE m.namespace = i.namespace AND m.pseudonym_value = i.pseudonym_value LIMIT 1)
        LIMIT 1) p";

/// One reverse lookup, in both tables (see [`GET_PSEUDONYMS`]).
const GET_PSEUDONYM: &str =
    "(SELECT namespace, original_value, pseudonym_value, created_at, last_updated_at,
        original_sealed
     FROM pseudonyms WHERE namespace = $1 AND pseudonym_value = $2)
    UNION ALL
    (SELECT namespace, original_value, pseudonym_value, created_at, last_updated_at,
        original_sealed
     FROM multi_pseudonyms WHERE namespace = $1 AND pseudonym_value = $2)
    LIMIT 1";

/// Statements prepared per connection; the discriminant is the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    Upsert,
    Existing,
    GetPseudonym,
    GetNamespace,
    FindToken,
    GetPseudonyms,
    InsertNew,
}

impl Prepared {
    pub const COUNT: usize = 7;

    pub fn sql(self) -> &'static str {
        match self {
            Self::Upsert => UPSERT,
            Self::InsertNew => INSERT_NEW,
            Self::Existing => EXISTING,
            Self::GetPseudonyms => GET_PSEUDONYMS,
            Self::GetPseudonym => GET_PSEUDONYM,
            Self::GetNamespace => {
                "SELECT name, description, pseudonym_generation_method, pseudonym_length,
                    pseudonym_prefix, pseudonym_suffix, created_at, last_updated_at, uid,
                    pseudonym_deletion_allowed, multi_pseudonym, original_system,
                    originals_sealed, originals_moving, originals_index_version,
                    originals_moving_from_index
                 FROM namespaces WHERE name = $1"
            }
            Self::FindToken => {
                "SELECT id, kind, name, token_hash, is_admin, grants, created_at, expires_at, revoked_at
                 FROM access_tokens WHERE token_hash = $1"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_in_range_and_distinct() {
        let all = [
            Prepared::Upsert,
            Prepared::Existing,
            Prepared::GetPseudonym,
            Prepared::GetNamespace,
            Prepared::FindToken,
            Prepared::GetPseudonyms,
            Prepared::InsertNew,
        ];
        assert_eq!(all.len(), Prepared::COUNT);
        for (i, p) in all.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
    }

    fn words(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_namespace_and_token_columns_match_the_row_readers() {
        let select = |columns: &str, table: &str| format!("SELECT {columns} FROM {table}");
        assert!(words(Prepared::GetNamespace.sql()).contains(&words(&select(
            super::super::NAMESPACE_COLUMNS,
            "namespaces"
        ))));
        assert!(words(Prepared::FindToken.sql()).contains(&words(&select(
            crate::tokens::TOKEN_COLUMNS,
            "access_tokens"
        ))));
    }
}
