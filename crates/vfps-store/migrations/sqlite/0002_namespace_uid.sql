-- Tells incarnations of one namespace name apart (see the PostgreSQL migration).
ALTER TABLE namespaces ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;
