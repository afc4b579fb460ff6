//! Bounded projections of values for status and events: capped, redacted previews.
