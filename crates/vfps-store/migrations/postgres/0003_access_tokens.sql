-- Service-account and personal access tokens. Only the SHA-256 of a token's
-- plaintext is kept; grants are a JSON array of {"namespace", "permissions"}.
CREATE TABLE access_tokens (
    id text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('service-account', 'personal')),
    name text NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    is_admin boolean NOT NULL DEFAULT false,
    grants text NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
