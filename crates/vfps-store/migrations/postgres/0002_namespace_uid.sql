-- Tells incarnations of one namespace name apart: a namespace deleted and created
-- again gets a new uid, and an insert generated for the old one is skipped instead
-- of landing in the new one with the old settings. Namespaces created before this
-- migration keep 0; new ones get a random non-zero uid.
ALTER TABLE namespaces ADD COLUMN uid bigint NOT NULL DEFAULT 0;
