//! MCP transports. Each one frames messages and hands them to the same
//! [`McpServer`](crate::mcp::McpServer): Streamable HTTP on hyper for the daemon and direct
//! HTTP hosts, newline-delimited JSON on stdio for hosts that launch a process.

pub mod connection;
pub mod http;
pub mod peer;
pub mod stdio;

pub use http::{HttpOptions, serve};
pub use stdio::serve_stdio;
