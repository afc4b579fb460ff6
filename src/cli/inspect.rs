//! The commands that look at or act on stored runs without executing them: `status`,
//! `pause`, `runs` (list, `rm`), `stop` and `result`.

use anyhow::Result;
use serde_json::{Value, json};

use super::args::{PauseArgs, ResultArgs, RunsAction, RunsArgs, StatusArgs, StopArgs};
use super::follow::report_failed_calls;
use super::input::{engine_error, guarded, input_error, parse_run_id, project_dir};
use super::{EXIT_COMPLETED, EXIT_FAILED};
use crate::app::foreground_engine;
use crate::engine::{EngineError, StatusQuery};
use crate::env::EnvSnapshot;
use crate::model::{CallChanges, EndSummary, RunStatus, RunSummary, WorkspaceBase, short_commit};
use crate::util::iso_time;

/// `status <runId>`: the bounded status document, as text or `--json`.
pub(super) async fn status(env: &EnvSnapshot, args: StatusArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        if !(1..=50).contains(&args.last) {
            return Err(input_error("--last must be 1 to 50"));
        }
        if args.logs > 50 {
            return Err(input_error("--logs must be 0 to 50"));
        }
        if let Some(pattern) = &args.label {
            crate::engine::glob::check_glob(pattern).map_err(input_error)?;
        }
        let query = StatusQuery {
            last_n: args.last,
            label_glob: args.label.clone(),
            log_lines: args.logs,
        };
        let status = json!(engine.status(&run_id, &query).await.map_err(engine_error)?);
        if args.json {
            say!("{}", serde_json::to_string_pretty(&status)?);
            return Ok(EXIT_COMPLETED);
        }
        print_status(&status);
        report_failed_calls(&engine, &run_id).await;
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// `pause <runId>`: the engine's pause, as the `workflow` tool's `pause` action asks it. 0
/// once the run is paused (now, or it already was); 1 when the pause is asked but the run
/// has not paused yet (its running agent calls finish first); 2 when there is nothing to
/// pause (the run has ended or waits for its setup answer) or the request is refused.
pub(super) async fn pause(env: &EnvSnapshot, args: PauseArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let answer = engine
            .pause(&run_id, &StatusQuery::default())
            .await
            .map_err(engine_error)?;
        let state = answer.status.status;
        if !answer.pause_requested && !answer.paused {
            let why = match state {
                RunStatus::Pending => "it waits for its backends' approval (`agentprism setup`)",
                state if state.is_terminal() => "it has ended",
                _ => "it is not executing",
            };
            return Err(input_error(format!(
                "run {run_id} is {}: nothing to pause, {why}",
                state.as_str()
            )));
        }
        if args.json {
            say!("{}", serde_json::to_string_pretty(&answer)?);
        }
        if !answer.paused {
            note!(
                "run {run_id}: pause requested; the run pauses once its running agent calls finish (`agentprism status {run_id}` shows it)"
            );
            return Ok(EXIT_FAILED);
        }
        let how = if answer.pause_requested {
            "paused"
        } else {
            "was already paused"
        };
        note!("run {run_id} {how}; continue it with `agentprism resume {run_id}`");
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// When a usage limit lifts, as far as the provider said, and whether the run resumes by
/// itself then.
fn reset_line(status: &Value) -> String {
    let reset = match status.pointer("/outcome/resetAt").and_then(Value::as_str) {
        Some(at) => format!("usage limit resets at {at}"),
        None => "usage limit: no reset time known".to_owned(),
    };
    match status
        .pointer("/outcome/autoResume")
        .and_then(Value::as_str)
    {
        Some(said) => format!("{reset}; {said}"),
        None => reset,
    }
}

/// The status document as text: the run, its reason and phase, tokens, the latest calls, the
/// log tail, and what it waits on or failed with.
fn print_status(status: &Value) {
    let get = |key: &str| {
        status
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    say!(
        "run {}  {}  ({})",
        get("runId"),
        get("status"),
        get("workflowName")
    );
    if let Some(reason) = status.get("reason").and_then(Value::as_str) {
        say!("reason: {reason}");
        if reason == "usage_limit" {
            say!("{}", reset_line(status));
        }
    }
    if let Some(budget) = status
        .pointer("/outcome/budgetContext/message")
        .and_then(Value::as_str)
    {
        say!("budget: {budget}");
    }
    let limit = |key: &str| {
        status
            .pointer(&format!("/limits/{key}"))
            .filter(|v| !v.is_null())
    };
    if let Some(tokens) = limit("tokenBudget") {
        say!("token budget: {tokens}");
    }
    if let Some(dollars) = limit("costBudgetUsd") {
        say!("cost budget: ${dollars}");
    }
    if let Some(phase) = status.get("currentPhase").and_then(Value::as_str) {
        say!("phase: {phase}");
    }
    say!(
        "tokens: {}",
        status
            .pointer("/tokenUsage/totalTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    );
    if let Some(summary) = EndSummary::of_status(status) {
        for (position, line) in summary.details("  ").iter().enumerate() {
            match position {
                0 => say!("summary: {line}"),
                _ => say!("{line}"),
            }
        }
    }
    if let Some(base) = status
        .get("workspace")
        .and_then(|base| serde_json::from_value::<WorkspaceBase>(base.clone()).ok())
    {
        say!("{}", workspace_line(&base));
    }
    for call in status
        .get("calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        say!("{}", call_line(call));
        if let Some(changes) = call_changes(call) {
            say!("        {}", changes.summary());
        }
    }
    for line in status
        .pointer("/logTail/lines")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        say!("  | {}", line.as_str().unwrap_or_default());
    }
    if let Some(context) = status.pointer("/outcome/checkpointContext") {
        say!(
            "waiting on checkpoint {}: {}",
            context.get("callIndex").unwrap_or(&Value::Null),
            context
                .get("prompt")
                .and_then(Value::as_str)
                .unwrap_or_default()
        );
    }
    if let Some(error) = status
        .pointer("/outcome/error/message")
        .and_then(Value::as_str)
    {
        say!("error: {error}");
    }
}

/// Where the run's isolated calls start from.
fn workspace_line(base: &WorkspaceBase) -> String {
    let dirty = if base.dirty {
        " (uncommitted changes at admission are not in it)"
    } else {
        ""
    };
    format!(
        "isolated calls start from commit {} of {}{dirty}",
        short_commit(&base.commit),
        base.repository
    )
}

/// What an isolated call of the status document changed.
fn call_changes(call: &Value) -> Option<CallChanges> {
    serde_json::from_value(call.get("changes")?.clone()).ok()
}

/// One call of `status`: index, label, and its state or error.
fn call_line(call: &Value) -> String {
    let waiting_for = call.get("waitingFor").and_then(Value::as_str);
    let state = call
        .get("status")
        .and_then(Value::as_str)
        .map(|state| match (state, waiting_for) {
            ("waiting", Some(what)) => format!("waiting for {what}"),
            _ => state.to_owned(),
        })
        .or_else(|| {
            let code = call.get("errorCode").and_then(Value::as_str)?;
            Some(match call.get("errorMessage").and_then(Value::as_str) {
                Some(message) => format!("{code}: {message}"),
                None => code.to_owned(),
            })
        })
        .unwrap_or_else(|| "done".to_owned());
    // A live call past its first attempt, or a settled call that needed more than one.
    let attempts = match (
        call.get("attempt").and_then(Value::as_u64),
        call.get("attempts").and_then(Value::as_u64),
    ) {
        (Some(attempt), _) if attempt > 1 => format!(" (attempt {attempt})"),
        (_, Some(attempts)) if attempts > 1 => format!(" ({attempts} attempts)"),
        _ => String::new(),
    };
    format!(
        "  #{:<4} {:<40} {state}{attempts}",
        call.get("index").and_then(Value::as_u64).unwrap_or(0),
        call.get("label").and_then(Value::as_str).unwrap_or("-"),
    )
}

pub(super) async fn runs(env: &EnvSnapshot, args: RunsArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        if let Some(RunsAction::Rm { run_id }) = &args.action {
            let run_id = parse_run_id(run_id)?;
            // A running daemon deletes it, so that its MCP sessions hear of it.
            let paths = crate::discovery::Paths::new(crate::app::persistence_root(env)?);
            let owner = engine.owner().owner_id.clone();
            match crate::daemon::control::delete_through_daemon(&paths, &owner, &run_id).await {
                crate::daemon::control::DaemonDelete::Deleted { pid } => {
                    note!("deleted run {run_id} (through the daemon, pid {pid})");
                }
                crate::daemon::control::DaemonDelete::Refused(message) => {
                    return Err(input_error(message));
                }
                crate::daemon::control::DaemonDelete::UnknownRun => {
                    return Err(engine_error(EngineError::UnknownRun(run_id)));
                }
                crate::daemon::control::DaemonDelete::NoDaemon => {
                    engine.delete(&run_id).await.map_err(engine_error)?;
                    note!("deleted run {run_id}");
                }
            }
            return Ok(EXIT_COMPLETED);
        }
        let project = if args.all {
            None
        } else {
            Some(project_dir(args.project_dir.as_deref())?)
        };
        let list = engine
            .list(project.as_deref(), args.limit)
            .await
            .map_err(engine_error)?;
        if args.json {
            let rows: Vec<Value> = list.iter().map(run_row).collect();
            say!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            for run in &list {
                let summary = ended_summary(run).map(EndSummary::line);
                say!(
                    "{:<24} {:<10} {:<24} {:<28} {}",
                    run.run_id.as_str(),
                    run.status.as_str(),
                    iso_time(run.started_at),
                    summary.as_deref().unwrap_or("-"),
                    run.workflow_name
                );
            }
        }
        if list.is_empty() {
            let elsewhere = match &project {
                Some(_) => !engine.list(None, 1).await.map_err(engine_error)?.is_empty(),
                None => false,
            };
            note!("{}", no_runs_hint(project.as_deref(), elsewhere));
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

/// What `runs` says on stderr when it lists nothing: which runs it looked at, and how to see
/// others (`--all` lists every project's, `--project-dir` another project's).
fn no_runs_hint(project: Option<&std::path::Path>, elsewhere: bool) -> String {
    match (project, elsewhere) {
        (None, _) => "no runs in any project".to_owned(),
        (Some(project), true) => format!(
            "no runs of project {}; other projects have runs: `agentprism runs --all` lists every project's, `--project-dir DIR` one project's",
            project.display()
        ),
        (Some(project), false) => format!(
            "no runs of project {}, nor of any other yet (`agentprism runs --all` lists every project's, `--project-dir DIR` one project's)",
            project.display()
        ),
    }
}

/// One run of `runs --json`, with its times in ISO 8601 as the status document has them.
fn run_row(run: &RunSummary) -> Value {
    let mut row = json!({
        "runId": run.run_id,
        "projectDir": run.project_dir,
        "workflowName": run.workflow_name,
        "status": run.status,
        "startedAt": iso_time(run.started_at),
        "updatedAt": iso_time(run.updated_at),
        "hasResult": run.has_result,
    });
    if let Some(reason) = run.pause_reason {
        row["pauseReason"] = json!(reason);
    }
    if let Some(summary) = ended_summary(run) {
        row["summary"] = json!(summary);
    }
    row
}

/// A listed run's summary once a generation ended or paused it, as status shows it: a resumed
/// run executing again still holds the summary its previous generation left, which no longer
/// describes it.
fn ended_summary(run: &RunSummary) -> Option<&EndSummary> {
    run.summary
        .as_ref()
        .filter(|_| run.status == RunStatus::Paused || run.status.is_terminal())
}

pub(super) async fn stop(env: &EnvSnapshot, args: StopArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let status = engine
            .stop_with(
                &run_id,
                args.call_index,
                args.force_owner,
                &StatusQuery::default(),
            )
            .await
            .map_err(engine_error)?;
        let status = json!(status);
        let state = status.get("status").and_then(Value::as_str).unwrap_or("-");
        let control = status.get("control");
        if let Some(control) = control.filter(|c| c["state"] == "pending") {
            say!(
                "{}",
                serde_json::to_string_pretty(&json!({"control": control}))?
            );
            note!(
                "run {run_id}: stop pending (operation {}): {}; the owner carries it out when it can, and `agentprism stop {run_id}` again reuses the operation",
                control["operationId"].as_str().unwrap_or("-"),
                control["reason"].as_str().unwrap_or("the owner did not answer"),
            );
            return Ok(EXIT_FAILED);
        }
        if let Some(cancelled) = status.get("cancelled") {
            note!("run {run_id}: cancelled call {}", cancelled["callIndex"]);
        } else if status.get("alreadyTerminal") == Some(&Value::Bool(true)) {
            note!("run {run_id} had already ended ({state})");
        } else if let Some(owner) = control
            .filter(|c| c.get("cold").is_none())
            .and_then(|c| c.get("owner"))
        {
            // An owner without a control protocol is a foreground `agentprism run`.
            let holder = if owner.get("controlProtocol") == Some(&json!(0)) {
                "process"
            } else {
                "daemon"
            };
            note!("run {run_id}: {state} (stopped by {holder} pid {})", owner["pid"]);
        } else {
            note!("run {run_id}: {state}");
        }
        Ok(EXIT_COMPLETED)
    })
    .await
}

pub(super) async fn result(env: &EnvSnapshot, args: ResultArgs) -> Result<u8> {
    guarded(async {
        let engine = foreground_engine(env, false).await?;
        let run_id = parse_run_id(&args.run_id)?;
        let record = engine
            .load_reconciled(&run_id)
            .await
            .map_err(engine_error)?;
        let text = crate::engine::manager::exact_result(&record).map_err(engine_error)?;
        say!("{text}");
        Ok(EXIT_COMPLETED)
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_usage_limit_pause_says_when_it_resets_or_that_no_time_is_known() {
        let known =
            json!({"reason": "usage_limit", "outcome": {"resetAt": "2026-01-01T15:00:00.000Z"}});
        assert_eq!(
            reset_line(&known),
            "usage limit resets at 2026-01-01T15:00:00.000Z"
        );
        let unknown = json!({"reason": "usage_limit", "outcome": {"resetHint": "soon"}});
        assert_eq!(reset_line(&unknown), "usage limit: no reset time known");
        let scheduled = json!({"reason": "usage_limit", "outcome": {
            "resetAt": "2026-01-01T15:00:00.000Z",
            "autoResume": "resumes by itself at 2026-01-01T15:00:02.500Z"}});
        assert_eq!(
            reset_line(&scheduled),
            "usage limit resets at 2026-01-01T15:00:00.000Z; resumes by itself at 2026-01-01T15:00:02.500Z"
        );
    }

    #[test]
    fn a_call_line_shows_attempts_beyond_the_first() {
        let live = json!({"index": 0, "label": "review", "status": "running", "attempt": 2});
        assert!(call_line(&live).ends_with("running (attempt 2)"));
        let waiting = json!({"index": 3, "label": "review", "status": "waiting",
            "waitingFor": "a claude slot (4 in use)", "attempt": 1});
        assert!(call_line(&waiting).ends_with("waiting for a claude slot (4 in use)"));
        let settled = json!({"index": 1, "label": "fix", "attempts": 3});
        assert!(call_line(&settled).ends_with("done (3 attempts)"));
        let once = json!({"index": 2, "label": "x", "attempts": 1});
        assert!(call_line(&once).ends_with("done"));
    }
}
