//! agentprism runs workflow scripts, small JavaScript programs whose `agent()` calls fan out
//! to coding agents over ACP, durably, and serves them to MCP hosts.
//!
//! Modules in reading order:

/// The ACP agent runner: processes, sessions, pool, backend registry.
pub mod acp;
/// The workflow engine: scripts, journal, replay, preparation.
pub mod engine;
/// Every environment variable, one documented constant each.
pub mod env;
/// Diagnostics on stderr through tracing.
pub mod logging;
/// MCP: JSON-RPC, both protocol eras, dispatch to a handler, sessions.
pub mod mcp;
/// The durable run model shared by engine, store and front ends.
pub mod model;
/// The run store trait and its SQLite implementation.
pub mod store;
/// MCP transports: Streamable HTTP (hyper) and stdio.
pub mod transport;
/// Time, hashing and durable-write helpers.
pub mod util;
// The `agentprism` command line (enabled once the ACP runner lands).
pub mod cli;
