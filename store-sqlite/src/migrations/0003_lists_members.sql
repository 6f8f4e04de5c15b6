-- Sending domains, their lists, members with their consent records, and the idempotency registry.
-- States are stored as their wire names and checked here too, so that no writer (a future
-- PostgreSQL adapter, a hand-run repair) can store a state the enums do not know.
CREATE TABLE domains (
    id                          INTEGER PRIMARY KEY,
    name                        TEXT    NOT NULL UNIQUE,
    status                      TEXT    NOT NULL CHECK (status IN ('pending_mta', 'active', 'disabled')),
    dkim_selector               TEXT,
    default_subscription_policy TEXT    NOT NULL CHECK (default_subscription_policy IN ('open', 'confirm', 'moderate', 'closed')),
    dns_ok                      INTEGER,
    dns_checked_at              INTEGER,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL
);

CREATE TABLE lists (
    id                   INTEGER PRIMARY KEY,
    domain_id            INTEGER NOT NULL REFERENCES domains (id),
    name                 TEXT    NOT NULL,
    display_name         TEXT    NOT NULL,
    kind                 TEXT    NOT NULL CHECK (kind IN ('announce', 'discussion')),
    status               TEXT    NOT NULL CHECK (status IN ('active', 'archived')),
    send_suspended       INTEGER NOT NULL DEFAULT 0,
    subscription_policy  TEXT    NOT NULL CHECK (subscription_policy IN ('open', 'confirm', 'moderate', 'closed')),
    posting_policy       TEXT    NOT NULL CHECK (posting_policy IN ('members', 'moderated', 'owners', 'open')),
    subject_tag          TEXT,
    footer_text          TEXT,
    footer_html          TEXT,
    reply_to             TEXT    NOT NULL CHECK (reply_to IN ('list', 'poster')),
    bounce_disable_score INTEGER NOT NULL,
    digest_frequency     TEXT    NOT NULL CHECK (digest_frequency IN ('daily', 'weekly')),
    max_message_kb       INTEGER NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    UNIQUE (domain_id, name)
);

-- `email_key` is the address lowercased: one subscription per address and list, whatever the
-- case the subscriber typed (the address itself keeps its case for delivery).
CREATE TABLE members (
    id              INTEGER PRIMARY KEY,
    list_id         INTEGER NOT NULL REFERENCES lists (id),
    email           TEXT    NOT NULL,
    email_key       TEXT    NOT NULL,
    display_name    TEXT,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'active', 'disabled', 'unsubscribed', 'removed')),
    pending_reason  TEXT    CHECK (pending_reason IN ('confirmation', 'moderation')),
    delivery_mode   TEXT    NOT NULL CHECK (delivery_mode IN ('regular', 'digest', 'nomail')),
    bounce_score    INTEGER NOT NULL DEFAULT 0,
    subscribed_at   INTEGER,
    last_bounce_at  INTEGER,
    disabled_reason TEXT,
    disabled_at     INTEGER,
    consent_source  TEXT,
    consent_at      INTEGER,
    consent_id      INTEGER REFERENCES consents (id),
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (list_id, email_key),
    CHECK ((status = 'pending') = (pending_reason IS NOT NULL))
);
-- The listing is ordered by id; an index ends with the rowid (= id), so each of these hands the
-- rows of its filter in id order and a page stops after `limit` rows, with no sort of the whole list:
-- no filter, status, status and delivery mode. (A delivery mode alone walks the list's index in id
-- order; a bounce floor too: both are rare.)
CREATE INDEX members_list ON members (list_id);
CREATE INDEX members_list_status ON members (list_id, status);
CREATE INDEX members_list_status_mode ON members (list_id, status, delivery_mode);

-- Member counts by list, status and delivery mode, kept by triggers: the listing's `total` for
-- status and mode filters, and the dashboard, read a few rows here instead of counting a million.
CREATE TABLE member_tallies (
    list_id       INTEGER NOT NULL,
    status        TEXT    NOT NULL,
    delivery_mode TEXT    NOT NULL,
    n             INTEGER NOT NULL,
    PRIMARY KEY (list_id, status, delivery_mode)
) WITHOUT ROWID;
CREATE TRIGGER members_tally_insert AFTER INSERT ON members BEGIN
    INSERT INTO member_tallies (list_id, status, delivery_mode, n) VALUES (new.list_id, new.status, new.delivery_mode, 1)
        ON CONFLICT (list_id, status, delivery_mode) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER members_tally_delete AFTER DELETE ON members BEGIN
    UPDATE member_tallies SET n = n - 1
        WHERE list_id = old.list_id AND status = old.status AND delivery_mode = old.delivery_mode;
END;
CREATE TRIGGER members_tally_update AFTER UPDATE OF list_id, status, delivery_mode ON members
    WHEN old.list_id IS NOT new.list_id OR old.status IS NOT new.status OR old.delivery_mode IS NOT new.delivery_mode
BEGIN
    UPDATE member_tallies SET n = n - 1
        WHERE list_id = old.list_id AND status = old.status AND delivery_mode = old.delivery_mode;
    INSERT INTO member_tallies (list_id, status, delivery_mode, n) VALUES (new.list_id, new.status, new.delivery_mode, 1)
        ON CONFLICT (list_id, status, delivery_mode) DO UPDATE SET n = n + 1;
END;

-- Substring search over a million addresses: a trigram index (case-insensitive). New members
-- enter it when their transaction commits, in one statement (the adapter's `SqliteTx::commit`);
-- triggers keep it in step with deletions and changed addresses. Queries of three characters or
-- more use it; two-character ones scan the list.
CREATE VIRTUAL TABLE members_email_fts USING fts5 (email_key, content = 'members', content_rowid = 'id', tokenize = 'trigram');
CREATE TRIGGER members_fts_delete AFTER DELETE ON members BEGIN
    INSERT INTO members_email_fts (members_email_fts, rowid, email_key) VALUES ('delete', old.id, old.email_key);
END;
CREATE TRIGGER members_fts_update AFTER UPDATE OF email_key ON members BEGIN
    INSERT INTO members_email_fts (members_email_fts, rowid, email_key) VALUES ('delete', old.id, old.email_key);
    INSERT INTO members_email_fts (rowid, email_key) VALUES (new.id, new.email_key);
END;

-- Consent evidence: one record per act of consent (a subscription, a confirmation, an import of
-- many rows under one attestation), kept for the legal record and never exposed by any route.
CREATE TABLE consents (
    id         INTEGER PRIMARY KEY,
    source     TEXT,
    evidence   TEXT,
    ip         TEXT,
    at         INTEGER NOT NULL
);

-- Idempotency-Key registry, keyed by API key. `state` running = reserved, the first request is
-- executing; done = `status` and `body` hold its answer, replayed until `expires_at`.
CREATE TABLE idempotency_keys (
    api_key_id   INTEGER NOT NULL,
    idem_key     TEXT    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    status       INTEGER,
    body         TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (api_key_id, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
