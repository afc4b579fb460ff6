//! Shared test support: per-test contexts with their own HOME, state dir and environment,
//! and a loopback fake model server for the real-adapter interop test.

pub mod context;
pub mod fake_llm;
