-- A restored database may have forgotten pseudonyms that callers were already
-- given (everything after the restore point). A Create of such an original
-- would mint a different pseudonym: one subject split in two. So a restore
-- writes a hold here, and while a hold is unconfirmed the trigger below
-- refuses every insert of an original the database does not know; reads and
-- re-Creates of known originals go on. `vfps restore confirm` (after the
-- operator has replayed what the restore lost) confirms it and drops the
-- trigger, which exists only while a hold is open: no cost otherwise.
CREATE TABLE vfps_restore_holds (
    id bigserial PRIMARY KEY,
    restored_at timestamptz NOT NULL DEFAULT now(),
    -- `latest` or the target time, as the restore was asked.
    restored_to text NOT NULL,
    confirmed_at timestamptz
);

CREATE FUNCTION vfps_refuse_new_originals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM vfps_restore_holds WHERE confirmed_at IS NULL)
       AND NOT EXISTS (SELECT 1 FROM pseudonyms
                       WHERE namespace = NEW.namespace AND original_value = NEW.original_value) THEN
        RAISE EXCEPTION 'the database was restored from a backup: new originals are refused until an operator confirms the restore (vfps restore confirm)'
            USING ERRCODE = 'VFR01';
    END IF;
    RETURN NEW;
END
$$;
