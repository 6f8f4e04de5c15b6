-- Mail-account credentials of lists (issue 22): one IMAP `ingest` mailbox and one SMTP
-- `submission` account per list at most. The password is sealed with the operator's keyring
-- (COURRIER_KEYRING) bound to the list and kind; it is never stored in clear.
CREATE TABLE mail_credentials (
    id              INTEGER PRIMARY KEY,
    list_id         INTEGER NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
    kind            TEXT    NOT NULL CHECK (kind IN ('ingest', 'submission')),
    host            TEXT    NOT NULL,
    port            INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    security        TEXT    NOT NULL CHECK (security IN ('tls', 'starttls')),
    username        TEXT    NOT NULL,
    password_sealed TEXT    NOT NULL,
    folder          TEXT,
    last_ok_at      INTEGER,
    last_error      TEXT,
    last_error_at   INTEGER,
    -- A submission account that answered a 4xx: the list's copies are not claimed before this.
    throttled_until INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (list_id, kind)
);
CREATE INDEX mail_credentials_throttled ON mail_credentials (list_id) WHERE throttled_until IS NOT NULL;
