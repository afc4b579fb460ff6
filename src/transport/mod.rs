//! MCP transports. Each one frames messages and hands them to the same
//! [`McpServer`](crate::mcp::McpServer): Streamable HTTP on hyper for the daemon and direct
//! HTTP hosts, newline-delimited JSON on stdio for hosts that launch a process.
//!
//! A transport resolves each request's era and session once (the HTTP transport itself,
//! because it checks headers in between; stdio through `McpServer::handle`) and never
//! touches the engine or the store.

pub(crate) mod connection;
mod in_place;
pub mod http;
pub(crate) mod lines;
pub mod peer;
pub mod stdio;

pub use http::{HttpOptions, serve};
pub(crate) use peer::is_loopback;
pub use stdio::serve_stdio;
