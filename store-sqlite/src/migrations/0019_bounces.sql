-- Bounces (issue 21): every bounce recorded, permanent or temporary, with where it came from;
-- the member's score, last bounce and disabling stay on `members` (the contract's fields).
CREATE TABLE bounces (
    id          INTEGER PRIMARY KEY,
    list_id     INTEGER NOT NULL REFERENCES lists (id),
    member_id   INTEGER NOT NULL REFERENCES members (id),
    copy_id     INTEGER,
    permanence  TEXT    NOT NULL CHECK (permanence IN ('temporary', 'permanent')),
    source      TEXT    NOT NULL CHECK (source IN ('dsn', 'report', 'smtp', 'expired')),
    status_code TEXT,
    diagnostic  TEXT,
    scored      INTEGER NOT NULL,
    received_at INTEGER NOT NULL
);
CREATE INDEX bounces_member ON bounces (member_id, received_at);
CREATE INDEX bounces_list_time ON bounces (list_id, received_at);

-- The decay sweep (a score back to 0 after 7 quiet days) reads only the members with a score.
CREATE INDEX members_bouncing ON members (last_bounce_at) WHERE bounce_score > 0;
