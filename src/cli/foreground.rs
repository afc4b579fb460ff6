//! The commands that execute a run in this process: `validate` (a dry run), `run`, `resume`
//! and `setup`. Each builds its engine through the composition root, admits or continues the
//! run, then hands it to [`super::follow`].

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::args::{ResumeArgs, RunArgs, SetupArgs, ValidateArgs};
use super::follow::follow;
use super::input::{
    engine_error, guarded, input_error, limits, parse_args, parse_run_id, project_dir, script_input,
};
use super::{EXIT_COMPLETED, EXIT_FAILED, EXIT_PAUSED};
use crate::app::foreground_engine;
use crate::engine::{ResumeRequest, RunRequest};
use crate::env::EnvSnapshot;
use crate::model::RunStatus;

pub(super) async fn validate(env: &EnvSnapshot, args: ValidateArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, !args.no_probe).await?;
        let project = project_dir(args.script.project_dir.as_deref())?;
        let script = script_input(&args.script.script)?;
        let input = parse_args(&args.script)?;
        let prepared = engine
            .validate(&project, &script, input)
            .await
            .map_err(engine_error)?;
        let report = json!({
            "valid": true,
            "name": prepared.analyzed.name,
            "description": prepared.analyzed.description,
            "dryRunCalls": prepared.dry_calls,
            "warnings": prepared.warnings,
            "probes": prepared.probes,
            "declaredBackends": prepared.declared_backends.keys().collect::<Vec<_>>(),
        });
        say!("{}", serde_json::to_string_pretty(&report)?);
        engine.runner().shutdown(Duration::from_secs(5)).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

pub(super) async fn run_command(env: &EnvSnapshot, args: RunArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, true).await?;
        let project = project_dir(args.script.project_dir.as_deref())?;
        let script = script_input(&args.script.script)?;
        let input = parse_args(&args.script)?;
        let mut notices = engine.subscribe();
        let admission = engine
            .start(RunRequest {
                project_dir: project,
                script,
                args: input,
                limits: limits(&args.limits),
                caller: None,
            })
            .await
            .map_err(engine_error)?;
        for warning in &admission.warnings {
            note!("warning: {warning}");
        }
        note!("run {} admitted", admission.run_id);
        if admission.status == RunStatus::Pending {
            let setup_id = admission
                .setup
                .as_ref()
                .and_then(|s| s.pointer("/request/id"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !args.approve_backends {
                let message = admission
                    .setup
                    .as_ref()
                    .and_then(|s| s.pointer("/request/message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
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
        follow(&engine, &admission.run_id, &mut notices, &args.foreground).await
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
        let mut notices = engine.subscribe();
        let admission = engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies: replies,
                limits: limits(&args.limits),
                operation_id: None,
            })
            .await
            .map_err(engine_error)?;
        if let Some(continuation) = &admission.continuation
            && continuation.get("scriptRevised") == Some(&Value::Bool(true))
        {
            note!("the script file changed: continuing with the revised script");
        }
        note!("run {run_id} resumed");
        follow(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
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
            .and_then(|s| s.pointer("/request/id"))
            .and_then(Value::as_str)
            .ok_or_else(|| input_error(format!("run {run_id} has no setup request")))?
            .to_owned();
        let response = if args.approve {
            json!({"action": "accept", "content": {"approve": true}})
        } else {
            json!({"action": "decline"})
        };
        let mut notices = engine.subscribe();
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
        follow(&engine, &run_id, &mut notices, &args.foreground).await
    })
    .await
}
