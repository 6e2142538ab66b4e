-- Service-account and personal access tokens (see the PostgreSQL migration).
-- Times are microseconds since the epoch, as elsewhere in this schema.
CREATE TABLE access_tokens (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('service-account', 'personal')),
    name TEXT NOT NULL,
    token_hash BLOB NOT NULL UNIQUE,
    is_admin INTEGER NOT NULL DEFAULT 0,
    grants TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
);
