//! The bounded status view of a run (engine.md 6.4), shared by `status`, `stop` and `pause`.
//!
//! Everything but `outcome` fits in 24,576 JSON bytes: when it would not, the oldest calls
//! go first, then log lines, then phases. Previews are redacted and capped; prompts, args,
//! hashes, session ids and the script never appear.

use serde_json::{Value, json};

use crate::engine::driver::LiveView;
use crate::engine::glob;
use crate::engine::permissions::PendingPermission;
use crate::engine::preview;
use crate::engine::redact;
use crate::model::{CallKind, CallOrigin, CallOutcome, CallRecord, RunRecord, RunStatus};
use crate::store::{Store, StoreResult};

/// Cap of the status projection without `outcome`.
pub const MAX_STRUCTURED_BYTES: usize = 24_576;
/// Cap of the status text shown to a model.
pub const MAX_TEXT_BYTES: usize = 8_192;
const MAX_PHASES: usize = 64;

/// Inspection bounds (validated by the caller).
#[derive(Clone, Debug)]
pub struct StatusQuery {
    /// Latest calls shown, 1..=50.
    pub last_n: usize,
    pub label_glob: Option<String>,
    /// Log lines shown, 0..=50.
    pub log_lines: usize,
}

impl Default for StatusQuery {
    fn default() -> Self {
        StatusQuery {
            last_n: 20,
            label_glob: None,
            log_lines: 20,
        }
    }
}

pub fn script_uri(record: &RunRecord) -> String {
    file_uri(&record.script_file)
}

