//! agentprism runs workflow scripts, small JavaScript programs whose `agent()` calls fan out
//! to coding agents over ACP, durably, and serves them to MCP hosts.
//!
//! Modules in reading order:

/// Every environment variable, one documented constant each.
pub mod env;
/// Time, hashing and durable-write helpers.
pub mod util;
/// The durable run model shared by engine, store and front ends.
pub mod model;
/// The run store trait and its SQLite implementation.
pub mod store;
/// The workflow engine: scripts, journal, replay, preparation.
pub mod engine;
/// The ACP agent runner: processes, sessions, pool, backend registry.
pub mod acp;
