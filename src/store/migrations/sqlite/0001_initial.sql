-- Schema version 1 of the SQLite run store.
--
-- Runs are referenced by an integer `run_key` inside the database, so that the many call and
-- event rows of a run carry eight bytes of key instead of the run id text. Child rows are
-- deleted with their run: by `ON DELETE CASCADE` where there is a foreign key, and by
-- `delete_run`'s explicit deletes for the tables keyed by a run's key range.

-- Marks the file as an agentprism store of this numbering (see connection.rs `migrate`).
PRAGMA application_id = 1634168946; -- "agpr"

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
    routing            TEXT    NOT NULL, -- JSON
    -- The holder's boot id (a pid and start time recycled after a reboot are not the holder)
    -- and the expiry a holder renews; NULL: no boot check, no expiry.
    lease_boot_id      TEXT,
    lease_expires_at   INTEGER,
    -- The opaque tag of whoever started the run (the folder server's owner key). Only
    -- admission and the compare-and-set `set_run_caller` write it.
    caller             TEXT,
    -- The run's change counter (`Store::run_version`), from `run_version_clock` below.
    version            INTEGER NOT NULL DEFAULT 0
);

-- list_runs: newest first, across projects or within one.
CREATE INDEX runs_by_started ON runs (started_at DESC, run_id DESC);
CREATE INDEX runs_by_project_started ON runs (project_dir, started_at DESC, run_id DESC);
-- active_runs: the pending and running runs of a project.
CREATE INDEX runs_active_by_project ON runs (project_dir, started_at, run_id)
    WHERE status IN ('pending', 'running');
-- The MCP `file://` script resource serves only files some run recorded.
CREATE INDEX runs_by_script_file ON runs (script_file);

-- The script text and what changes with it, apart from the run row so that routine status
-- updates (ScriptChange::Unchanged) never rewrite a possibly large script. `files` holds the
-- companion files `meta.files` declares (a JSON object from relative path to text; NULL:
-- none), written when the script is.
CREATE TABLE run_scripts (
    run_key          INTEGER PRIMARY KEY REFERENCES runs (run_key) ON DELETE CASCADE,
    script           TEXT NOT NULL,
    meta             TEXT NOT NULL, -- JSON
    script_revisions TEXT NOT NULL, -- JSON [ScriptRevision]
    files            TEXT           -- JSON
);

-- One row per settled call (journal entry and call record together). The primary key is the
-- only B-tree every call writes: whole-run reads sort its rows, and the latest generation is
-- its prefix's maximum. `calls.rs` says how each column is stored.
CREATE TABLE calls (
    run_key            INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation         INTEGER NOT NULL,
    call_index         INTEGER NOT NULL,
    settlement_ordinal INTEGER NOT NULL,
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

-- A status of a paused or ended run lists its checkpoints without walking its other rows;
-- agent-call writes never touch this index.
CREATE INDEX calls_checkpoints ON calls (run_key, generation, settlement_ordinal, call_index)
    WHERE kind = 'checkpoint';

-- Which later generation superseded a call row (a resume replayed or re-executed it), as a
-- small row of its own, so a replay writes new pages instead of rewriting the old rows'.
-- A call row without one here is not superseded.
CREATE TABLE call_supersessions (
    run_key       INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation    INTEGER NOT NULL,
    call_index    INTEGER NOT NULL,
    superseded_by INTEGER NOT NULL,
    PRIMARY KEY (run_key, generation, call_index)
) WITHOUT ROWID;

-- call_tail(): a generation's non-checkpoint call count, recorded when it stops running, so
-- status need not count a stopped generation's rows.
CREATE TABLE call_tallies (
    run_key    INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    calls      INTEGER NOT NULL,
    PRIMARY KEY (run_key, generation)
) WITHOUT ROWID;

-- The run's append-only event stream; seq is dense from 1 per run. `event_key` is
-- run_key * 2^32 + seq (the store refuses a seq or a run key beyond the range), so the rowid
-- itself orders a run's events and no second B-tree is written per event. There is no
-- foreign key, since enforcing one would need an index on the run again.
CREATE TABLE events (
    event_key  INTEGER PRIMARY KEY,
    event_type TEXT    NOT NULL, -- event.type, copied out for the log index
    timestamp  INTEGER NOT NULL,
    redacted   INTEGER NOT NULL,
    truncated  INTEGER NOT NULL,
    framed     INTEGER NOT NULL, -- 1: `event` lacks its leading type and runId members
    event      TEXT    NOT NULL  -- JSON event object
);

-- log_tail(): the log lines of a run without walking its other events.
CREATE INDEX events_log ON events (event_key) WHERE event_type = 'log';

-- Two or more consecutive events of one append that are not `log` lines, deflated together
-- (event_blocks.rs). `block_key` is the `event_key` of the first, `last_seq` the seq of the
-- last; each seq of a run is in exactly one of `events` and `event_blocks`.
CREATE TABLE event_blocks (
    block_key INTEGER PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    body      BLOB    NOT NULL
);

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

-- Durable control intents (stop, cancel-agent) and their acknowledgements. An intent is
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

-- Run versions. `runs.version` takes the next value of one store-wide clock whenever
-- anything stored for the run changes while its stored status is not 'running', so a status
-- answer cached for a stopped run is checked with one indexed read, and a run deleted and
-- created again under the same id never meets an answer cached for the old one. While a run
-- runs nothing is bumped (status is not cached then), so a settling call writes no extra
-- page. The triggers below keep this for every write, whichever code makes it. Child rows
-- are deleted only with their run, so deletes need no trigger, except for a call count,
-- which a new call row of its generation drops.
CREATE TABLE run_version_clock (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO run_version_clock (id, value) VALUES (1, 0);

CREATE TRIGGER runs_version_insert AFTER INSERT ON runs
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

-- Skips its own bump (`NEW.version = OLD.version` is false then).
CREATE TRIGGER runs_version_update AFTER UPDATE ON runs
WHEN NEW.version = OLD.version AND (OLD.status != 'running' OR NEW.status != 'running')
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER run_scripts_version_update AFTER UPDATE ON run_scripts
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER checkpoint_answers_version_insert AFTER INSERT ON checkpoint_answers
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER calls_version_insert AFTER INSERT ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER call_supersessions_version_insert AFTER INSERT ON call_supersessions
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER call_supersessions_version_update AFTER UPDATE ON call_supersessions
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER call_tallies_version_insert AFTER INSERT ON call_tallies
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER call_tallies_version_update AFTER UPDATE ON call_tallies
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER call_tallies_version_delete AFTER DELETE ON call_tallies
WHEN (SELECT status FROM runs WHERE run_key = OLD.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = OLD.run_key;
END;

-- An event's or a block's run is the high half of its key.
CREATE TRIGGER events_version_insert AFTER INSERT ON events
WHEN (SELECT status FROM runs WHERE run_key = NEW.event_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.event_key >> 32;
END;

CREATE TRIGGER event_blocks_version_insert AFTER INSERT ON event_blocks
WHEN (SELECT status FROM runs WHERE run_key = NEW.block_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.block_key >> 32;
END;
