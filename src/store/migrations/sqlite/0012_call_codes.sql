-- Version 12: three call columns in a shorter form, so that six rows of a small call fit a
-- 1 KiB page instead of four (src/store/sqlite/call_codes.rs, docs/performance.md "Issue 18:
-- bytes per call, fourth pass"). `outcome` and `origin` hold a one-digit code (text) instead
-- of their names; `session` holds the bare session id, as a blob, when its JSON text is exactly
-- {"backendId":<the row's backend_id>,"sessionId":<text>}, the shape every runner writes.
-- Reads take both forms, so a row this conversion skips still reads as before.
--
-- The conversion changes no value a read returns, so it bumps no run's version: the update
-- trigger of version 9 is set aside while it runs and created again as it was (as in 10).
DROP TRIGGER calls_version_update;

-- The codes are positions in call_codes.rs' OUTCOMES and ORIGINS.
UPDATE calls SET outcome = CASE outcome
        WHEN 'result' THEN '0' WHEN 'null' THEN '1' WHEN 'error' THEN '2' END
    WHERE outcome IN ('result', 'null', 'error');
UPDATE calls SET origin = CASE origin
        WHEN 'runner' THEN '0' WHEN 'journal-replay' THEN '1' WHEN 'confirm' THEN '2'
        WHEN 'headless' THEN '3' WHEN 'engine' THEN '4' END
    WHERE origin IN ('runner', 'journal-replay', 'confirm', 'headless', 'engine');

-- Only a text equal, byte for byte, to the one the compact form reads back as is converted.
UPDATE calls SET session = CAST(session ->> '$.sessionId' AS BLOB)
    WHERE typeof(session) = 'text' AND json_valid(session) AND backend_id IS NOT NULL
        AND json_type(session, '$.sessionId') = 'text'
        AND session = json_object('backendId', backend_id,
                                  'sessionId', session ->> '$.sessionId');

CREATE TRIGGER calls_version_update AFTER UPDATE ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;
