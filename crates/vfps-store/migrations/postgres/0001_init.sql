CREATE TABLE namespaces (
    name text PRIMARY KEY,
    description text NOT NULL DEFAULT '',
    pseudonym_generation_method integer NOT NULL,
    pseudonym_length integer NOT NULL,
    pseudonym_prefix text,
    pseudonym_suffix text,
    created_at timestamptz NOT NULL,
    last_updated_at timestamptz NOT NULL
);

-- No foreign key: its per-row trigger would cost a query per inserted row. The
-- upsert checks that the namespace exists; deleting a namespace deletes its
-- pseudonyms in the same transaction under a lock that excludes inserts, so no
-- pseudonym can outlive its namespace.
CREATE TABLE pseudonyms (
    namespace text NOT NULL,
    original_value text NOT NULL,
    pseudonym_value text NOT NULL,
    created_at timestamptz NOT NULL,
    last_updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, original_value)
);

-- A reverse lookup must never be ambiguous: a generated collision is regenerated.
CREATE UNIQUE INDEX pseudonyms_namespace_pseudonym_value_key
    ON pseudonyms (namespace, pseudonym_value);

-- Keyset pagination for List: (created_at desc, original_value desc) per namespace.
CREATE INDEX pseudonyms_namespace_keyset_idx
    ON pseudonyms (namespace, created_at DESC, original_value DESC);
