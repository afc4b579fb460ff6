-- The W3C `traceparent` of a run's first traced generation (docs/observability.md): later
-- generations' run spans are its children, so a resumed run stays in one trace. Written
-- once, by the first generation that reports telemetry; NULL for a run never traced.
ALTER TABLE runs ADD COLUMN trace_parent TEXT;
