-- The host name of a lease's holder: with its boot id, pid and owner (instance) id, a holder
-- is one process on one machine, however many hosts share the store (docs/serve.md,
-- "Replicas"). NULL in leases taken before, and where the host name cannot be read.
ALTER TABLE runs ADD COLUMN lease_host TEXT;
