//! The workflow engine: preparation, admission, execution, journal and replay, pause, stop
//! and resume.
//!
//! Reading order: `script` (static checks) and `vm` (the QuickJS thread with the DSL
//! prelude), `journal` (identity and replay) and `routing`, `driver` (one generation of a
//! run), `prepare` (the checks before admission), `manager` (the front door used by the CLI
//! and the MCP tool), `status`. The engine reaches the outside world only through three
//! ports: the store (which also keeps the durable control intents and the inline script
//! copies), the `runner` traits, and `sources` (scripts and the files they name).

pub(crate) mod approval;
pub(crate) mod driver;
pub mod effort;
pub mod estimate;
pub mod events;
pub(crate) mod glob;
pub mod instant;
pub(crate) mod journal;
pub mod manager;
pub mod mock_answers;
pub(crate) mod permissions;
pub(crate) mod prepare;
pub(crate) mod preview;
pub(crate) mod redact;
pub mod reopen;
pub mod rerun;
pub mod routing;
pub mod runner;
pub mod schema;
pub(crate) mod script;
pub(crate) mod sources;
pub(crate) mod status;
pub(crate) mod tool_policy;
pub(crate) mod vm;

pub use manager::{
    Admission, Engine, EngineConfig, EngineError, EngineResult, LimitOverrides, ResumeRequest,
    RunRequest,
};
pub use prepare::ScriptInput;
pub use status::StatusQuery;
