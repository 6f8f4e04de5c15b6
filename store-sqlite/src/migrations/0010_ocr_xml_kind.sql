-- XML invoices (CII, UBL: issue 7) are a kind of their own. SQLite cannot widen a CHECK, so the
-- table is rebuilt; no other table references it, so dropping the old one breaks nothing.
CREATE TABLE ocr_documents_new (
    id         INTEGER PRIMARY KEY,
    ocr_id     TEXT    NOT NULL UNIQUE,
    user_id    INTEGER NOT NULL REFERENCES users (id),
    blob       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('pdf', 'jpeg', 'png', 'tiff', 'text', 'xml')),
    size_bytes INTEGER NOT NULL,
    pages      INTEGER NOT NULL,
    lang       TEXT    NOT NULL,
    profile    TEXT    NOT NULL CHECK (profile IN ('raw', 'invoice')),
    state      TEXT    NOT NULL CHECK (state IN ('recognized', 'stored', 'failed')),
    text       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    meta       TEXT    NOT NULL DEFAULT ''
);
INSERT INTO ocr_documents_new (id, ocr_id, user_id, blob, kind, size_bytes, pages, lang, profile, state, text, created_at, meta)
    SELECT id, ocr_id, user_id, blob, kind, size_bytes, pages, lang, profile, state, text, created_at, meta FROM ocr_documents;
DROP TABLE ocr_documents;
ALTER TABLE ocr_documents_new RENAME TO ocr_documents;
CREATE INDEX ocr_documents_state ON ocr_documents (state, created_at);
