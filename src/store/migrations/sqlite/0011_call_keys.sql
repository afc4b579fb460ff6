-- A call row's key is one integer, `call_key` = run_key * 2^32 + generation * 2^20 +
-- call_index (`call_keys.rs` refuses a generation above 4,095 or an index above 1,048,575), so
-- the table's rowid B-tree is the only one a settled call writes: a key of three columns
-- needed a second, unique B-tree beside it. The three stay readable as virtual columns,
-- computed from the key and stored nowhere. There is no foreign key, as for events: deleting
-- a run deletes its key range (`runs.rs`). The migration's caller checks first that every
-- row fits (`connection.rs`).
CREATE TABLE calls_keyed (
    call_key           INTEGER PRIMARY KEY,
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
    changes            TEXT,             -- JSON
    live_reason        TEXT,
    run_key            INTEGER GENERATED ALWAYS AS (call_key >> 32) VIRTUAL,
    generation         INTEGER GENERATED ALWAYS AS ((call_key >> 20) & 4095) VIRTUAL,
    call_index         INTEGER GENERATED ALWAYS AS (call_key & 1048575) VIRTUAL
);

INSERT INTO calls_keyed (call_key, settlement_ordinal, kind, hash, path, inputs_hash, label,
    phase, outcome, origin, aborted, attempts, model_requested, model_resolved, backend_id,
    resolved_cwd, usage, error, replay, session, result, changes, live_reason)
SELECT (run_key << 32) + (generation << 20) + call_index, settlement_ordinal, kind, hash,
    path, inputs_hash, label, phase, outcome, origin, aborted, attempts, model_requested,
    model_resolved, backend_id, resolved_cwd, usage, error, replay, session, result, changes,
    live_reason
FROM calls;

-- Takes the old table's index and trigger with it.
DROP TABLE calls;
ALTER TABLE calls_keyed RENAME TO calls;

-- A status of a paused or ended run lists its checkpoints without walking its other rows;
-- agent-call writes never touch this index.
CREATE INDEX calls_checkpoints ON calls (run_key, generation, settlement_ordinal, call_index)
    WHERE kind = 'checkpoint';

CREATE TRIGGER calls_version_insert AFTER INSERT ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.call_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.call_key >> 32;
END;
