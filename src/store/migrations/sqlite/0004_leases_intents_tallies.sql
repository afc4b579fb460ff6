-- Version 4: what a shared store needs, kept by the embedded one too.

-- Leases carry the holder's boot id (a pid and start time recycled after a reboot are not
-- the holder) and an expiry a holder renews. Both stay NULL in leases written before: no
-- boot check, no expiry. Added at the end of the row, after the fence's `lease_token`.
ALTER TABLE runs ADD COLUMN lease_boot_id TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at INTEGER;

-- Durable control intents (stop, cancel-agent) and their acknowledgements, which were
-- `.control/<runId>/<op>.{request,ack}.json` files beside the script copies. An intent is
-- pending while `acked_at` is NULL; the first acknowledgement sets the three ack columns.
CREATE TABLE control_intents (
    run_key      INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    op           TEXT    NOT NULL,
    action       TEXT    NOT NULL, -- 'stop' | 'cancel-agent'
    call_index   INTEGER,
    requested_at INTEGER NOT NULL,
    requested_by INTEGER NOT NULL,
    acked_at     INTEGER,
    acked_by     INTEGER,
    outcome      TEXT,             -- JSON object; NULL while pending
    PRIMARY KEY (run_key, op)
);

-- pending_intents(All): the pending intents of every run, oldest first, without walking the
-- acknowledged ones.
CREATE INDEX control_intents_pending ON control_intents (requested_at, op)
    WHERE acked_at IS NULL;

-- call_tail(): how many non-checkpoint call rows each generation has, counted as calls are
-- written, so status need not count a run's rows. Rows are never deleted but with their run.
CREATE TABLE call_tallies (
    run_key    INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    calls      INTEGER NOT NULL,
    PRIMARY KEY (run_key, generation)
) WITHOUT ROWID;

INSERT INTO call_tallies (run_key, generation, calls)
    SELECT run_key, generation, COUNT(*) FROM calls
    WHERE kind != 'checkpoint'
    GROUP BY run_key, generation;
