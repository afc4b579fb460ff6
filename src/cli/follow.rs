//! Following a run that executes in this process until it settles: progress on stderr,
//! permission requests answered by policy or at the terminal, stop intents from other
//! processes, and the signals that pause it (Ctrl-C, SIGTERM, SIGHUP); then the result or the
//! reason on the terminal and the status as an exit code.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::args::ForegroundArgs;
use super::input::{engine_error, input_error};
use super::progress::Progress;
use super::{
    EXIT_COMPLETED, EXIT_FAILED, EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_PAUSED, EXIT_TERMINATED,
};
use crate::engine::events::RunNotice;
use crate::engine::runner::PermissionOutcome;
use crate::engine::status::StatusOutcome;
use crate::engine::{Engine, StatusQuery};
use crate::model::{CheckpointKind, RunId};

/// How often a foreground run looks for stop and cancel requests made by other processes. A
/// foreground run has no control socket, so this is how soon `agentprism stop` in another
/// terminal, which waits for the run to settle, gets its answer; a look is one indexed read
/// of the store when nothing is pending.
const FOREGROUND_INTENT_POLL: Duration = Duration::from_millis(250);

/// Follows a run executing in this process until it settles, showing progress on stderr and
/// answering permission requests; then prints the result and maps the status to an exit code.
pub(super) async fn follow(
    engine: &Engine,
    run_id: &RunId,
    notices: &mut tokio::sync::broadcast::Receiver<RunNotice>,
    options: &ForegroundArgs,
) -> Result<u8> {
    let policy = Policy::from_flag(options.permissions.as_deref())?;
    let interrupted = watch(engine, run_id, notices, &policy).await?;
    // Acknowledges a stop intent this run has just carried out.
    engine.complete_stop_intents().await;
    engine.runner().shutdown(Duration::from_secs(5)).await;
    settle(engine, run_id, interrupted, options).await
}

