-- Ended admin UI sessions: the sessions under `key` (the SHA-256 of one
-- session's id, or of one user's subject) issued before `ended_at` are ended;
-- the row is kept until every session it could end has expired.
CREATE TABLE ui_session_ends (
    key bytea PRIMARY KEY,
    ended_at timestamptz NOT NULL,
    keep_until timestamptz NOT NULL
);
