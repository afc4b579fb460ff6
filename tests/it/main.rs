//! Integration tests, one module per area.
mod mock_agent;
