//! Turning the user's input into engine requests, and engine errors into the command line's
//! words and exit codes: input errors (exit 2, nothing persisted), the project directory,
//! `--args`, run ids, limits, and the rewording of engine messages into CLI commands.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

use super::EXIT_REJECTED;
use super::args::{LimitArgs, ScriptArgs};
use crate::app::SettingsError;
use crate::engine::{EngineError, LimitOverrides, ScriptInput};
use crate::model::RunId;

/// A problem with the user's input: exit code 2, nothing persisted.
#[derive(Debug)]
struct InputError(String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

pub(super) fn input_error(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(message.into()))
}

pub(super) fn project_dir(given: Option<&Path>) -> Result<PathBuf> {
    let dir = match given {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let dir = if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    };
    std::fs::canonicalize(&dir)
        .map_err(|e| input_error(format!("--project-dir {}: {e}", dir.display())))
}

pub(super) fn parse_args(args: &ScriptArgs) -> Result<Value> {
    let text = match (&args.args, &args.args_file) {
        (Some(text), _) => text.clone(),
        (None, Some(file)) => std::fs::read_to_string(file)
            .map_err(|e| input_error(format!("--args-file {}: {e}", file.display())))?,
        (None, None) => return Ok(Value::Object(Default::default())),
    };
    serde_json::from_str(&text).map_err(|e| input_error(format!("--args must be strict JSON: {e}")))
}

pub(super) fn script_input(path: &Path) -> Result<ScriptInput> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(ScriptInput::Path(absolute))
}

pub(super) fn parse_run_id(text: &str) -> Result<RunId> {
    RunId::parse(text).map_err(input_error)
}

pub(super) fn limits(args: &LimitArgs) -> LimitOverrides {
    LimitOverrides {
        max_agents: args.max_agents,
        concurrency: args.concurrency,
        agent_retries: args.agent_retries,
    }
}

/// Maps engine errors to exit codes: rejections are input errors (2).
pub(super) fn engine_error(error: EngineError) -> anyhow::Error {
    match error {
        EngineError::Rejected(message) => input_error(cli_wording(&message.to_string())),
        EngineError::UnknownRun(run_id) => {
            input_error(format!("No workflow run found for runId \"{run_id}\""))
        }
        other => anyhow!(other),
    }
}

/// Engine messages name the `workflow` tool's actions and fields, which mean nothing on the
/// command line: they become the commands and flags that do the same.
pub(super) fn cli_wording(message: &str) -> String {
    let mut text = message.to_owned();
    if text.contains("answer it with setup-response") {
        let run_id = text
            .strip_prefix("run ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("<runId>")
            .to_owned();
        text = text.replace(
            "answer it with setup-response",
            &format!("answer it with `agentprism setup {run_id} --approve` (or --decline)"),
        );
    }
    for (tool, cli) in [
        ("callIndex ", "--call "),
        ("forceOwner", "--force-owner"),
        ("checkpointReplies", "--reply INDEX=VALUE"),
    ] {
        text = text.replace(tool, cli);
    }
    text
}

/// Runs a command body, turning input errors into exit code 2.
pub(super) async fn guarded(body: impl std::future::Future<Output = Result<u8>>) -> Result<u8> {
    match body.await {
        Ok(code) => Ok(code),
        Err(error) if is_input(&error) => {
            note!("agentprism: {error}");
            Ok(EXIT_REJECTED)
        }
        Err(error) => Err(error),
    }
}

/// Whether `error` is the user's fault: bad input here, or a bad setting the composition root
/// refused (a malformed backend registry, a limit out of range).
fn is_input(error: &anyhow::Error) -> bool {
    error.downcast_ref::<InputError>().is_some()
        || error
            .downcast_ref::<SettingsError>()
            .is_some_and(SettingsError::is_input)
}
