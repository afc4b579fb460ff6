//! MCP: JSON-RPC and the Model Context Protocol in both eras (the 2025 initialize handshake
//! with sessions, and the stateless 2026-07-28 form), shared by every transport.
//!
//! Reading order: `jsonrpc` (one message), `context` (what a handler is told), `registry`
//! (tools, their listing rules and the observers of their answers), `observer` (the hook
//! those observers implement), `handler` (the boundary a server implements), `scope`
//! (era and session, resolved once), `server` (running a request), `dispatch` (method
//! routing), `shape` (era shaping), `events` (server-wide changes), `session` (legacy
//! sessions and their stream logs), `tasks` (tool calls answered as tasks, both eras). Nothing here knows the engine, the store or a socket.

pub(crate) mod answer;
pub(crate) mod context;
mod dispatch;
mod events;
pub mod handler;
pub mod jsonrpc;
pub mod outbox;
pub(crate) mod observer;
pub(crate) mod registry;
pub(crate) mod scope;
pub mod server;
pub(crate) mod session;
mod shape;
pub mod tasks;

pub use answer::{PreparedResult, ToolAnswer};
pub use handler::{
    Era, McpError, McpHandler, McpResult, Notification, NotificationHub, RequestContext,
    RequestNotifier, ServerEvent, ServerInfo,
};
pub use observer::{AnsweredCall, CallObserver};
pub use registry::{Listing, RegistryError, Tool, ToolHandler, ToolRegistry, Visibility};
pub use server::{
    CacheScope, McpServer, Outcome, ServerOptions, SessionEvents, TransportContext, TransportKind,
};
pub use session::{Session, SessionActivity};
