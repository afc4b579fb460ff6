-- Schema version 1 of the run store.
--
-- Runs are referenced by an integer `run_key` inside the database so that the many call and
-- event rows of a run carry eight bytes of key instead of the run id text. Every child row is
-- deleted with its run (`ON DELETE CASCADE`, and `delete_run` also deletes them explicitly).

-- One row per run: the RunRecord fields except the script-related ones, plus the lease.
-- Small, often-read columns come first so a fence check never has to read the JSON columns.
CREATE TABLE runs (
    run_key            INTEGER PRIMARY KEY,
    run_id             TEXT    NOT NULL UNIQUE,
    lease_token        TEXT,
    lease_owner_id     TEXT,
    lease_pid          INTEGER,
    lease_proc_start   INTEGER,
    lease_acquired_at  INTEGER,
    project_dir        TEXT    NOT NULL,
    workflow_name      TEXT    NOT NULL,
    status             TEXT    NOT NULL,
    pause_reason       TEXT,
    error_code         TEXT,
    error_message      TEXT,
    started_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    generation         INTEGER NOT NULL,
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
    routing            TEXT    NOT NULL  -- JSON
);

-- list_runs: newest first, across projects or within one.
CREATE INDEX runs_by_started ON runs (started_at DESC, run_id DESC);
CREATE INDEX runs_by_project_started ON runs (project_dir, started_at DESC, run_id DESC);
-- active_runs: the pending and running runs of a project.
CREATE INDEX runs_active_by_project ON runs (project_dir, started_at, run_id)
    WHERE status IN ('pending', 'running');

-- The script text and what changes with it, apart from the run row so that routine status
-- updates (ScriptChange::Unchanged) never rewrite a possibly large script.
CREATE TABLE run_scripts (
    run_key          INTEGER PRIMARY KEY REFERENCES runs (run_key) ON DELETE CASCADE,
    script           TEXT NOT NULL,
    meta             TEXT NOT NULL, -- JSON
    script_revisions TEXT NOT NULL  -- JSON [ScriptRevision]
);

-- One row per settled call (journal entry and call record together).
CREATE TABLE calls (
    run_key            INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation         INTEGER NOT NULL,
    call_index         INTEGER NOT NULL,
    settlement_ordinal INTEGER NOT NULL,
    superseded_by      INTEGER,
    kind               TEXT    NOT NULL,
    hash               TEXT    NOT NULL,
    path               TEXT,
    inputs_hash        TEXT,
    label              TEXT,
    phase              TEXT,
    outcome            TEXT    NOT NULL,
    origin             TEXT    NOT NULL,
    aborted            INTEGER NOT NULL,
    attempts           INTEGER NOT NULL,
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

-- calls(): every row in settlement order; also answers "latest generation" via the prefix.
CREATE INDEX calls_by_settlement ON calls (run_key, generation, settlement_ordinal, call_index);
-- replay_pool(): only rows nobody consumed or re-executed yet.
CREATE INDEX calls_replay_pool ON calls (run_key, generation, call_index)
    WHERE superseded_by IS NULL;

-- The run's append-only event stream; `seq` is dense from 1 per run.
CREATE TABLE events (
    run_key    INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    event_type TEXT    NOT NULL, -- event.type, copied out for the log index
    timestamp  INTEGER NOT NULL,
    redacted   INTEGER NOT NULL,
    truncated  INTEGER NOT NULL,
    event      TEXT    NOT NULL, -- JSON event object
    PRIMARY KEY (run_key, seq)
);

-- log_tail(): the log lines of a run without walking its other events.
CREATE INDEX events_log ON events (run_key, seq) WHERE event_type = 'log';

CREATE TABLE checkpoint_answers (
    run_key     INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    call_index  INTEGER NOT NULL,
    hash        TEXT    NOT NULL,
    answered_at INTEGER NOT NULL,
    answer      TEXT    NOT NULL, -- JSON
    PRIMARY KEY (run_key, call_index)
);

CREATE TABLE receipts (
    run_key      INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    operation_id TEXT    NOT NULL,
    generation   INTEGER NOT NULL,
    input_digest TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    response     TEXT    NOT NULL, -- JSON
    PRIMARY KEY (run_key, operation_id)
);
