-- Version 6: what the folder server keeps with a run.
--
-- `caller` is the opaque tag of whoever started the run (the folder server's owner key); NULL
-- for runs written before and for front ends that set none. Only admission and the
-- compare-and-set `set_run_caller` write it: a run row rewritten by an execution leaves it
-- alone. Read by run id through the `run_id` UNIQUE index, so no index of its own.
ALTER TABLE runs ADD COLUMN caller TEXT;

-- The companion files `meta.files` declares, frozen with the script they belong to: a JSON
-- object from relative path to text. NULL (runs written before, scripts that declare none)
-- reads as no files. Beside the script so that it is written when the script is, and never by
-- a routine status update.
ALTER TABLE run_scripts ADD COLUMN files TEXT;
