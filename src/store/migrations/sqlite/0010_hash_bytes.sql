-- Version 10: call hashes as bytes.
--
-- `calls.hash` and `calls.inputs_hash` held 64 hex digits each (a SHA-256), 128 bytes of
-- each call row; a hash of 64 lowercase hex digits is now stored as its 32 bytes, any other
-- text as text (src/store/sqlite/hashes.rs), and a read gives back the text written
-- (docs/performance.md, "Issue 18: bytes per call, SQLite side"). The rows written before
-- are converted here by the same rule.
--
-- The conversion changes no value a read returns, so it bumps no run's version: the update
-- trigger of version 9 is set aside while it runs and created again as it was.
DROP TRIGGER calls_version_update;

UPDATE calls SET hash = unhex(hash)
    WHERE typeof(hash) = 'text' AND length(hash) = 64 AND hash NOT GLOB '*[^0-9a-f]*';
UPDATE calls SET inputs_hash = unhex(inputs_hash)
    WHERE typeof(inputs_hash) = 'text' AND length(inputs_hash) = 64
        AND inputs_hash NOT GLOB '*[^0-9a-f]*';

CREATE TRIGGER calls_version_update AFTER UPDATE ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;
