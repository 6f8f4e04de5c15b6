-- The spool of accepted messages (issue 20): LMTP stores what it accepts in a file of its own
-- (`spool.db` beside this database), and processing moves each spooled message into `inbound`.
-- `spool_key` names the spooled message it came from (the spool file's random generation and
-- the row's id): the move records it in the same transaction as the row, so a move repeated
-- after a crash between this commit and the spool's delete finds it here and adds nothing.
ALTER TABLE inbound ADD COLUMN spool_key TEXT;
CREATE UNIQUE INDEX inbound_spool_key ON inbound (spool_key) WHERE spool_key IS NOT NULL;
