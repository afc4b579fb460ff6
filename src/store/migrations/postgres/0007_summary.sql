-- What a run cost at the end of its latest generation (JSON, `EndSummary`): call counts of
-- that generation, usage per backend and model over every generation. NULL until a
-- generation ends or pauses the run.
ALTER TABLE runs ADD COLUMN summary TEXT;
