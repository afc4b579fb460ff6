-- Version 5: the checkpoint rows of a run without reading its other rows.
--
-- A status of a paused or ended run lists the checkpoints taken; reading them through the
-- primary key walked every call row of the run. This index holds checkpoint rows only (as few
-- as there are questions to a human), so agent-call writes never touch it.
CREATE INDEX calls_checkpoints ON calls (run_key, generation, settlement_ordinal, call_index)
    WHERE kind = 'checkpoint';
