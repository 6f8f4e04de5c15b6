-- Moderation (issue 20): a held post not decided within its list's `held_days` is discarded by
-- the housekeeping.
ALTER TABLE lists ADD COLUMN held_days INTEGER NOT NULL DEFAULT 14 CHECK (held_days BETWEEN 1 AND 365);
-- The expiry walks held posts by age.
CREATE INDEX held_posts_received ON held_posts (received_at);
