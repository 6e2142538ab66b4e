-- Ended admin UI sessions (see the PostgreSQL migration). Times are
-- microseconds since the epoch, as elsewhere in this schema.
CREATE TABLE ui_session_ends (
    key BLOB PRIMARY KEY,
    ended_at INTEGER NOT NULL,
    keep_until INTEGER NOT NULL
);
