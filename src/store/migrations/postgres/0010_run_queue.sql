-- The folder server's queue of starts waiting for a slot (docs/serve.md, "Queue"): one row per
-- start, in the order queued (seq). A replica that frees a slot claims the oldest waiting row
-- (claimed_by until claim_until, `FOR UPDATE SKIP LOCKED`) and removes it once the run is
-- admitted; a row canceled or refused before it became a run keeps its outcome until
-- housekeeping deletes it. Enqueueing holds a transaction advisory lock, so the bound is
-- never passed by replicas enqueueing at once.
CREATE TABLE run_queue (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      TEXT NOT NULL UNIQUE,
    workflow    TEXT NOT NULL,
    caller      TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    enqueued_at BIGINT NOT NULL,
    claimed_by  TEXT,
    claim_until BIGINT,
    outcome     TEXT CHECK (outcome IN ('canceled', 'failed')),
    message     TEXT,
    ended_at    BIGINT
);
CREATE INDEX run_queue_waiting ON run_queue (seq) WHERE outcome IS NULL;
CREATE INDEX run_queue_ended ON run_queue (ended_at) WHERE outcome IS NOT NULL;
