-- The moment a usage limit lifts (Unix milliseconds) while a run is paused `usage_limit` and
-- the provider said when; NULL otherwise.
ALTER TABLE runs ADD COLUMN reset_at BIGINT;
