//! The commands that execute a run in this process: `validate` (a dry run), `run`, `resume`
//! and `setup`. Each builds its engine through the composition root, admits or continues the
//! run, then hands it to [`super::follow`]; a run whose every agent call failed exits 1 even
//! though it completed.

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::args::{ForegroundArgs, ResumeArgs, RunArgs, SetupArgs, ValidateArgs};
use super::follow::follow;
use super::input::{
    engine_error, guarded, input_error, limits, parse_args, parse_run_id, project_dir, script_input,
};
use super::{
    EXIT_COMPLETED, EXIT_DRY_RUN_FAILED, EXIT_FAILED, EXIT_INVALID_SCRIPT, EXIT_PAUSED,
    EXIT_UNCHECKED,
};
use crate::app::foreground_engine;
use crate::engine::events::RunNotice;
use crate::engine::manager::Rejected;
use crate::engine::rerun::RerunTarget;
use crate::engine::{Engine, EngineError, ResumeRequest, RunRequest};
use crate::env::EnvSnapshot;
use crate::model::{CallKind, RunId, RunStatus};

/// `validate <script>`: the engine's preparation without admitting a run. Exit codes as the
/// TypeScript product's `validate`: 0 valid, 1 the script fails its static checks
/// ([`EXIT_INVALID_SCRIPT`]), 2 its mocked dry run or routing fails ([`EXIT_DRY_RUN_FAILED`]),
/// 3 it could not be checked ([`EXIT_UNCHECKED`]: a usage error, an unreadable file, a bad
/// setting, or an operational failure).
pub(super) async fn validate(env: &EnvSnapshot, args: ValidateArgs) -> Result<u8> {
    match check_script(env, &args).await {
        Ok(()) => Ok(EXIT_COMPLETED),
        Err(error) => {
            note!("agentprism: {error:#}");
            Ok(error
                .downcast_ref::<Verdict>()
                .map_or(EXIT_UNCHECKED, |verdict| verdict.code))
        }
    }
}

/// The engine's verdict on a script that was checked and failed: the exit code and message.
#[derive(Debug)]
struct Verdict {
    code: u8,
    message: String,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Verdict {}

/// A failed preparation as `validate` tells it: a verdict on the script when the engine
/// checked it, anything else as an engine error (exit 3).
fn verdict(error: EngineError) -> anyhow::Error {
    let code = match &error {
        EngineError::Rejected(Rejected::Parse(_)) => EXIT_INVALID_SCRIPT,
        EngineError::Rejected(Rejected::Script(_) | Rejected::Routing(_)) => EXIT_DRY_RUN_FAILED,
        _ => return engine_error(error),
    };
    anyhow::Error::new(Verdict {
        code,
        message: error.to_string(),
    })
}

async fn check_script(env: &EnvSnapshot, args: &ValidateArgs) -> Result<()> {
    let engine = foreground_engine(env, !args.no_probe).await?;
    let project = project_dir(args.script.project_dir.as_deref())?;
    let script = script_input(&engine, &project, &args.script.script).await?;
    let input = parse_args(&args.script)?;
    let mock = super::input::mock_answers(args)?;
    let prepared = engine
        .validate_with(&project, &script, input, mock.clone())
        .await
        .map_err(verdict)?;
    let size = engine.size_of(&project, &script, &prepared).await;
    let mut warnings = prepared.warnings.clone();
    let mock_report = mock.map(|mock| mock.report());
    if let Some(unused) = mock_report.as_ref().and_then(|r| r["unused"].as_array()) {
        warnings.extend(
            unused
                .iter()
                .map(|glob| format!("the mock answer {glob} answered no agent call")),
        );
    }
    let report = json!({
        "valid": true,
        "name": prepared.analyzed.name,
        "description": prepared.analyzed.description,
        "dryRunCalls": prepared.dry_calls,
        "size": size,
        "mockAnswers": mock_report,
        "warnings": warnings,
        "probes": prepared.probes,
        "declaredBackends": prepared.declared_backends.keys().collect::<Vec<_>>(),
    });
    say!("{}", serde_json::to_string_pretty(&report)?);
    engine.runner().shutdown(Duration::from_secs(5)).await;
    Ok(())
}

pub(super) async fn run_command(env: &EnvSnapshot, args: RunArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, true).await?;
        let project = project_dir(args.script.project_dir.as_deref())?;
        let script = script_input(&engine, &project, &args.script.script).await?;
        let input = parse_args(&args.script)?;
        let mut notices = engine.subscribe_records();
        let mut limits = limits(&args.limits)?;
        limits.confirmed = args.yes;
        let request = RunRequest {
            project_dir: project,
            script,
            args: input,
            limits,
            caller: None,
            trace: None,
        };
        let admission = super::confirm::start(&engine, request).await?;
        for warning in &admission.warnings {
            note!("warning: {warning}");
        }
        note!("run {} admitted", admission.run_id);
        if let Some(size) = &admission.size {
            note!("size: {}", crate::engine::estimate::describe(size));
        }
        if admission.status == RunStatus::Pending {
            let setup_id = admission
                .setup
                .as_ref()
                .map(|setup| setup.request.id.clone())
                .unwrap_or_default();
            if !args.approve_backends {
                let message = admission
                    .setup
                    .as_ref()
                    .map_or("", |setup| setup.request.message.as_str());
                note!("{message}");
                note!(
                    "The run waits for approval. Continue with:\n  agentprism setup {} --approve",
                    admission.run_id
                );
                engine.runner().shutdown(Duration::from_secs(5)).await;
                return Ok(EXIT_PAUSED);
            }
            engine
                .setup_response(
                    &admission.run_id,
                    &setup_id,
                    &json!({"action": "accept", "content": {"approve": true}}),
                )
                .await
                .map_err(engine_error)?;
        }
        follow_run(&engine, &admission.run_id, &mut notices, &args.foreground).await
    })
    .await
}

