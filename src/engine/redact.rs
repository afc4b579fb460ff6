//! Credential redaction for everything a run shows (events, status previews, logs).
