//! Shared test support: per-test contexts with their own HOME, state dir and environment.

pub mod context;
