-- Mail in (issue 20). `inbound`: every message a list address received (over LMTP, or fetched
-- from an `ingest` mailbox), stored before the sender is told it was taken, then processed. A
-- message still `received` after a crash is processed at the next start: nothing acknowledged is
-- lost, and its outcome is recorded in the same transaction as what it did (a send, a held post),
-- so it is done once.
CREATE TABLE inbound (
    id            INTEGER PRIMARY KEY,
    list_id       INTEGER NOT NULL REFERENCES lists (id),
    -- What the recipient address named: `post` (L@D), `request`, `join`, `leave`, `owner`,
    -- `bounces` (L-bounces+token@D, the token in `bounce_token`).
    role          TEXT    NOT NULL CHECK (role IN ('post', 'request', 'join', 'leave', 'owner', 'bounces')),
    bounce_token  TEXT,
    recipient     TEXT    NOT NULL,
    -- The SMTP envelope sender; NULL for the null reverse-path `<>` (bounces, auto-replies).
    envelope_from TEXT,
    raw           BLOB    NOT NULL,
    size          INTEGER NOT NULL,
    received_at   INTEGER NOT NULL,
    -- `received`: stored, not processed yet (or its role's handler is not wired); `done`: processed,
    -- `outcome` says how (`posted`, `held`, `duplicate`, `loop`, `auto_reply`, ...).
    state         TEXT    NOT NULL CHECK (state IN ('received', 'done')),
    outcome       TEXT,
    processed_at  INTEGER
);
CREATE INDEX inbound_waiting ON inbound (id) WHERE state = 'received';

-- Posts waiting for a moderator: the whole message, and what the moderation listing shows.
CREATE TABLE held_posts (
    id            INTEGER PRIMARY KEY,
    list_id       INTEGER NOT NULL REFERENCES lists (id),
    inbound_id    INTEGER REFERENCES inbound (id),
    raw           BLOB    NOT NULL,
    envelope_from TEXT,
    from_addr     TEXT,
    subject       TEXT,
    message_id    TEXT,
    received_at   INTEGER NOT NULL,
    reason        TEXT    NOT NULL CHECK (reason IN ('not_member', 'moderated', 'owners_only', 'suspended', 'archived', 'too_large')),
    size          INTEGER NOT NULL
);
CREATE INDEX held_posts_list ON held_posts (list_id, id);
CREATE INDEX held_posts_message_id ON held_posts (list_id, message_id);

-- A send made from a post carries the post itself: its copies keep the post's MIME structure.
ALTER TABLE sends ADD COLUMN raw_message BLOB;
-- Duplicate posts (the same Message-ID within 7 days) are found by list and Message-ID.
CREATE INDEX sends_message_id ON sends (list_id, message_id);

-- DMARC mitigation: `munge_from` (the default) rewrites From when the poster's domain publishes
-- p=reject or p=quarantine; `none` leaves it.
ALTER TABLE lists ADD COLUMN dmarc_mitigation TEXT NOT NULL DEFAULT 'munge_from' CHECK (dmarc_mitigation IN ('munge_from', 'none'));
