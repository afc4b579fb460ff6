//! Turning the user's input into engine requests, and engine errors into the command line's
//! words and exit codes: input errors (exit 2, nothing persisted), the project directory,
//! `--args`, run ids, limits, and engine rejections told in CLI flags and commands, chosen by
//! the rejection's kind and field.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

use super::EXIT_REJECTED;
use super::args::{LimitArgs, ScriptArgs};
use crate::app::SettingsError;
use crate::engine::manager::Rejected;
use crate::engine::{Engine, EngineError, LimitOverrides, ScriptInput};
use crate::library::Location;
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

/// `run` and `validate`'s SCRIPT_OR_NAME. A path when it contains `/`, ends in `.js`, `.mjs`
/// or `.cjs`, or names an existing file; else the name of a saved workflow of `project`. A
/// project or user workflow runs as its file, so its runs record the path; a bundled one runs
/// its text. An unknown name is an input error listing the names that exist.
pub(super) async fn script_input(
    engine: &Engine,
    project: &Path,
    given: &Path,
) -> Result<ScriptInput> {
    let name = match given.to_str() {
        Some(name) if !looks_like_path(given) => name.to_owned(),
        _ => {
            let absolute = if given.is_absolute() {
                given.to_path_buf()
            } else {
                std::env::current_dir()?.join(given)
            };
            return Ok(ScriptInput::Path(absolute));
        }
    };
    let engine = engine.clone();
    let project = project.to_path_buf();
    let source = tokio::task::spawn_blocking(move || engine.saved_workflow(Some(&project), &name))
        .await?
        .map_err(|error| {
            input_error(format!(
                "{error} (a script path needs a `/` or a .js ending)"
            ))
        })?;
    Ok(match source.location {
        Location::File(path) => ScriptInput::Path(path),
        Location::Bundled(_) => ScriptInput::Inline(source.text),
    })
}

/// Whether SCRIPT_OR_NAME means a file rather than a saved workflow's name.
fn looks_like_path(given: &Path) -> bool {
    let text = given.to_string_lossy();
    text.contains('/')
        || [".js", ".mjs", ".cjs"]
            .iter()
            .any(|ending| text.ends_with(ending))
        || given.is_file()
}

pub(super) fn parse_run_id(text: &str) -> Result<RunId> {
    RunId::parse(text).map_err(input_error)
}

/// The limit flags; a spending limit is checked as the `workflow` tool checks its argument,
/// and its error names the flag.
pub(super) fn limits(args: &LimitArgs) -> Result<LimitOverrides> {
    let mut fields = serde_json::Map::new();
    if let Some(tokens) = args.token_budget {
        fields.insert("tokenBudget".into(), tokens.into());
    }
    if let Some(dollars) = args.cost_budget_usd {
        fields.insert("costBudgetUsd".into(), dollars.into());
    }
    let budget = crate::budget::limits(&fields, "").map_err(|error| {
        let flag = match error.field.as_str() {
            "tokenBudget" => "--token-budget",
            _ => "--cost-budget-usd",
        };
        input_error(format!("{flag} {}", error.problem))
    })?;
    Ok(LimitOverrides {
        max_agents: args.max_agents,
        concurrency: args.concurrency,
        agent_retries: args.agent_retries,
        budget,
        auto_resume: args.no_auto_resume.then_some(false),
        confirmed: false,
    })
}

/// Maps engine errors to exit codes: rejections are input errors (2), in the command line's
/// words ([`rejection_text`]).
pub(super) fn engine_error(error: EngineError) -> anyhow::Error {
    match error {
        EngineError::Rejected(rejected) => input_error(rejection_text(&rejected)),
        EngineError::UnknownRun(run_id) => {
            input_error(format!("No workflow run found for runId \"{run_id}\""))
        }
        other => anyhow!(other),
    }
}

/// A rejection in the command line's words. Engine messages name the `workflow` tool's
/// fields, which mean nothing here: each one the message names as a word becomes the flag
/// that sets it. The rejection's kind, not its wording, decides the rest: an invalid field
/// the message does not name (a reworded message) is put in front as its flag, so the flag
/// is always named; a run that waits for its setup answer is pointed at `agentprism setup`.
pub(super) fn rejection_text(rejected: &Rejected) -> String {
    match rejected {
        Rejected::InvalidInput { field, message } => match flag_of(field) {
            Some(flag) if !contains_word(message, field) => {
                format!("{flag}: {}", in_flags(message))
            }
            _ => in_flags(message),
        },
        Rejected::AwaitingSetup(run_id) => format!(
            "run {run_id} is waiting for a setup answer; answer it with `agentprism setup {run_id} --approve` (or --decline)"
        ),
        other => in_flags(&other.to_string()),
    }
}

/// `message` with every field of [`FIELD_FLAGS`] it names as a word replaced by its flag.
fn in_flags(message: &str) -> String {
    FIELD_FLAGS
        .iter()
        .fold(message.to_owned(), |text, (field, flag)| {
            replace_word(&text, field, flag)
        })
}

