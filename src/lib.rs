//! agentprism runs workflow scripts, small JavaScript programs whose `agent()` calls fan out
//! to coding agents over ACP, durably, and serves them to MCP hosts.
//!
//! # The crate's API boundary
//!
//! The library has no users outside this repository. Its `pub` surface is what the crate's
//! own other targets need: the two binaries (`src/main.rs` calls `cli`, `logging` and `pack`;
//! `src/bin/agentprism-workflow.rs` calls `shim`), the integration tests (`tests/it`), the
//! benchmarks (`benches/`) and the examples (`examples/`), which drive `engine`, `store`,
//! `mcp`, `transport`, `tools`, `serve`, `discovery`, `control`, `acp`, `model`, `env` and
//! `util` from outside. `store::contract` and `testing` (feature `store-contract`) are public
//! for a second store backend's tests, and the rooms that hold ports no code implements yet
//! (`telemetry`, `budget`, `timers`, `workspace`, `engine::reopen`) are public for the
//! implementations to come. A module none of them names is `pub(crate)`
//! (`output`, `metrics`, `daemon`, `service`, and most submodules), and inside a public
//! module an item is `pub` only if those targets name it or a public signature or re-export
//! needs it; everything else is `pub(crate)` or narrower. `unreachable_pub` (below) makes a
//! `pub` item that no public path reaches fail `cargo clippy -- -D warnings`. A new item
//! starts `pub(crate)`; to open one to a test, make that item and the modules on its path
//! `pub` on purpose, not every item beside it.
//!
//! Modules in reading order:

#![warn(unreachable_pub)]

/// Every environment variable, one documented constant each.
pub mod env;
/// Diagnostics on stderr through tracing.
pub mod logging;
/// Printing for the user that never panics on a closed stdout or stderr.
pub(crate) mod output;
/// Time, hashing and durable-write helpers.
pub mod util;
/// The process's Prometheus metrics (`/metrics`).
pub(crate) mod metrics;
/// The telemetry port (traces and metrics of runs) and its no-op default.
pub mod telemetry;
/// The durable run model shared by engine, store and front ends.
pub mod model;
/// Run budgets: spending limits and the decisions the engine takes from them.
pub mod budget;
/// The prompt-cache hold: calls whose prompts begin alike wait for the first one's answer.
pub mod prompt_cache;
/// Durable timers stored with a run (the resume at a usage reset) and their store port.
pub mod timers;
/// The encrypted workflows pack (DMPK): its format, key, reader and writer.
pub mod pack;
/// The run store trait and its SQLite implementation.
pub mod store;
/// Workspaces: the port for a git worktree of its own per isolated agent call.
pub mod workspace;
pub mod library;
/// The workflow engine: scripts, journal, replay, preparation, execution.
pub mod engine;
/// The ACP agent runner: processes, sessions, pool, backend registry.
pub mod acp;
/// MCP: JSON-RPC, protocol eras, sessions and the handler boundary, shared by every transport.
pub mod mcp;
/// Streamable HTTP (hyper) and stdio transports for the MCP core.
pub mod transport;
/// The workflow MCP server: the `workflow` tool, run resources, prompt and skill.
pub mod tools;
/// `agentprism serve <dir>`: a folder of workflows as an MCP server of its own.
pub mod serve;
/// Daemon records, family pointer, env fingerprint, spawn lock, liveness, process table.
pub mod discovery;
/// The signed Unix-socket control plane between daemons: messages, server, client.
pub mod control;
/// The per-user daemon: lifecycle, idle exit, `/healthz`, self-spawn and readiness.
pub(crate) mod daemon;
/// Running under systemd or launchd: sd-notify, unit files, the LaunchAgent, install.
pub(crate) mod service;
/// The `agentprism-workflow` stdio shim: find or start the daemon, proxy stdio to it.
pub mod shim;
/// The composition root: settings in; engine, store, runner, MCP server and HTTP options out.
pub mod app;
/// The `agentprism` command line.
pub mod cli;
#[cfg(any(test, feature = "store-contract"))]
#[doc(hidden)]
pub mod testing;
/// Byte-level entry points for the fuzz targets (`fuzz/`) and their corpus replay test.
#[doc(hidden)]
pub mod fuzzing;
