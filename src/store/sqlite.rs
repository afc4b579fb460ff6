//! The embedded SQLite store.

/// Placeholder until the SQLite store lands.
pub struct SqliteStore;
