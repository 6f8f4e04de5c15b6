-- `courrier store copy`: which SQLite installation is being copied into this database (its data
-- key's id), since when, and when the copy was verified. A copy interrupted half-way finds its row
-- and continues; a database holding rows but no row here, or another installation's, is refused.
CREATE TABLE store_copy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    source      TEXT    NOT NULL,
    started_at  BIGINT  NOT NULL,
    finished_at BIGINT
);
