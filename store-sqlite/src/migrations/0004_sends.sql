-- Sends and their per-recipient copies: the durable queue. A copy is claimed with a lease
-- (`sending` until `lease_until`); a worker that dies leaves the lease to expire and the copy
-- goes back to the queue, so a crash loses nothing.
CREATE TABLE sends (
    id           INTEGER PRIMARY KEY,
    list_id      INTEGER NOT NULL REFERENCES lists (id),
    subject      TEXT    NOT NULL,
    text_body    TEXT,
    html_body    TEXT,
    message_id   TEXT    NOT NULL,
    -- `post`: a message to the list's regular members; `digest`: the collected posts, to its
    -- digest members.
    kind         TEXT    NOT NULL DEFAULT 'post' CHECK (kind IN ('post', 'digest')),
    state        TEXT    NOT NULL CHECK (state IN ('queued', 'sending', 'completed', 'failed', 'cancelled')),
    recipients   INTEGER NOT NULL,
    created_by   INTEGER,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER
);
CREATE INDEX sends_open ON sends (state) WHERE state IN ('queued', 'sending');

CREATE TABLE copies (
    id              INTEGER PRIMARY KEY,
    send_id         INTEGER NOT NULL REFERENCES sends (id),
    list_id         INTEGER NOT NULL,
    member_id       INTEGER NOT NULL,
    recipient       TEXT    NOT NULL,
    dest_domain     TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('queued', 'sending', 'sent', 'deferred', 'failed', 'bounced', 'cancelled')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
-- What workers claim: due copies in order; what `GET .../sends/{id}` counts.
CREATE INDEX copies_due ON copies (state, next_attempt_at) WHERE state IN ('queued', 'deferred');
CREATE INDEX copies_leased ON copies (lease_until) WHERE state = 'sending';
CREATE INDEX copies_send_state ON copies (send_id, state);

-- Where each list's digest stands: posts after `covered_until` go into its next digest.
CREATE TABLE digest_state (
    list_id       INTEGER PRIMARY KEY REFERENCES lists (id),
    covered_until INTEGER NOT NULL,
    last_run_at   INTEGER NOT NULL
);
