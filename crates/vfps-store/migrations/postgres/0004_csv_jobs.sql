-- CSV pseudonymization jobs: the spec, the state, the lease (runner, expiry,
-- fencing epoch) and the last checkpoint, so any replica can resume any job.
-- Spec, plan, checkpoint and takeovers are JSON written by vfps; no value of
-- a file is ever stored here.
CREATE TABLE csv_jobs (
    id text PRIMARY KEY,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    state text NOT NULL CHECK (state IN
        ('awaiting_upload', 'queued', 'running', 'completed', 'failed', 'cancelled')),
    spec text NOT NULL,
    plan text,
    input_bytes bigint,
    epoch bigint NOT NULL DEFAULT 0,
    runner text,
    lease_until timestamptz,
    progress_at timestamptz,
    checkpoint text,
    rows_done bigint NOT NULL DEFAULT 0,
    bytes_done bigint NOT NULL DEFAULT 0,
    error text,
    takeovers text NOT NULL DEFAULT '[]',
    started_at timestamptz,
    finished_at timestamptz
);
-- What runners look for, oldest first.
CREATE INDEX csv_jobs_runnable ON csv_jobs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX csv_jobs_created_by ON csv_jobs (created_by, created_at);