pub(super) async fn resume(env: &EnvSnapshot, args: ResumeArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, true).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let mut replies = Vec::new();
        for reply in &args.replies {
            let (index, value) = reply
                .split_once('=')
                .ok_or_else(|| input_error(format!("--reply {reply:?} must be INDEX=VALUE")))?;
            let index: u32 = index.trim().parse().map_err(|_| {
                input_error(format!("--reply {reply:?}: INDEX must be a call index"))
            })?;
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
            replies.push((index, value));
        }
        let mut notices = engine.subscribe_records();
        let admission = engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: replies,
                limits: limits(&args.limits)?,
                operation_id: None,
                timer: None,
                rerun: rerun_targets(&args),
            })
            .await
            .map_err(engine_error)?;
        if let Some(continuation) = &admission.continuation
            && continuation.get("scriptRevised") == Some(&Value::Bool(true))
        {
            note!("the script file changed: continuing with the revised script");
        }
        if let Some(rerun) = admission
            .continuation
            .as_ref()
            .and_then(|c| c.get("rerun"))
            .and_then(Value::as_array)
        {
            note!("redoing call {}", crate::engine::rerun::describe(rerun));
        }
        note!("run {run_id} resumed");
        follow_run(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
}

/// `--rerun` (a number is an index, else a label) and `--rerun-label`, in that order.
fn rerun_targets(args: &ResumeArgs) -> Vec<RerunTarget> {
    let named = args.rerun.iter().map(|text| match text.parse::<u32>() {
        Ok(index) if text.bytes().all(|b| b.is_ascii_digit()) => RerunTarget::Index(index),
        _ => RerunTarget::Label(text.clone()),
    });
    let labels = args.rerun_labels.iter().cloned().map(RerunTarget::Label);
    named.chain(labels).collect()
}

pub(super) async fn setup(env: &EnvSnapshot, args: SetupArgs) -> Result<u8> {
    guarded(async {
        if !args.approve && !args.decline {
            return Err(input_error("say --approve or --decline"));
        }
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let record = engine
            .load_reconciled(&run_id)
            .await
            .map_err(engine_error)?;
        let setup_id = record
            .setup
            .as_ref()
            .map(|setup| setup.request.id.clone())
            .ok_or_else(|| input_error(format!("run {run_id} has no setup request")))?;
        let response = if args.approve {
            json!({"action": "accept", "content": {"approve": true}})
        } else {
            json!({"action": "decline"})
        };
        let mut notices = engine.subscribe_records();
        let answer = engine
            .setup_response(&run_id, &setup_id, &response)
            .await
            .map_err(engine_error)?;
        let answer = json!(answer);
        if !args.approve {
            note!(
                "declined; run {run_id} is aborted (setup_declined) and cannot be resumed: a declined approval is final"
            );
            return Ok(EXIT_FAILED);
        }
        if answer.get("status").and_then(Value::as_str) != Some("running") {
            note!("{answer}");
            return Ok(EXIT_COMPLETED);
        }
        follow_run(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
}

/// [`follow`], except that a run which completed although every agent call it made failed
/// exits 1: its result is built from failures, and a script checking the exit code must not
/// take it for a success. The failed calls are listed above it (`report_failed_calls`).
async fn follow_run(
    engine: &Engine,
    run_id: &RunId,
    notices: &mut tokio::sync::broadcast::Receiver<RunNotice>,
    options: &ForegroundArgs,
) -> Result<u8> {
    let code = follow(engine, run_id, notices, options).await?;
    // The generation has ended: its spans and metrics go out before the process exits.
    engine.telemetry().shutdown();
    if code != EXIT_COMPLETED {
        return Ok(code);
    }
    match every_agent_call_failed(engine, run_id).await {
        Some(count) => {
            note!(
                "run {run_id} completed, but {} failed: exit {EXIT_FAILED}",
                if count == 1 {
                    "its only agent call".to_owned()
                } else {
                    format!("all {count} of its agent calls")
                }
            );
            Ok(EXIT_FAILED)
        }
        None => Ok(code),
    }
}

/// How many agent calls the run's latest journal has when it has some and every one failed.
/// A journal that cannot be read tells nothing, and leaves the exit code as it was.
async fn every_agent_call_failed(engine: &Engine, run_id: &RunId) -> Option<usize> {
    let calls = engine.calls().latest_calls(run_id).await.ok()?;
    let agents: Vec<_> = calls
        .iter()
        .filter(|call| call.kind == CallKind::Agent)
        .collect();
    let all_failed = !agents.is_empty() && agents.iter().all(|call| call.error.is_some());
    all_failed.then_some(agents.len())
}
