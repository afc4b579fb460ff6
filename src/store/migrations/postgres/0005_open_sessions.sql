-- The session each live call opened, journaled before its first prompt, so a call that runs
-- again in a later generation (after a pause, a stop, a crash or a restart) can reopen it.
-- One row per call and generation; a later attempt of the call replaces it.
CREATE TABLE open_sessions (
    run_key     BIGINT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation  BIGINT NOT NULL,
    call_index  BIGINT NOT NULL,
    hash        TEXT   NOT NULL,
    path        TEXT,
    inputs_hash TEXT,
    session     TEXT   NOT NULL, -- JSON: the runner's session reference
    cwd         TEXT   NOT NULL,
    opened_at   BIGINT NOT NULL,
    PRIMARY KEY (run_key, generation, call_index)
);
