-- CSV pseudonymization jobs (see the PostgreSQL migration). Times are
-- microseconds since the epoch, as elsewhere in this schema.
CREATE TABLE csv_jobs (
    id TEXT PRIMARY KEY,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN
        ('awaiting_upload', 'queued', 'running', 'completed', 'failed', 'cancelled')),
    spec TEXT NOT NULL,
    plan TEXT,
    input_bytes INTEGER,
    epoch INTEGER NOT NULL DEFAULT 0,
    runner TEXT,
    lease_until INTEGER,
    progress_at INTEGER,
    checkpoint TEXT,
    rows_done INTEGER NOT NULL DEFAULT 0,
    bytes_done INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    takeovers TEXT NOT NULL DEFAULT '[]',
    started_at INTEGER,
    finished_at INTEGER
);
CREATE INDEX csv_jobs_runnable ON csv_jobs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX csv_jobs_created_by ON csv_jobs (created_by, created_at);
