//! Static checks of a workflow script before anything runs: size, encoding, the leading
//! `export const meta = <literal>` statement evaluated without running the body, and the
//! determinism guard's static half (direct `Date.now()`, `Math.random()`, `Date()`,
//! `new Date()`).

use serde_json::Value;

use crate::model::Phase;

/// Largest accepted script, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;

/// A script rejected before running. Positions are 1-based, in the caller's file.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptError {
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// A script that passed the static checks.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyzedScript {
    /// The whole `meta` literal as JSON.
    pub meta: Value,
    /// The source with the `export const meta = ...;` statement replaced by spaces (newlines
    /// kept), so line and column numbers of the body are those of the original file.
    pub body: String,
    pub name: String,
    pub description: String,
    pub phases: Vec<Phase>,
    pub model: Option<String>,
    /// `meta.backends`, shape-checked.
    pub backends: Option<Value>,
    /// `meta.inputSchema`, a JSON Schema object for `args`.
    pub input_schema: Option<Value>,
    /// Keys of `meta` we do not know; reported as warnings.
    pub unknown_meta_keys: Vec<String>,
}

pub fn analyze(_source: &[u8]) -> Result<AnalyzedScript, ScriptError> {
    Err(ScriptError {
        message: "script analysis is not written yet".into(),
        line: None,
        column: None,
    })
}