/// The `file://` URI of an absolute path, percent-encoding every byte outside the RFC 3986
/// unreserved set and `/`, so paths with spaces or `#` still make valid URIs that MCP
/// clients round-trip byte for byte.
pub fn file_uri(path: &std::path::Path) -> String {
    let mut uri = String::from("file://");
    for &byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'-' | b'.' | b'_' | b'~') {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// Builds the status document.
pub async fn build(
    store: &dyn Store,
    record: &RunRecord,
    live: Option<&LiveView>,
    permissions: &[PendingPermission],
    query: &StatusQuery,
) -> StoreResult<Value> {
    let calls = store.latest_calls(&record.run_id).await?;
    let (log_lines, total_logs) = store
        .log_tail(&record.run_id, query.log_lines as u32)
        .await?;
    let rows = call_rows(record, &calls, live);
    let total_calls = rows.len();
    let matched: Vec<Value> = rows
        .into_iter()
        .filter(|(_, _, label)| match &query.label_glob {
            Some(pattern) => label
                .as_deref()
                .is_some_and(|label| glob::glob_match(pattern, label)),
            None => true,
        })
        .map(|(_, entry, _)| entry)
        .collect();
    let matched_count = matched.len();
    let mut shown_calls: Vec<Value> = matched.into_iter().rev().take(query.last_n).collect();
    shown_calls.reverse();
    let logs = LogTail::of(log_lines, total_logs as usize);
    let phases: Vec<Value> = record
        .phases
        .iter()
        .take(MAX_PHASES)
        .map(|p| json!(p))
        .collect();
    let head = head(record, live, permissions, query);
    let mut document = fit(
        head,
        Parts {
            calls: shown_calls,
            total_calls,
            matched_calls: matched_count,
            logs,
            phases,
            total_phases: record.phases.len(),
        },
    );
    if record.status == RunStatus::Paused || record.status.is_terminal() {
        document["outcome"] = outcome(store, record).await?;
    }
    Ok(document)
}

/// Settled calls of the latest generation (every generation's when none is live), plus
/// live ones, ascending by index, each with its label for `labelGlob`.
fn call_rows(
    record: &RunRecord,
    calls: &[CallRecord],
    live: Option<&LiveView>,
) -> Vec<(u32, Value, Option<String>)> {
    let mut rows: Vec<(u32, Value, Option<String>)> = Vec::new();
    for call in calls
        .iter()
        .filter(|c| c.generation == record.generation || live.is_none())
    {
        if call.kind == CallKind::Checkpoint {
            continue;
        }
        let shown = call.result.as_ref().map(preview::preview);
        let mut entry = json!({
            "index": call.index,
            "kind": call.kind,
            "label": call.label,
            "phase": call.phase,
            "model": call.model_requested,
            "backendId": call.backend_id,
            "resultPreview": shown.as_ref().map(|p| p.preview.clone()),
            "resultRedacted": shown.as_ref().is_some_and(|p| p.redacted),
            "resultTruncated": shown.as_ref().is_some_and(|p| p.truncated),
        });
        if let Some(error) = &call.error {
            entry["errorCode"] = Value::String(error.code.clone());
            entry["errorMessage"] = Value::String(error_message(&error.message));
        }
        if call.origin == CallOrigin::JournalReplay {
            entry["replayed"] = Value::Bool(true);
        }
        if call.outcome == CallOutcome::Null && entry["resultPreview"].is_null() {
            entry["resultPreview"] = Value::Null;
        }
        rows.push((call.index, entry, call.label.clone()));
    }
    if let Some(live) = live {
        for (index, call) in &live.calls {
            rows.push((
                *index,
                json!({
                    "index": index,
                    "kind": "agent",
                    "label": call.label,
                    "phase": call.phase,
                    "model": call.model,
                    "backendId": call.backend_id,
                    "timeoutMs": call.timeout_ms,
                    "status": call.state,
                    "resultPreview": null,
                    "resultRedacted": false,
                    "resultTruncated": false,
                }),
                Some(call.label.clone()),
            ));
        }
    }
    rows.sort_by_key(|(index, _, _)| *index);
    rows
}

/// The log lines shown: redacted and capped, with counts of both.
struct LogTail {
    lines: Vec<String>,
    total: usize,
    redacted: usize,
    truncated: usize,
}

impl LogTail {
    fn of(lines: Vec<String>, total: usize) -> LogTail {
        let mut redacted = 0;
        let mut truncated = 0;
        let lines = lines
            .into_iter()
            .map(|line| {
                let (clean, was_redacted) = redact::redact_text(&line);
                let (capped, cut) = preview::cap_text(&clean, preview::TEXT_CAP);
                redacted += usize::from(was_redacted);
                truncated += usize::from(cut);
                capped
            })
            .collect();
        LogTail {
            lines,
            total,
            redacted,
            truncated,
        }
    }
}

/// The document's fields before calls, phases and logs.
fn head(
    record: &RunRecord,
    live: Option<&LiveView>,
    permissions: &[PendingPermission],
    query: &StatusQuery,
) -> Value {
    let run_id = record.run_id.as_str();
    let current_phase = live
        .and_then(|l| l.current_phase.clone())
        .or_else(|| record.current_phase.clone());
    let usage = live.map(|l| l.usage).unwrap_or(record.token_usage);
    let mut document = json!({
        "runId": run_id,
        "status": record.status,
        "workflowName": record.workflow_name,
        "limits": record.limits.to_json(),
        "scriptUri": script_uri(record),
        "scriptPath": record.script_file,
        "eventsUri": format!("workflow://runs/{run_id}/events"),
        "generation": record.generation,
        "startedAt": crate::util::iso_time(record.started_at),
        "updatedAt": crate::util::iso_time(record.updated_at),
        "tokenUsage": usage,
    });
    if let Some(phase) = &current_phase {
        document["currentPhase"] = Value::String(phase.clone());
    }
    if let Some(reason) = record.pause_reason {
        document["reason"] = Value::String(reason.as_str().to_owned());
    } else if record.status == RunStatus::Aborted && crate::engine::approval::setup_declined(record)
    {
        document["reason"] = Value::String(crate::engine::approval::SETUP_DECLINED.to_owned());
    }
    if let Some(code) = &record.error_code {
        document["errorCode"] = Value::String(code.clone());
    }
    if record.status == RunStatus::Completed && record.result.is_some() {
        document["resultUri"] = Value::String(format!("workflow://runs/{run_id}/result"));
    }
    if let Some(setup) = &record.setup
        && record.status == RunStatus::Pending
    {
        document["setup"] = setup.clone();
    }
    if !record.script_revisions.is_empty() {
        document["scriptRevisions"] = json!(record.script_revisions);
    }
    if let Some(activity) = live.and_then(|l| l.latest_activity.clone()) {
        document["latestActivity"] = activity;
    }
    if !permissions.is_empty() {
        document["pendingPermissions"] =
            Value::Array(permissions.iter().map(PendingPermission::to_json).collect());
    }
    document["filter"] =
        json!({"lastN": query.last_n, "logLines": query.log_lines, "labelGlob": query.label_glob});
    document
}

/// What [`fit`] shortens to make the document fit.
struct Parts {
    calls: Vec<Value>,
    total_calls: usize,
    matched_calls: usize,
    logs: LogTail,
    phases: Vec<Value>,
    total_phases: usize,
}

/// Fits the cap: the oldest calls go first, then log lines, then phases.
fn fit(head: Value, mut parts: Parts) -> Value {
    let mut dropped_calls = 0;
    let mut dropped_logs = 0;
    let mut dropped_phases = 0;
    loop {
        let mut candidate = head.clone();
        let logs = &parts.logs;
        fill(
            &mut candidate,
            &parts.calls,
            &logs.lines,
            &parts.phases,
            logs.total,
            logs.redacted,
            logs.truncated,
        );
        candidate["truncation"] = json!({
            "maxStructuredBytes": MAX_STRUCTURED_BYTES,
            "byteCapApplied": dropped_calls + dropped_logs + dropped_phases > 0,
            "phases": {"total": parts.total_phases, "returned": parts.phases.len(), "shortened": dropped_phases > 0 || parts.total_phases > MAX_PHASES},
            "logs": {"total": logs.total, "returned": logs.lines.len(), "shortened": dropped_logs > 0, "redacted": logs.redacted},
            "calls": {"total": parts.total_calls, "matched": parts.matched_calls, "returned": parts.calls.len(), "shortenedResults": 0, "redactedResults": 0},
        });
        let size = candidate.to_string().len();
        if size <= MAX_STRUCTURED_BYTES {
            return candidate;
        }
        if !parts.calls.is_empty() {
            parts.calls.remove(0);
            dropped_calls += 1;
        } else if !parts.logs.lines.is_empty() {
            parts.logs.lines.remove(0);
            dropped_logs += 1;
        } else if !parts.phases.is_empty() {
            parts.phases.remove(0);
            dropped_phases += 1;
        } else {
            return candidate;
        }
    }
}

fn fill(
    document: &mut Value,
    calls: &[Value],
    lines: &[String],
    phases: &[Value],
    total_logs: usize,
    redacted_lines: usize,
    truncated_lines: usize,
) {
    document["calls"] = Value::Array(calls.to_vec());
    document["phases"] = Value::Array(phases.to_vec());
    document["logTail"] = json!({
        "lines": lines,
        "totalLines": total_logs,
        "omittedLines": total_logs.saturating_sub(lines.len()),
        "truncatedLines": truncated_lines,
        "redactedLines": redacted_lines,
    });
}

/// `outcome` of a paused or terminal run: the exact result and logs on completion; redacted
/// log tail and contexts otherwise.
async fn outcome(store: &dyn Store, record: &RunRecord) -> StoreResult<Value> {
    let mut outcome = json!({});
    let calls = store.calls(&record.run_id).await?;
    let checkpoints: Vec<Value> = calls
        .iter()
        .filter(|c| c.kind == CallKind::Checkpoint && c.outcome == CallOutcome::Result && c.superseded_by.is_none())
        .map(|c| {
            json!({
                "callIndex": c.index,
                "source": match c.origin { CallOrigin::JournalReplay => "journal", CallOrigin::Confirm => "injected", _ => "headless" },
            })
        })
        .collect();
    if record.status == RunStatus::Completed {
        if let Some(result) = &record.result {
            outcome["result"] = result.clone();
        }
        let (logs, _) = store.log_tail(&record.run_id, u32::MAX).await?;
        outcome["logs"] = json!(logs);
    } else {
        let (logs, _) = store.log_tail(&record.run_id, 20).await?;
        let tail: Vec<String> = logs
            .iter()
            .map(|l| preview::cap_text(&redact::redact_text(l).0, preview::TEXT_CAP).0)
            .collect();
        outcome["logTail"] = json!(tail);
    }
    if let Some(context) = &record.auth_context {
        outcome["authContext"] = context.clone();
    }
    if let Some(context) = &record.checkpoint_context {
        outcome["checkpointContext"] = context.clone();
    }
    if let Some(hint) = &record.reset_hint {
        outcome["resetHint"] = Value::String(hint.clone());
    }
    if let Some(message) = &record.error_message {
        outcome["error"] =
            json!({"code": record.error_code, "message": redact::redact_text(message).0});
    }
    if !checkpoints.is_empty() {
        outcome["checkpointsTaken"] = Value::Array(checkpoints);
    }
    Ok(outcome)
}

/// Longest failure message a status call entry or an `agentEnd` event carries.
pub const ERROR_MESSAGE_CAP: usize = 240;

/// A call's failure message as status and events show it: redacted, on one line, capped at
/// [`ERROR_MESSAGE_CAP`] bytes.
pub fn error_message(message: &str) -> String {
    let (clean, _) = redact::redact_text(message);
    let line = clean.replace(['\n', '\r'], " ");
    if line.len() <= ERROR_MESSAGE_CAP {
        return line;
    }
    format!("{}…", crate::util::truncate_utf8(&line, ERROR_MESSAGE_CAP))
}
