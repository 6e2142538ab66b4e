//! The column lists both stores' statements name: the tables have the same
//! columns in PostgreSQL and SQLite, read back in this order.

pub(crate) const NAMESPACE_COLUMNS: &str =
    "name, description, pseudonym_generation_method, pseudonym_length, \
     pseudonym_prefix, pseudonym_suffix, created_at, last_updated_at, uid, \
     pseudonym_deletion_allowed, multi_pseudonym, original_system, originals_sealed, \
     originals_moving, originals_index_version, originals_moving_from_index";

pub(crate) const PSEUDONYM_COLUMNS: &str =
    "namespace, original_value, pseudonym_value, created_at, last_updated_at, original_sealed";
