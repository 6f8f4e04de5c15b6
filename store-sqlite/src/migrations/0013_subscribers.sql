-- Subscriber self-service: the one-time login links mailed to an address, the sessions they open
-- (cookie `svc_subscriber`), an index to find an address's subscriptions across lists, and the
-- subscriber (a member) as the actor of an audit entry. Secrets are stored as SHA-256.
CREATE TABLE subscriber_links (
    id         INTEGER PRIMARY KEY,
    token_hash TEXT    NOT NULL UNIQUE,
    email      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);

CREATE TABLE subscriber_sessions (
    id           INTEGER PRIMARY KEY,
    token_hash   TEXT    NOT NULL UNIQUE,
    email        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);

CREATE INDEX members_email_key ON members (email_key, list_id);

ALTER TABLE audit_log ADD COLUMN actor_member_id INTEGER;
