//! Integration tests, one module per area.
mod acp;
mod mock_agent;