/// The signal that interrupted a run: its name and the exit code it gives (128 + its number).
type Interrupted = Option<(&'static str, u8)>;

/// Watches the run until it settles: its events on the progress display, its permission
/// requests answered by `policy`, stop intents left by other processes, and the signals that
/// pause it. Returns the signal that interrupted it, if one did.
async fn watch(
    engine: &Engine,
    run_id: &RunId,
    notices: &mut tokio::sync::broadcast::Receiver<RunNotice>,
    policy: &Policy,
) -> Result<Interrupted> {
    let mut display = Progress::new(std::io::stderr().is_terminal());
    // Ctrl-C, SIGTERM and SIGHUP all pause the run the same way.
    let mut interrupted: Interrupted = None;
    let wait = engine.wait(run_id);
    tokio::pin!(wait);
    let mut signals = Interruptions::new()?;
    // This process has no control socket: a stop asked for elsewhere reaches it as a durable
    // intent, which it looks for here (daemon.md 1.10 step 8).
    let mut intents = tokio::time::interval(FOREGROUND_INTENT_POLL);
    intents.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut wait => break,
            _ = intents.tick() => {
                engine.complete_stop_intents().await;
            }
            signal = signals.next(), if interrupted.is_none() => {
                interrupted = Some(signal);
                display.clear();
                note!("interrupted by {}: pausing run {run_id} (resume it with `agentprism resume {run_id}`)", signal.0);
                engine.interrupt_all(Duration::from_secs(10)).await;
            }
            notice = notices.recv() => match notice {
                Ok(RunNotice::Event { run_id: id, record }) if &id == run_id => display.event(&record.event.value()),
                Ok(RunNotice::Permission { run_id: id, permission_id, request }) if &id == run_id => {
                    display.clear();
                    let outcome = answer_permission(policy, &request);
                    if let Err(error) = engine.respond_permission(run_id, &permission_id, outcome).await {
                        note!("permission answer refused: {error}");
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    display.clear();
    Ok(interrupted)
}

/// Prints how the run ended (the result on stdout, or the reason and the command that
/// continues it on stderr) and maps its status to the exit code.
async fn settle(
    engine: &Engine,
    run_id: &RunId,
    interrupted: Interrupted,
    options: &ForegroundArgs,
) -> Result<u8> {
    let document = engine
        .status(run_id, &StatusQuery::default())
        .await
        .map_err(engine_error)?;
    let status = serde_json::json!(document);
    let state = status
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    if options.json {
        say!("{}", serde_json::to_string_pretty(&status)?);
    }
    report_failed_calls(engine, run_id).await;
    super::changes::report_changes(engine, run_id).await;
    let outcome = status.get("outcome").cloned().unwrap_or(Value::Null);
    let interrupted_code = interrupted.map(|(_, code)| code);
    let code = match state.as_str() {
        "completed" => {
            if !options.json {
                match outcome.get("result") {
                    Some(result) => say!("{}", serde_json::to_string_pretty(result)?),
                    None => say!("null"),
                }
            }
            EXIT_COMPLETED
        }
        "paused" => {
            report_paused(
                run_id,
                document.reason.as_deref(),
                document.outcome.as_ref(),
            );
            interrupted_code.unwrap_or(EXIT_PAUSED)
        }
        "failed" => {
            let message = outcome
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the run failed");
            let code = status
                .get("errorCode")
                .and_then(Value::as_str)
                .unwrap_or("SCRIPT_ERROR");
            note!("run {run_id} failed: {code}: {message}");
            EXIT_FAILED
        }
        other => {
            note!("run {run_id} ended {other}");
            interrupted_code.unwrap_or(EXIT_FAILED)
        }
    };
    if let Some(summary) = &document.summary {
        note!("run {run_id} {state} · {}", summary.line_with_time());
    }
    Ok(code)
}

/// Why a run paused and the command that continues it: with a checkpoint answer when it waits
/// on one, else after credentials or a usage-limit reset.
fn report_paused(run_id: &RunId, reason: Option<&str>, outcome: Option<&StatusOutcome>) {
    note!("run {run_id} paused: {}", reason.unwrap_or("requested"));
    let Some(context) = outcome.and_then(|outcome| outcome.checkpoint_context.as_ref()) else {
        if let Some(auth) = outcome.and_then(|outcome| outcome.auth_context.as_ref()) {
            note!("the backend needs credentials: {}", json!(auth));
        }
        if reason == Some("usage_limit") {
            match outcome.and_then(|outcome| outcome.reset_at.as_deref()) {
                Some(at) => note!("usage limit; resets at {at}"),
                None => note!("usage limit; no reset time known"),
            }
            if let Some(said) = outcome.and_then(|outcome| outcome.auto_resume.as_deref()) {
                note!("{said}");
            }
            if outcome.is_some_and(|outcome| outcome.resume_at.is_some()) {
                // This process exits; the timer is the store's, and a daemon fires it.
                note!(
                    "the agentprism daemon resumes it then (it runs while an MCP host uses \
                     agentprism; otherwise start it with `agentprism daemon start`)"
                );
            }
        }
        if let Some(hint) = outcome.and_then(|outcome| outcome.reset_hint.as_deref()) {
            note!("the provider said: {}", json!(hint));
        }
        if let Some(budget) = outcome.and_then(|outcome| outcome.budget_context.as_ref()) {
            note!("{}", budget["message"].as_str().unwrap_or_default());
            let flag = match budget["field"].as_str() {
                Some("costBudgetUsd") => "--cost-budget-usd <higher dollars>",
                _ => "--token-budget <higher total>",
            };
            note!("continue with:\n  agentprism resume {run_id} {flag}");
            return;
        }
        note!("continue with:\n  agentprism resume {run_id}");
        return;
    };
    note!("checkpoint {}: {}", context.call_index, context.prompt);
    let example = match context.kind {
        CheckpointKind::Input => "'\"your answer\"'".to_owned(),
        CheckpointKind::Select => format!(
            "'{}'",
            json!(context.choices.as_ref().and_then(|choices| choices.first()))
        ),
        CheckpointKind::Confirm => "true".to_owned(),
    };
    note!(
        "continue with:\n  agentprism resume {run_id} --reply {}={example}",
        context.call_index
    );
}

/// How many failed calls [`report_failed_calls`] lists one by one.
const FAILED_CALLS_LISTED: usize = 10;

/// "N of M agent calls failed" on stderr, with the first failures' codes and messages, when
/// any agent call of the run's latest journal failed.
pub(super) async fn report_failed_calls(engine: &Engine, run_id: &RunId) {
    let Ok(calls) = engine.calls().latest_calls(run_id).await else {
        return;
    };
    let agents: Vec<_> = calls
        .iter()
        .filter(|call| call.kind == crate::model::CallKind::Agent)
        .collect();
    let failed: Vec<_> = agents.iter().filter(|call| call.error.is_some()).collect();
    if failed.is_empty() {
        return;
    }
    note!("{} of {} agent calls failed:", failed.len(), agents.len());
    for call in failed.iter().take(FAILED_CALLS_LISTED) {
        let error = call.error.as_ref().expect("filtered on error");
        note!(
            "  #{} {}: {}: {}",
            call.index,
            call.label.as_deref().unwrap_or("agent"),
            error.code,
            crate::engine::status::error_message(&error.message)
        );
    }
    if failed.len() > FAILED_CALLS_LISTED {
        note!(
            "  … and {} more (`agentprism status {run_id} --json` lists them)",
            failed.len() - FAILED_CALLS_LISTED
        );
    }
}

/// How a foreground run answers its agents' permission requests (`--permissions`).
enum Policy {
    Allow,
    Reject,
    /// At the terminal, one question per request.
    Ask,
}

impl Policy {
    /// `--permissions`; without it, ask on a terminal and reject otherwise.
    fn from_flag(flag: Option<&str>) -> Result<Policy> {
        match flag {
            Some("allow") => Ok(Policy::Allow),
            Some("reject") => Ok(Policy::Reject),
            Some("ask") => Ok(Policy::Ask),
            None if std::io::stdin().is_terminal() => Ok(Policy::Ask),
            None => Ok(Policy::Reject),
            Some(other) => Err(input_error(format!(
                "--permissions must be ask, allow or reject, got {other:?}"
            ))),
        }
    }
}

fn answer_permission(policy: &Policy, request: &Value) -> PermissionOutcome {
    let options: Vec<(String, String, String)> = request
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.get("optionId")?.as_str()?.to_owned(),
                o.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                o.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ))
        })
        .collect();
    let pick = |prefix: &str| {
        options
            .iter()
            .find(|(_, _, kind)| kind.starts_with(prefix))
            .map(|(id, _, _)| id.clone())
    };
    match policy {
        Policy::Allow => pick("allow")
            .map(|option_id| PermissionOutcome::Selected { option_id })
            .unwrap_or(PermissionOutcome::Cancelled),
        Policy::Reject => pick("reject")
            .map(|option_id| PermissionOutcome::Selected { option_id })
            .unwrap_or(PermissionOutcome::Cancelled),
        Policy::Ask => {
            let label = request
                .get("label")
                .and_then(Value::as_str)
                .unwrap_or("agent");
            let title = request
                .pointer("/toolCall/title")
                .and_then(Value::as_str)
                .unwrap_or("a tool call");
            note!("{label} asks permission for: {title}");
            for (position, (_, name, kind)) in options.iter().enumerate() {
                note!("  {}) {name} ({kind})", position + 1);
            }
            note_partial!("choose 1-{} (anything else cancels): ", options.len());
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            match line.trim().parse::<usize>() {
                Ok(choice) if choice >= 1 && choice <= options.len() => {
                    PermissionOutcome::Selected {
                        option_id: options[choice - 1].0.clone(),
                    }
                }
                _ => PermissionOutcome::Cancelled,
            }
        }
    }
}

/// The signals that interrupt a foreground run: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the
/// terminal closing). Each pauses the run so that it can be resumed.
struct Interruptions {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Interruptions {
    fn new() -> Result<Interruptions> {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("listening for {name}"))
        };
        Ok(Interruptions {
            interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
            terminate: listen(SignalKind::terminate(), "SIGTERM")?,
            hangup: listen(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal's name and the exit code it gives.
    async fn next(&mut self) -> (&'static str, u8) {
        tokio::select! {
            _ = self.interrupt.recv() => ("Ctrl-C", EXIT_INTERRUPTED),
            _ = self.terminate.recv() => ("SIGTERM", EXIT_TERMINATED),
            _ = self.hangup.recv() => ("SIGHUP", EXIT_HANGUP),
        }
    }
}
