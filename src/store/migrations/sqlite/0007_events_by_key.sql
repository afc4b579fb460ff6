-- Version 7: each run's events are one range of the table's own rowid B-tree.
--
-- The events were a rowid table with the primary key (run_key, seq) as a second B-tree, so
-- every appended event wrote a page of each: at one commit per few settled calls, about a
-- quarter of the pages a call's commit copies into the WAL (docs/performance.md, issue 18).
-- `event_key` is run_key * 2^32 + seq (seq is dense from 1 per run and below 2^32, run_key
-- below 2^31; the store refuses an append beyond either), so the rowid itself orders a run's
-- events and no other B-tree is written per event. The rows are deleted with their run by
-- `delete_run`'s explicit range delete; there is no foreign key, since enforcing one would need
-- an index on `run_key` again.
--
-- `framed` = 1: `event` was stored without its leading `"type"` and `"runId"` members (the
-- type is `event_type`, the run id the key's run), which the store puts back byte for byte
-- when it reads the row. Rows copied from version 6 keep their text whole (`framed` = 0).
CREATE TABLE events_by_key (
    event_key  INTEGER PRIMARY KEY,
    event_type TEXT    NOT NULL, -- event.type, copied out for the log index
    timestamp  INTEGER NOT NULL,
    redacted   INTEGER NOT NULL,
    truncated  INTEGER NOT NULL,
    framed     INTEGER NOT NULL DEFAULT 0,
    event      TEXT    NOT NULL  -- JSON event object
);

INSERT INTO events_by_key (event_key, event_type, timestamp, redacted, truncated, event)
    SELECT run_key * 4294967296 + seq, event_type, timestamp, redacted, truncated, event
    FROM events ORDER BY run_key, seq;

DROP TABLE events;
ALTER TABLE events_by_key RENAME TO events;

-- log_tail(): the log lines of a run without walking its other events.
CREATE INDEX events_log ON events (event_key) WHERE event_type = 'log';
