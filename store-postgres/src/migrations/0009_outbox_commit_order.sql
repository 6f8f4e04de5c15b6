-- Writers of different keys commit together (issue 38), so outbox ids, drawn at INSERT, are no
-- longer committed in order: a reader that moved its cursor past id 7 could miss id 6 committing
-- a moment later. Each event records the id of the transaction that wrote it; readers take events
-- in (xid, id) order and only those of transactions older than every one of this database still
-- running (`outbox.rs`, the horizon), so whatever commits later sorts after what they have read. Rows written
-- before this migration share its transaction's id and keep their id order.
ALTER TABLE outbox_events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX outbox_events_commit_order ON outbox_events (xid, id);
