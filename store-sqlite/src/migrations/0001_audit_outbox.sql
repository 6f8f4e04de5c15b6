-- Timestamps are integer microseconds since the Unix epoch (UTC); ids are 64-bit integers.
CREATE TABLE audit_log (
    id            INTEGER PRIMARY KEY,
    at            INTEGER NOT NULL,
    request_id    TEXT    NOT NULL,
    actor_user_id INTEGER,
    actor_key_id  INTEGER,
    action        TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    outcome       TEXT    NOT NULL CHECK (outcome IN ('done', 'forbidden', 'not_found'))
);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_action_at ON audit_log (action, at DESC);
CREATE INDEX audit_log_actor_at ON audit_log (actor_user_id, at DESC);

CREATE TABLE outbox_events (
    id         INTEGER PRIMARY KEY,
    public_id  TEXT    NOT NULL UNIQUE,
    name       TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    domain_id  INTEGER,
    list_id    INTEGER,
    data       TEXT    NOT NULL
);
