-- Version 9: a change counter per run, so that an answer `status` cached for a run that is
-- not running can be checked with one indexed read (`Store::run_version`).
--
-- `runs.version` takes the next value of one store-wide clock whenever anything stored for
-- the run changes while its stored status is not 'running': its row (admission included, and
-- the update that makes it or stops it running), its script row, calls, their supersessions,
-- call counts, events and checkpoint answers. A value is never handed out twice, so a run deleted and created
-- again under the same id cannot meet an answer cached for the old one. While a run is
-- running nothing is bumped (status is not cached then): the hot path of a settling call
-- pays one primary-key read of its run row (already in the page cache, the fence read it),
-- and writes no page it did not write before. Child rows are deleted only with their run,
-- whose row goes in the same transaction, so deletes need no trigger.
--
-- The bumps run inside the writing statement's transaction. The update trigger on `runs`
-- skips its own bump (`NEW.version = OLD.version` is false then).

CREATE TABLE run_version_clock (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO run_version_clock (id, value) VALUES (1, 0);

ALTER TABLE runs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
-- Runs written before get distinct versions too, and the clock starts above them.
UPDATE runs SET version = run_key;
UPDATE run_version_clock SET value = (SELECT COALESCE(MAX(run_key), 0) FROM runs);

CREATE TRIGGER runs_version_insert AFTER INSERT ON runs
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

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

CREATE TRIGGER calls_version_insert AFTER INSERT ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;

CREATE TRIGGER calls_version_update AFTER UPDATE ON calls
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

-- An event's run is the high half of its key (version 7).
CREATE TRIGGER events_version_insert AFTER INSERT ON events
WHEN (SELECT status FROM runs WHERE run_key = NEW.event_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock)
        WHERE run_key = NEW.event_key >> 32;
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

CREATE TRIGGER checkpoint_answers_version_insert AFTER INSERT ON checkpoint_answers
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;
