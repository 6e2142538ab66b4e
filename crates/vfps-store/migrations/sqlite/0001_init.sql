CREATE TABLE namespaces (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    pseudonym_generation_method INTEGER NOT NULL,
    pseudonym_length INTEGER NOT NULL,
    pseudonym_prefix TEXT,
    pseudonym_suffix TEXT,
    created_at INTEGER NOT NULL,
    last_updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE pseudonyms (
    namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
    original_value TEXT NOT NULL,
    pseudonym_value TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, original_value)
) WITHOUT ROWID;

CREATE UNIQUE INDEX pseudonyms_namespace_pseudonym_value_key
    ON pseudonyms (namespace, pseudonym_value);

CREATE INDEX pseudonyms_namespace_keyset_idx
    ON pseudonyms (namespace, created_at DESC, original_value DESC);
