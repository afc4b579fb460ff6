//! Integration tests, one module per area.
mod acp;
mod engine;
mod mock_agent;
