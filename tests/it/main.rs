//! Integration tests, one module per area.
mod acp;
mod cli;
mod control;
mod daemon;
mod discovery;
mod engine;
mod interop;
mod mcp_core;
mod mcp_http;
mod mcp_stdio;
mod mock_agent;
mod run_control;
mod sdk_clients;
mod service;
mod shim;
mod support;
mod workflow_tool;
