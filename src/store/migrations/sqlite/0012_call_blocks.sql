-- Two or more agent calls of one group commit whose keys follow one another, stored as one
-- row whose body is their entries compressed together (call_blocks.rs). `block_key` is the
-- `call_key` of the last, `first_key` that of the first: a block holds every key from one to
-- the other, so blocks and `calls` rows never share a key and a key's block is the first
-- whose `block_key` is not below it. `last_ordinal` is the highest settlement ordinal among
-- the entries.
CREATE TABLE call_blocks (
    block_key    INTEGER PRIMARY KEY,
    first_key    INTEGER NOT NULL,
    last_ordinal INTEGER NOT NULL,
    body         BLOB    NOT NULL
);

CREATE TRIGGER call_blocks_version_insert AFTER INSERT ON call_blocks
WHEN (SELECT status FROM runs WHERE run_key = NEW.block_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.block_key >> 32;
END;
