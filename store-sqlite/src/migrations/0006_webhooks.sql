-- Webhooks and the durable queue of their deliveries (issue 8). The secret is sealed with the
-- installation's data key (never stored in clear); `events` is a comma-separated list of the
-- contract's event names.
CREATE TABLE webhooks (
    id              INTEGER PRIMARY KEY,
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL,
    domain_id       INTEGER REFERENCES domains (id) ON DELETE CASCADE,
    list_id         INTEGER REFERENCES lists (id) ON DELETE CASCADE,
    secret_sealed   TEXT    NOT NULL,
    created_by      INTEGER,
    created_at      INTEGER NOT NULL,
    -- Set when a receiver answered 410 Gone: no more deliveries are made to it.
    disabled_at     INTEGER,
    last_success_at INTEGER,
    last_error      TEXT,
    last_error_at   INTEGER
);

-- One row per (webhook, event): the body is built once, so every attempt sends the same bytes
-- under the same X-Svc-Delivery. Leased like copies (`sending` until `lease_until`): a worker
-- that dies mid-POST leaves the lease to expire and the delivery goes back to the queue.
CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY,
    webhook_id      INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        INTEGER NOT NULL,
    event_public_id TEXT    NOT NULL,
    event_name      TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('queued', 'sending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'queued';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_until) WHERE state = 'sending';

-- How far the outbox has been fanned out to webhooks. Starts after the events recorded before
-- webhooks existed: no webhook could have asked for them.
CREATE TABLE webhook_cursor (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    event_id INTEGER NOT NULL
);
INSERT INTO webhook_cursor (id, event_id) SELECT 1, COALESCE(MAX(id), 0) FROM outbox_events;
