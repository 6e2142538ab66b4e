-- The identifier system a namespace's originals belong to (the MII
-- interface's `original.system`): declared at creation, or adopted once by
-- the first pseudonymization that names one, never changed after. NULL: none
-- yet (every namespace made before).
ALTER TABLE namespaces ADD COLUMN original_system text;
