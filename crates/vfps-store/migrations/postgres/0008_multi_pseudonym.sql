-- Multi-pseudonym namespaces (the MII interface's multi-pseudonym domains):
-- an original may have many pseudonyms there ($pseudonymize-multiple). Off
-- for every namespace made before.
ALTER TABLE namespaces ADD COLUMN multi_pseudonym boolean NOT NULL DEFAULT false;

-- The entries of multi-pseudonym namespaces, and only theirs: `pseudonyms`
-- keeps its one-row-per-original key (and its hot paths) for the others. A
-- namespace's entries are in one of the two tables, never both (the inserts
-- check the namespace's kind), so the key here keeps each pseudonym unique
-- in its namespace. No foreign key, as for `pseudonyms`: the inserts lock
-- the namespace's row and a namespace delete removes these rows too.
CREATE TABLE multi_pseudonyms (
    namespace text NOT NULL,
    pseudonym_value text NOT NULL,
    original_value text NOT NULL,
    created_at timestamptz NOT NULL,
    last_updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, pseudonym_value)
);

-- All of an original's pseudonyms ($pseudonymize-multiple with count 0, erasure).
CREATE INDEX multi_pseudonyms_namespace_original_idx
    ON multi_pseudonyms (namespace, original_value);

-- Keyset pagination for List: (created_at desc, pseudonym_value desc) per
-- namespace (the pseudonym, unique here, breaks ties; an original is not).
CREATE INDEX multi_pseudonyms_namespace_keyset_idx
    ON multi_pseudonyms (namespace, created_at DESC, pseudonym_value DESC);
