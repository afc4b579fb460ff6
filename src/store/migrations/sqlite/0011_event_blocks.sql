-- Version 11: the events of one append stored as one compressed row.
--
-- A settled call writes about six events of 80-180 bytes of JSON each whose keys and most
-- values repeat from call to call; as rows they were three quarters of the data a call's
-- commit copied into the WAL and then checkpointed (docs/performance.md, "Issue 18: bytes
-- per call, third pass"). Two or more consecutive events of one append that are not `log`
-- lines are now one `event_blocks` row (src/store/sqlite/event_blocks.rs): `block_key` is
-- the `event_key` of its first event (run_key * 2^32 + seq, as in version 7), `last_seq` the
-- seq of its last, and `body` the events' rows deflated together. `log` lines and lone
-- events stay rows of `events`, so `events_log` still finds every log line. A run's seqs are
-- each in exactly one of the two tables; reads merge them in seq order. Rows written before
-- stay where they are and read as before.
CREATE TABLE event_blocks (
    block_key INTEGER PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    body      BLOB    NOT NULL
);

-- As for `events` (version 9): a block's run is the high half of its key.
CREATE TRIGGER event_blocks_version_insert AFTER INSERT ON event_blocks
WHEN (SELECT status FROM runs WHERE run_key = NEW.block_key >> 32) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock)
        WHERE run_key = NEW.block_key >> 32;
END;
