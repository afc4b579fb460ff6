//! The workflow engine: admission, execution, journal and replay, pause, stop and resume.

pub mod glob;
pub mod preview;
pub mod redact;
pub mod runner;
pub mod schema;
pub mod script;
pub mod vm;
