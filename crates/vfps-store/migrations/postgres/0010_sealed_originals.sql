-- Originals sealed at rest (docs/privacy.md, "Nothing at rest re-identifies"):
-- a sealed namespace's rows keep their original's blind index in
-- original_value (so lookup and uniqueness work as before) and the original
-- itself only as an AEAD ciphertext in original_sealed, under the
-- namespace's data key. The keys live here only wrapped by the key source
-- (VFPS_KEYS), one row a namespace incarnation and key version.
ALTER TABLE namespaces ADD COLUMN originals_sealed boolean NOT NULL DEFAULT false;
ALTER TABLE pseudonyms ADD COLUMN original_sealed bytea;
ALTER TABLE multi_pseudonyms ADD COLUMN original_sealed bytea;

CREATE TABLE namespace_keys (
    namespace_uid bigint NOT NULL,
    version integer NOT NULL,
    data_key bytea NOT NULL,
    index_key bytea NOT NULL,
    wrapped_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_uid, version)
);
