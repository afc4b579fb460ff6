//! The Agent Client Protocol runner: backend processes, sessions and the pool.

pub mod registry;
