-- SQLite's migration 20 gave `inbound` a `spool_key` (the spooled message a row was moved from,
-- unique so a repeated move adds nothing). PostgreSQL servers keep no spool (LMTP stores in
-- `inbound` directly), but the column is mirrored so both schemas stay one: `store copy` copies an
-- SQLite installation's rows column for column, and a row moved from the spool keeps its key.
ALTER TABLE inbound ADD COLUMN spool_key TEXT;
CREATE UNIQUE INDEX inbound_spool_key ON inbound (spool_key) WHERE spool_key IS NOT NULL;
