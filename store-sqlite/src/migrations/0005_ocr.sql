-- OCR documents (issue 6). The file itself lives in the content-addressed document store under
-- the data directory (`blob` is its SHA-256); this row is its metadata and the text read.
CREATE TABLE ocr_documents (
    id         INTEGER PRIMARY KEY,
    -- The client's opaque identifier: 128 random bits as hex.
    ocr_id     TEXT    NOT NULL UNIQUE,
    user_id    INTEGER NOT NULL REFERENCES users (id),
    blob       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('pdf', 'jpeg', 'png', 'tiff', 'text')),
    size_bytes INTEGER NOT NULL,
    pages      INTEGER NOT NULL,
    lang       TEXT    NOT NULL,
    profile    TEXT    NOT NULL CHECK (profile IN ('raw', 'invoice')),
    state      TEXT    NOT NULL CHECK (state IN ('recognized', 'stored', 'failed')),
    text       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX ocr_documents_state ON ocr_documents (state, created_at);

-- Maintenance mode of the OCR service: one row when on. In the database so that the server and
-- `courrier maintenance on|off` agree without signals.
CREATE TABLE ocr_maintenance (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    since INTEGER NOT NULL
);
