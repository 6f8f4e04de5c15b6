-- New members are counted by the adapter (`mailing.rs`), once per batch of an import, instead of
-- by a trigger per row: the trigger made every INSERT a two-table statement that SQLite guards
-- with a statement journal (about a tenth of an import's time, measured). Updates and deletions
-- keep their triggers: they come one row at a time anyway.
DROP TRIGGER members_tally_insert;
