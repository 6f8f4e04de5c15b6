-- Users, their roles, API keys, administrator sessions and one-time tokens.
-- Secrets are stored as SHA-256 (keys, tokens, sessions) or Argon2id (passwords), never in clear.
CREATE TABLE users (
    id               INTEGER PRIMARY KEY,
    email            TEXT    NOT NULL,
    -- The address with its domain lowercased (EmailAddress's identity): one account per address.
    email_key        TEXT    NOT NULL UNIQUE,
    firstname        TEXT,
    name             TEXT,
    mobile           TEXT,
    language_code_id TEXT,
    password_hash    TEXT,
    status           TEXT    NOT NULL CHECK (status IN ('active', 'disabled')),
    email_verified_at INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);

-- A role is held on the installation, a domain or a list, named by the domain's and list's names
-- (which never change), so that roles can be granted before the domain exists in this store.
CREATE TABLE roles (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id),
    kind       TEXT    NOT NULL CHECK (kind IN ('site_admin', 'domain_admin', 'owner', 'moderator')),
    domain     TEXT    NOT NULL DEFAULT '',
    list       TEXT    NOT NULL DEFAULT '',
    granted_at INTEGER NOT NULL,
    UNIQUE (user_id, kind, domain, list)
);
CREATE INDEX roles_domain ON roles (domain, list);

CREATE TABLE api_keys (
    id                 INTEGER PRIMARY KEY,
    user_id            INTEGER NOT NULL REFERENCES users (id),
    name               TEXT    NOT NULL,
    prefix             TEXT    NOT NULL UNIQUE,
    secret_hash        TEXT    NOT NULL,
    scope_kind         TEXT    NOT NULL CHECK (scope_kind IN ('user', 'domain', 'list')),
    domain             TEXT    NOT NULL DEFAULT '',
    list               TEXT    NOT NULL DEFAULT '',
    perms              INTEGER NOT NULL,
    rate_limit_per_min INTEGER NOT NULL,
    expires_at         INTEGER,
    created_at         INTEGER NOT NULL,
    revoked_at         INTEGER
);
CREATE INDEX api_keys_user ON api_keys (user_id);

CREATE TABLE sessions (
    id           INTEGER PRIMARY KEY,
    token_hash   TEXT    NOT NULL UNIQUE,
    user_id      INTEGER NOT NULL REFERENCES users (id),
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);

CREATE TABLE one_time_tokens (
    id         INTEGER PRIMARY KEY,
    purpose    TEXT    NOT NULL,
    token_hash TEXT    NOT NULL UNIQUE,
    user_id    INTEGER REFERENCES users (id),
    subject_id INTEGER,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER
);
