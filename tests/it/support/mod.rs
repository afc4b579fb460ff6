//! Shared test support: per-test contexts with their own HOME, state dir and environment,
//! and loopback fake model servers: one for the real-adapter interop test, one scripted to
//! drive real MCP hosts (Claude Code, Codex) through the `workflow` tool.

pub mod context;
pub mod fake_host_model;
pub mod fake_llm;
pub mod http1;
pub mod memory;
