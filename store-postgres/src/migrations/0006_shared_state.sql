-- What every server of the installation shares beyond the contexts' records. Quotas and limits
-- every server counts together (decisions.md): UNLOGGED,
-- as they are counters, not records. Not written to the WAL, they cost no fsync; a crash of the
-- database server empties them, which forgives the requests of the last minutes, nothing more.

-- API keys' token buckets (access/limits.rs `Bucket`): `tat` is the instant at which the bucket
-- is full again, in microseconds times the quota; `excess` is what the last request overran the
-- bucket by (> 0: refused), returned by the same upsert that counted it.
CREATE UNLOGGED TABLE limit_buckets (
    key        TEXT    PRIMARY KEY,
    per_minute BIGINT  NOT NULL,
    tat        NUMERIC NOT NULL,
    excess     NUMERIC NOT NULL
);

-- Sliding windows (login failures per address and source, password resets, DNS checks, login
-- links): the instants (microseconds) still inside the window, oldest first, at most the number
-- allowed. `expires_at`: when the newest leaves it (the row can be forgotten then).
CREATE UNLOGGED TABLE limit_windows (
    key        TEXT     PRIMARY KEY,
    times      BIGINT[] NOT NULL,
    refused    BOOLEAN  NOT NULL DEFAULT FALSE,
    expires_at BIGINT   NOT NULL
);
CREATE INDEX limit_windows_expires ON limit_windows (expires_at);

-- Secrets every server must read (decisions.md): the installation's data key (webhook secrets,
-- DKIM private keys, VERP tags), made by the first server to start and sealed by
-- COURRIER_MASTER_KEY, which every server is given. Never in clear here.
CREATE TABLE installation_secrets (
    name       TEXT   PRIMARY KEY,
    sealed     TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
