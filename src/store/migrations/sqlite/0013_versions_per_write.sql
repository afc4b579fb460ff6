-- Version 13: the run version of calls, supersessions, events and call counts is bumped once
-- per write transaction by the store (src/store/sqlite/versions.rs `touch`), not by a trigger
-- per row.
--
-- A trigger's program frame is allocated and zeroed for every inserted row before its WHEN
-- clause can find the run running, which is nearly every row these tables take: a settled
-- call fired two to four of them, about 25 k instructions per call that bumped nothing
-- (docs/performance.md, "Issue 18: replay, third pass" and "Issue 18: version bumps per
-- transaction, one block per commit, a kept compressor").
-- These tables are written only inside the store's three call and event transactions
-- (append_calls, append_events, record_call_total), and each of those now ends with the
-- same bump the triggers made, once: when the run's stored status is not 'running', the
-- clock moves and the run takes its value. What a status cache sees is unchanged: every
-- write to such a run gives it a version it never had, and a running run's writes give none.
--
-- The triggers on runs, run_scripts and checkpoint_answers stay: those rows are written by
-- several statements, rarely, and never on a call's hot path.
DROP TRIGGER calls_version_insert;
DROP TRIGGER calls_version_update;
DROP TRIGGER call_supersessions_version_insert;
DROP TRIGGER call_supersessions_version_update;
DROP TRIGGER events_version_insert;
DROP TRIGGER event_blocks_version_insert;
DROP TRIGGER call_tallies_version_insert;
DROP TRIGGER call_tallies_version_update;
DROP TRIGGER call_tallies_version_delete;