/// The `workflow` tool's fields that a command line flag or argument carries, and that one.
/// The tool's other fields (`offset`, `setupId`, `response`, `permissionId`) have no flag:
/// the commands fill them in themselves.
const FIELD_FLAGS: [(&str, &str); 5] = [
    ("callIndex", "--call"),
    ("forceOwner", "--force-owner"),
    ("checkpointReplies", "--reply"),
    ("projectDir", "--project-dir"),
    ("runId", "<RUN_ID>"),
];

fn flag_of(field: &str) -> Option<&'static str> {
    FIELD_FLAGS
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, flag)| *flag)
}

/// Where `word` occurs in `text` as a whole word (not inside a longer identifier).
fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let is_part = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word)
        .map(|(at, _)| at)
        .filter(move |&at| {
            let before = text[..at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(is_part) && !after.is_some_and(is_part)
        })
}

fn contains_word(text: &str, word: &str) -> bool {
    word_positions(text, word).next().is_some()
}

fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for at in word_positions(text, word) {
        out.push_str(&text[copied..at]);
        out.push_str(with);
        copied = at + word.len();
    }
    out.push_str(&text[copied..]);
    out
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

/// `validate`'s `--mock-answers` or `--mock-answers-file`, parsed; a malformed fixture is an
/// input error naming the flag.
pub(super) fn mock_answers(
    args: &super::args::ValidateArgs,
) -> Result<Option<std::sync::Arc<crate::engine::mock_answers::MockAnswers>>> {
    use crate::engine::mock_answers::{MAX_FIXTURE_BYTES, MockAnswers};
    let (flag, text) = match (&args.mock_answers, &args.mock_answers_file) {
        (Some(text), _) => ("--mock-answers", text.clone()),
        (None, Some(file)) => {
            let path = std::path::absolute(file)
                .map_err(|e| input_error(format!("--mock-answers-file {}: {e}", file.display())))?;
            let limit = MAX_FIXTURE_BYTES as u64;
            let read = crate::util::safe_file::read_blocking(
                &path,
                limit,
                crate::util::safe_file::Links::ResolveFirst,
            )
            .map_err(|e| input_error(format!("--mock-answers-file: {e}")))?;
            let text = String::from_utf8(read.bytes).map_err(|_| {
                input_error(format!(
                    "--mock-answers-file {} is not UTF-8",
                    path.display()
                ))
            })?;
            ("--mock-answers-file", text)
        }
        (None, None) => return Ok(None),
    };
    let parsed = MockAnswers::parse(&text).map_err(|e| input_error(format!("{flag}: {e}")))?;
    Ok(Some(std::sync::Arc::new(parsed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(field: &'static str, message: &str) -> String {
        engine_error(EngineError::Rejected(Rejected::InvalidInput {
            field,
            message: message.to_owned(),
        }))
        .to_string()
    }

    #[test]
    fn a_field_the_message_names_becomes_its_flag() {
        assert_eq!(
            shown(
                "callIndex",
                "callIndex 7 is not a live agent call of run r-1; live calls: none"
            ),
            "--call 7 is not a live agent call of run r-1; live calls: none"
        );
        assert_eq!(
            shown(
                "forceOwner",
                "forceOwner cannot be combined with callIndex: callIndex cancels one live call"
            ),
            "--force-owner cannot be combined with --call: --call cancels one live call"
        );
        assert_eq!(
            shown("projectDir", "projectDir /x is not an existing directory"),
            "--project-dir /x is not an existing directory"
        );
    }

    /// The flag comes from the rejection's field, so an engine message that no longer names
    /// the field (or never did) still yields the right flag.
    #[test]
    fn a_reworded_message_still_names_the_flag() {
        assert_eq!(
            shown(
                "callIndex",
                "there is no live agent call numbered 7 in run r-1"
            ),
            "--call: there is no live agent call numbered 7 in run r-1"
        );
        assert_eq!(
            shown(
                "checkpointReplies",
                "checkpoint 3 is not waiting for an answer"
            ),
            "--reply: checkpoint 3 is not waiting for an answer"
        );
        assert_eq!(
            shown("forceOwner", "only a superseded owner may be ended"),
            "--force-owner: only a superseded owner may be ended"
        );
    }

    #[test]
    fn only_whole_words_are_replaced_and_fields_without_a_flag_are_left_alone() {
        assert_eq!(
            shown(
                "callIndex",
                "callIndexes must be listed; callIndex 2 is not"
            ),
            "callIndexes must be listed; --call 2 is not"
        );
        assert_eq!(
            shown("offset", "offset 9 is past the end of the result (3 bytes)"),
            "offset 9 is past the end of the result (3 bytes)"
        );
    }

    #[test]
    fn fields_named_by_other_kinds_become_flags_too() {
        let text = engine_error(EngineError::Rejected(Rejected::Owner(
            "run r-1 has no live owner process, so callIndex 4 is not a live agent call".into(),
        )))
        .to_string();
        assert_eq!(
            text,
            "run r-1 has no live owner process, so --call 4 is not a live agent call"
        );
    }

    #[test]
    fn a_run_awaiting_setup_is_pointed_at_the_setup_command() {
        let run_id = RunId::parse("r-1").expect("valid id");
        let text = engine_error(EngineError::Rejected(Rejected::AwaitingSetup(run_id))).to_string();
        assert_eq!(
            text,
            "run r-1 is waiting for a setup answer; answer it with `agentprism setup r-1 --approve` (or --decline)"
        );
    }
}
