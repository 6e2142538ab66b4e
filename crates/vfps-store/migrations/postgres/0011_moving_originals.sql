-- A namespace's rows being moved to another form of stored original
-- (`vfps keys encrypt-existing | decrypt-all | rotate --reindex`,
-- docs/privacy.md): while originals_moving is set, an original may be stored
-- in the old form too (plain; or, moving to sealed, the blind index under
-- originals_moving_from_index) and lookups try both. A sealed namespace's
-- blind indexes are under key version originals_index_version; inserts of
-- any other form are refused.
ALTER TABLE namespaces ADD COLUMN originals_moving boolean NOT NULL DEFAULT false;
ALTER TABLE namespaces ADD COLUMN originals_index_version integer NOT NULL DEFAULT 1;
ALTER TABLE namespaces ADD COLUMN originals_moving_from_index integer;
