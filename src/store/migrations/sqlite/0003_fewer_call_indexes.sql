-- Version 3: fewer B-trees on `calls`, so that each settled call's commit copies fewer pages
-- into the WAL (docs/performance.md).
--
-- `calls_replay_pool` held exactly the primary key's columns: replay_pool() reads the run's
-- rows through the primary key and filters `superseded_by IS NULL` as it goes.
-- `calls_by_settlement` served only calls(), a whole-run read that sorts its rows instead,
-- and the "latest generation" lookup, which the primary key's prefix answers as well.
DROP INDEX calls_replay_pool;
DROP INDEX calls_by_settlement;
