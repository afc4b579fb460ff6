-- Worktree isolation: the base every isolated call of a run starts from, written at
-- admission, and what each isolated call changed. JSON; NULL for runs and calls that
-- isolate nothing.
ALTER TABLE runs ADD COLUMN workspace TEXT;
ALTER TABLE calls ADD COLUMN changes TEXT;
