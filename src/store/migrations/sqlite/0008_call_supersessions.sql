-- Version 8: which later generation superseded a call row, beside the row instead of in it.
--
-- Resuming a run replays its journal: each replayed call writes a row of the new generation
-- and marked its source row superseded. Setting `calls.superseded_by` rewrote the source row's
-- page, so a replay of N calls rewrote about as many pages of old rows as it wrote new ones
-- (docs/performance.md, issue 18). A supersession is now a small row of its own, written in
-- order; a row is superseded when it has one here or (rows superseded before version 8) when
-- its own `superseded_by` is set, this table's entry winning when both are.
CREATE TABLE call_supersessions (
    run_key       INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation    INTEGER NOT NULL,
    call_index    INTEGER NOT NULL,
    superseded_by INTEGER NOT NULL,
    PRIMARY KEY (run_key, generation, call_index)
) WITHOUT ROWID;
