-- The trigram index goes: keeping it cost most of an import's time (each batch's terms flushed
-- and merged) and still answered a common substring in 70-290 ms, because a match list of 60,000
-- members had to be merged and counted in full for `total`. Substring search is now answered by
-- the adapter's in-memory search snapshot of big lists (`search.rs`), and by `instr` over the
-- list's rows for small ones.
DROP TRIGGER members_fts_delete;
DROP TRIGGER members_fts_update;
DROP TABLE members_email_fts;

-- Which members changed (an update of a searched column, or a deletion) since a snapshot was
-- taken, so that a snapshot catches up by re-reading those rows instead of a whole list. New
-- members need no entry: their ids are above every id a snapshot holds, so a snapshot reads
-- them by id. `seq` never goes back (AUTOINCREMENT), also after old entries are pruned.
CREATE TABLE member_changes (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    list_id   INTEGER NOT NULL,
    member_id INTEGER NOT NULL
);
CREATE TRIGGER members_changes_update AFTER UPDATE OF list_id, email_key, status, delivery_mode, bounce_score ON members
    WHEN old.list_id IS NOT new.list_id OR old.email_key IS NOT new.email_key OR old.status IS NOT new.status
      OR old.delivery_mode IS NOT new.delivery_mode OR old.bounce_score IS NOT new.bounce_score
BEGIN
    INSERT INTO member_changes (list_id, member_id) VALUES (old.list_id, old.id);
    INSERT INTO member_changes (list_id, member_id) SELECT new.list_id, new.id WHERE new.list_id IS NOT old.list_id;
END;
CREATE TRIGGER members_changes_delete AFTER DELETE ON members BEGIN
    INSERT INTO member_changes (list_id, member_id) VALUES (old.list_id, old.id);
END;
-- The log keeps its newest 65,536 entries or so: every 1,024th entry deletes the 1,024 oldest,
-- which costs a writer nothing it would notice. A snapshot further behind than that finds its next
-- entry gone and rebuilds (it rebuilds past 50,000 pending entries anyway).
CREATE TRIGGER member_changes_prune AFTER INSERT ON member_changes WHEN new.seq % 1024 = 0 BEGIN
    DELETE FROM member_changes WHERE seq <= new.seq - 65536;
END;
