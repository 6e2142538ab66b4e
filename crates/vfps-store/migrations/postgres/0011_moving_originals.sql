-- A namespace's rows being moved between plain and sealed originals
-- (`vfps keys encrypt-existing | decrypt-all`, docs/privacy.md): while set,
-- an original may be stored in either form and lookups try both; inserts
-- of the form originals_sealed does not name are refused.
ALTER TABLE namespaces ADD COLUMN originals_moving boolean NOT NULL DEFAULT false;
