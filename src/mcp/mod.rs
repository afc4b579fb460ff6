//! MCP: JSON-RPC and the Model Context Protocol in both eras (the 2025 initialize handshake
//! with sessions, and the stateless 2026-07-28 form), shared by every transport.

pub mod handler;
pub mod jsonrpc;
pub mod server;
pub mod session;

pub use handler::{
    Era, McpError, McpHandler, McpResult, Notification, NotificationHub, RequestContext,
    RequestNotifier, ServerEvent, ServerInfo,
};
pub use server::{
    CacheScope, McpServer, Outcome, ServerOptions, SessionEvents, TransportContext, TransportKind,
};
pub use session::{Session, SessionActivity};
