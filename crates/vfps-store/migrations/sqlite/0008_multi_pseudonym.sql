-- Multi-pseudonym namespaces (see the PostgreSQL migration). Times are
-- microseconds since the epoch, as elsewhere in this schema.
ALTER TABLE namespaces ADD COLUMN multi_pseudonym INTEGER NOT NULL DEFAULT 0;

CREATE TABLE multi_pseudonyms (
    namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
    pseudonym_value TEXT NOT NULL,
    original_value TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, pseudonym_value)
) WITHOUT ROWID;

CREATE INDEX multi_pseudonyms_namespace_original_idx
    ON multi_pseudonyms (namespace, original_value);

CREATE INDEX multi_pseudonyms_namespace_keyset_idx
    ON multi_pseudonyms (namespace, created_at DESC, pseudonym_value DESC);
