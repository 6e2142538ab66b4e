-- Whether a namespace lets an original's entry be deleted ($delete-pseudonym);
-- off for every namespace made before.
ALTER TABLE namespaces ADD COLUMN pseudonym_deletion_allowed INTEGER NOT NULL DEFAULT 0;
