-- Invoices (issue 7): the supplier directory that invoices and confirmations build, the zones
-- learned per supplier, usage per user and month with each user's plan, and the records of
-- client software.

CREATE TABLE ocr_suppliers (
    id          INTEGER PRIMARY KEY,
    -- Normalised (upper case, no spaces): the strongest key of a supplier. NULL when unknown.
    vat_number  TEXT UNIQUE,
    name        TEXT    NOT NULL,
    -- The name folded (lower case, single spaces) for lookups by name.
    name_key    TEXT    NOT NULL,
    siret       TEXT    NOT NULL DEFAULT '',
    siren       TEXT    NOT NULL DEFAULT '',
    adresse     TEXT    NOT NULL DEFAULT '',
    cp          TEXT    NOT NULL DEFAULT '',
    ville       TEXT    NOT NULL DEFAULT '',
    pays        TEXT    NOT NULL DEFAULT '',
    code_pays   TEXT    NOT NULL DEFAULT '',
    -- What taught us most recently: 'invoice' (extracted) or 'confirmation' (a user said so).
    source      TEXT    NOT NULL CHECK (source IN ('invoice', 'confirmation')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX ocr_suppliers_name ON ocr_suppliers (name_key);

-- One row per supplier and zone name; shared by every user (decisions.md).
CREATE TABLE ocr_supplier_zones (
    supplier_id   INTEGER NOT NULL REFERENCES ocr_suppliers (id) ON DELETE CASCADE,
    name          TEXT    NOT NULL,
    page          INTEGER NOT NULL,
    -- At image scale (ratio 1), the latest confirmed.
    x             INTEGER NOT NULL,
    y             INTEGER NOT NULL,
    w             INTEGER NOT NULL,
    h             INTEGER NOT NULL,
    confirmations INTEGER NOT NULL,
    last_value    TEXT    NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (supplier_id, name)
);

CREATE TABLE ocr_usage (
    user_id   INTEGER NOT NULL REFERENCES users (id),
    -- 'YYYY-MM' (UTC).
    month     TEXT    NOT NULL,
    documents INTEGER NOT NULL DEFAULT 0,
    pages     INTEGER NOT NULL DEFAULT 0,
    cuts      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, month)
);

-- A user without a row has the plan `default` (COURRIER_OCR_PAGES_PER_MONTH).
CREATE TABLE ocr_plans (
    user_id         INTEGER PRIMARY KEY REFERENCES users (id),
    pages_per_month INTEGER NOT NULL CHECK (pages_per_month >= 0)
);

CREATE TABLE ocr_software (
    id             TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL,
    latest_version TEXT    NOT NULL,
    min_version    TEXT    NOT NULL,
    download_url   TEXT    NOT NULL,
    notes          TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
