-- Schema version 1 of the PostgreSQL run store: the tables of the SQLite store
-- (src/store/migrations/sqlite/) in PostgreSQL's types, with every call and event a plain
-- row (docs/store.md says where the SQLite layout differs), plus the indexes a shared
-- store's scans need (`scan`: listings across projects, housekeeping, the pending gauge).
--
-- Runs are referenced by a `run_key` inside the database so that the many call and event
-- rows of a run carry eight bytes of key instead of the run id text. JSON stays TEXT, as
-- written: the store never queries inside it, and bad stored JSON must read back as
-- `Corrupt`, not be refused or rewritten by the database. Integers the model keeps as u32 or
-- u64 are BIGINT, checked when read back.

CREATE TABLE runs (
    run_key            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id             TEXT    NOT NULL UNIQUE,
    -- The lease, written together by one statement; `lease_token` is what fenced writes
    -- check (and lock, `FOR NO KEY UPDATE`, for the rest of their transaction).
    lease_token        TEXT,
    lease_owner_id     TEXT,
    lease_pid          BIGINT,
    lease_proc_start   BIGINT,
    lease_acquired_at  BIGINT,
    lease_boot_id      TEXT,
    lease_expires_at   BIGINT,
    project_dir        TEXT    NOT NULL,
    workflow_name      TEXT    NOT NULL,
    status             TEXT    NOT NULL,
    pause_reason       TEXT,
    error_code         TEXT,
    error_message      TEXT,
    started_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL,
    generation         BIGINT  NOT NULL,
    stream_id          TEXT    NOT NULL,
    script_file        TEXT    NOT NULL,
    script_source      TEXT    NOT NULL,
    cwd                TEXT    NOT NULL,
    current_phase      TEXT,
    reset_hint         TEXT,
    limits             TEXT    NOT NULL, -- JSON Limits
    token_usage        TEXT    NOT NULL, -- JSON Usage
    phases             TEXT    NOT NULL, -- JSON [Phase]
    args               TEXT    NOT NULL, -- JSON
    result             TEXT,             -- JSON; NULL when the record has none
    setup              TEXT,             -- JSON
    auth_context       TEXT,             -- JSON
    checkpoint_context TEXT,             -- JSON
    routing            TEXT    NOT NULL, -- JSON
    caller             TEXT              -- the front end's owner tag; CAS only
);

-- list_runs: newest first, across projects or within one.
CREATE INDEX runs_by_started ON runs (started_at DESC, run_id DESC);
CREATE INDEX runs_by_project_started ON runs (project_dir, started_at DESC, run_id DESC);
-- active_runs: the pending and running runs of a project.
CREATE INDEX runs_active_by_project ON runs (project_dir, started_at, run_id)
    WHERE status IN ('pending', 'running');
-- runs_with_script: the runs that recorded a script file.
CREATE INDEX runs_by_script_file ON runs (script_file);
-- run_counts (the pending gauge) and terminal_before (housekeeping): by status, then by
-- when the run last changed.
CREATE INDEX runs_by_status_updated ON runs (status, updated_at, run_id);
-- pending_intents(HeldBy): the runs a replica holds.
CREATE INDEX runs_by_lease_owner ON runs (lease_owner_id) WHERE lease_owner_id IS NOT NULL;

-- The script text and what changes with it, apart from the run row so that routine status
-- updates never rewrite a possibly large script.
CREATE TABLE run_scripts (
    run_key          BIGINT PRIMARY KEY REFERENCES runs (run_key) ON DELETE CASCADE,
    script           TEXT NOT NULL,
    meta             TEXT NOT NULL, -- JSON
    script_revisions TEXT NOT NULL, -- JSON [ScriptRevision]
    files            TEXT           -- JSON {path: text}; NULL when none
);

-- One row per settled call (journal entry and call record together).
CREATE TABLE calls (
    run_key            BIGINT  NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation         BIGINT  NOT NULL,
    call_index         BIGINT  NOT NULL,
    settlement_ordinal BIGINT  NOT NULL,
    superseded_by      BIGINT,
    kind               TEXT    NOT NULL,
    hash               TEXT    NOT NULL,
    path               TEXT,
    inputs_hash        TEXT,
    label              TEXT,
    phase              TEXT,
    outcome            TEXT    NOT NULL,
    origin             TEXT    NOT NULL,
    aborted            BOOLEAN NOT NULL,
    attempts           BIGINT  NOT NULL,
    model_requested    TEXT,
    model_resolved     TEXT,
    backend_id         TEXT,
    resolved_cwd       TEXT,
    usage              TEXT    NOT NULL, -- JSON Usage
    error              TEXT,             -- JSON CallError
    replay             TEXT,             -- JSON ReplayInfo
    session            TEXT,             -- JSON
    result             TEXT,             -- JSON
    PRIMARY KEY (run_key, generation, call_index)
);

-- checkpoint_calls(): the checkpoint rows only.
CREATE INDEX calls_checkpoints ON calls (run_key, generation, settlement_ordinal, call_index)
    WHERE kind = 'checkpoint';

-- A generation's non-checkpoint count, recorded once it stopped running.
CREATE TABLE call_tallies (
    run_key    BIGINT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation BIGINT NOT NULL,
    calls      BIGINT NOT NULL,
    PRIMARY KEY (run_key, generation)
);

-- The run's append-only event stream; `seq` is dense from 1 per run.
CREATE TABLE events (
    run_key    BIGINT  NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    seq        BIGINT  NOT NULL,
    event_type TEXT    NOT NULL, -- event.type, copied out for the log index
    timestamp  BIGINT  NOT NULL,
    redacted   BOOLEAN NOT NULL,
    truncated  BOOLEAN NOT NULL,
    event      TEXT    NOT NULL, -- JSON event object
    PRIMARY KEY (run_key, seq)
);

-- log_tail(): the log lines of a run without walking its other events.
CREATE INDEX events_log ON events (run_key, seq) WHERE event_type = 'log';

CREATE TABLE checkpoint_answers (
    run_key     BIGINT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    call_index  BIGINT NOT NULL,
    hash        TEXT   NOT NULL,
    answered_at BIGINT NOT NULL,
    answer      TEXT   NOT NULL, -- JSON
    PRIMARY KEY (run_key, call_index)
);

CREATE TABLE receipts (
    run_key      BIGINT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    operation_id TEXT   NOT NULL,
    generation   BIGINT NOT NULL,
    input_digest TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    response     TEXT   NOT NULL, -- JSON
    PRIMARY KEY (run_key, operation_id)
);

-- Durable control intents (stop, cancel-agent) and their first acknowledgement; pending
-- while `acked_at` is NULL.
CREATE TABLE control_intents (
    run_key      BIGINT NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    op           TEXT   NOT NULL,
    action       TEXT   NOT NULL, -- 'stop' | 'cancel-agent'
    call_index   BIGINT,
    requested_at BIGINT NOT NULL,
    requested_by BIGINT NOT NULL,
    acked_at     BIGINT,
    acked_by     BIGINT,
    outcome      TEXT,            -- JSON object; NULL while pending
    PRIMARY KEY (run_key, op)
);

-- pending_intents(All | HeldBy): the pending intents of every run, oldest first.
CREATE INDEX control_intents_pending ON control_intents (requested_at, op)
    WHERE acked_at IS NULL;
