-- Originals sealed at rest (see the PostgreSQL migration).
ALTER TABLE namespaces ADD COLUMN originals_sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pseudonyms ADD COLUMN original_sealed BLOB;
ALTER TABLE multi_pseudonyms ADD COLUMN original_sealed BLOB;

CREATE TABLE namespace_keys (
    namespace_uid INTEGER NOT NULL,
    version INTEGER NOT NULL,
    data_key BLOB NOT NULL,
    index_key BLOB NOT NULL,
    wrapped_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (namespace_uid, version)
) WITHOUT ROWID;
