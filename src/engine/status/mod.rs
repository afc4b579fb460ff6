//! The bounded status view of a run (engine.md 6.4), shared by `status`, `stop` and `pause`.
//!
//! Everything but `outcome` fits in 24,576 JSON bytes: when it would not, result previews
//! are shortened first, then log lines and calls give way, oldest first, calls keeping room
//! before log lines (`fit/` has the exact order). Previews are redacted and capped;
//! prompts, args, hashes, session ids and the script never appear.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::engine::glob;
use crate::engine::permissions::PendingPermission;
use crate::engine::preview;
use crate::engine::redact;
use crate::model::{
    AuthContext, CallChanges, CallKind, CallOrigin, CallOutcome, CheckpointWait, EndSummary,
    PauseReason, Phase, RunId, RunRecord, RunStatus, ScriptRevision, SetupWait, Usage,
    WorkspaceBase,
};
use crate::store::{CallReads, CallSummary, EventReads, StoreResult};

mod fit;
mod live;

pub(crate) use live::LatestActivity;
pub(crate) use live::{LiveCall, LiveView};

/// Cap of the status projection without `outcome`.
pub(crate) const MAX_STRUCTURED_BYTES: usize = 24_576;
/// Cap of the status text shown to a model.
pub(crate) const MAX_TEXT_BYTES: usize = 8_192;
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

pub(crate) fn script_uri(record: &RunRecord) -> String {
    file_uri(&record.script_file)
}

/// The `file://` URI of an absolute path, percent-encoding every byte outside the RFC 3986
/// unreserved set and `/`, so paths with spaces or `#` still make valid URIs that MCP
/// clients round-trip byte for byte.
pub(crate) fn file_uri(path: &std::path::Path) -> String {
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

/// The bounded status document of a run (engine.md 6.4, `docs/api.md`). Serialises to the
/// documented JSON, fields in this order; optional fields are left out when unset.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDocument {
    pub run_id: RunId,
    pub status: RunStatus,
    pub workflow_name: String,
    /// The echoed limits (`Limits::to_json`).
    pub limits: Value,
    pub script_uri: String,
    pub script_path: PathBuf,
    pub events_uri: String,
    pub generation: u32,
    pub started_at: String,
    pub updated_at: String,
    pub token_usage: Usage,
    /// What the run cost, once a generation ended or paused it (not while one runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<EndSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_phase: Option<String>,
    /// The pause reason, or `setup_declined` for a run whose approval was declined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_uri: Option<String>,
    /// The setup request of a pending run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupWait>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub script_revisions: Vec<ScriptRevision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_activity: Option<LatestActivity>,
    /// Permission requests of this process's live calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_permissions: Vec<Value>,
    /// Where the run's isolated calls start from, once a run isolates calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceBase>,
    pub filter: Filter,
    pub calls: Vec<CallEntry>,
    pub phases: Vec<Phase>,
    pub log_tail: LogTailView,
    pub truncation: Truncation,
    /// A paused or terminal run's outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<StatusOutcome>,
    /// Permission requests another process executing the run reported; they come last,
    /// where they were added to the document.
    #[serde(rename = "pendingPermissions", skip_serializing_if = "Vec::is_empty")]
    pub remote_pending_permissions: Vec<Value>,
}

/// The inspection bounds the document was built with.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    pub last_n: usize,
    pub log_lines: usize,
    pub label_glob: Option<String>,
}

/// One call as status shows it: a settled row of the latest generation, or a live call
/// (which has `timeoutMs` and `status`, and no result yet).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallEntry {
    pub index: u32,
    pub kind: CallKind,
    pub label: Option<String>,
    pub phase: Option<String>,
    pub model: Option<String>,
    pub backend_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `queued`, `waiting` or `running`, for a live call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    /// What a `waiting` call waits for: a slot of its backend's concurrency cap, "a claude
    /// slot (4 in use)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    pub result_preview: Option<Value>,
    pub result_redacted: bool,
    pub result_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Answered from the journal of an earlier generation.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Why a settled call of a resumed generation ran live instead of replaying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_reason: Option<crate::model::LiveReason>,
    /// What a settled isolated call changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<CallChanges>,
    /// A live call's attempt under way, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// How many attempts a settled call made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

/// `logTail`: the log lines shown, redacted and capped.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogTailView {
    pub lines: Vec<String>,
    pub total_lines: usize,
    pub omitted_lines: usize,
    pub truncated_lines: usize,
    pub redacted_lines: usize,
}

/// What was shortened to fit [`MAX_STRUCTURED_BYTES`].
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Truncation {
    pub max_structured_bytes: usize,
    pub byte_cap_applied: bool,
    pub phases: Shortened,
    pub logs: Shortened,
    pub calls: CallsShown,
}

/// How many of a list there are and how many are shown.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortened {
    pub total: usize,
    pub returned: usize,
    pub shortened: bool,
    /// Log lines only: how many had a credential replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redacted: Option<usize>,
}

/// The calls: all of them, those `labelGlob` matched, those shown.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallsShown {
    pub total: usize,
    pub matched: usize,
    pub returned: usize,
    pub shortened_results: usize,
    pub redacted_results: usize,
}

/// `outcome` of a paused or terminal run: the exact result and logs on completion; the
/// redacted log tail and contexts otherwise.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusOutcome {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Every log line, exact (completed runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<String>>,
    /// The last 20 lines, redacted and capped (other runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_context: Option<AuthContext>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_context: Option<CheckpointWait>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_hint: Option<String>,
    /// While paused `usage_limit`: when the limit lifts (ISO 8601 UTC), if the provider said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<String>,
    /// While paused `usage_limit`: when the run resumes by itself (ISO 8601 UTC), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
    /// While paused `usage_limit`: whether it resumes by itself, and when or why not, in words
    /// (`src/timers/`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<String>,
    /// While paused `budget`: the limit reached, `{field, spent, limit, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_context: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<OutcomeError>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checkpoints_taken: Vec<CheckpointTaken>,
}

/// The run's error, its message redacted.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeError {
    pub code: Option<String>,
    pub message: String,
}

/// A checkpoint the run went past, and where its answer came from.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointTaken {
    pub call_index: u32,
    /// `journal`, `injected` or `headless`.
    pub source: &'static str,
}

/// Builds the status document from the run's stored call rows and log lines (read-only).
pub(crate) async fn build<S: CallReads + EventReads + ?Sized>(
    store: &S,
    record: &RunRecord,
    live: Option<&LiveView>,
    permissions: &[PendingPermission],
    query: &StatusQuery,
) -> StoreResult<StatusDocument> {
    let (rows, total_calls) = shown_rows(store, record, live, query).await?;
    // One read of the log serves `logTail` and `outcome`: every line of a completed run, the
    // last 20 of another paused or ended one.
    let has_outcome = record.status == RunStatus::Paused || record.status.is_terminal();
    let wanted = match record.status {
        RunStatus::Completed => u32::MAX,
        _ if has_outcome => query.log_lines.max(OUTCOME_LOG_LINES) as u32,
        _ => query.log_lines as u32,
    };
    let (read_lines, total_logs) = store.log_tail(&record.run_id, wanted).await?;
    let log_lines = read_lines[read_lines.len().saturating_sub(query.log_lines)..].to_vec();
    let matched: Vec<CallEntry> = rows
        .into_iter()
        .filter(|entry| match &query.label_glob {
            Some(pattern) => entry
                .label
                .as_deref()
                .is_some_and(|label| glob::glob_match(pattern, label)),
            None => true,
        })
        .collect();
    let matched_count = match query.label_glob {
        Some(_) => matched.len(),
        None => total_calls,
    };
    let mut shown_calls: Vec<CallEntry> = matched.into_iter().rev().take(query.last_n).collect();
    shown_calls.reverse();
    let logs = LogTail::of(log_lines, total_logs as usize);
    let totals = fit::Totals {
        calls: total_calls,
        matched_calls: matched_count,
        phases: record.phases.len(),
        logs: logs.total,
        logs_redacted: logs.redacted,
        logs_truncated: logs.truncated,
    };
    let mut document = head(record, live, permissions, query);
    document.calls = shown_calls;
    document.phases = record.phases.iter().take(MAX_PHASES).cloned().collect();
    document.log_tail.lines = logs.lines;
    let mut document = fit::fit(document, &totals);
    if has_outcome {
        document.outcome = Some(outcome(store, record, read_lines).await?);
    }
    Ok(document)
}

/// The call rows status may show, ascending by index, and how many there are in all. Without
/// `labelGlob` only the last `lastN` can be shown, so the store reads just the latest
/// generation's tail (bounded, whatever the run's size; the live calls of a generation are
/// bounded by its concurrency); a glob must see every row of the generation to match them.
async fn shown_rows(
    store: &(impl CallReads + ?Sized),
    record: &RunRecord,
    live: Option<&LiveView>,
    query: &StatusQuery,
) -> StoreResult<(Vec<CallEntry>, usize)> {
    if query.label_glob.is_some() {
        let calls: Vec<CallSummary> = store
            .latest_calls(&record.run_id)
            .await?
            .iter()
            .map(CallSummary::from)
            .collect();
        let rows = call_rows(record, &calls, live);
        let total = rows.len();
        return Ok((rows, total));
    }
    // A generation this process executes counts its own rows; a stopped one recorded its
    // count in the store.
    let counted_here = live.and_then(|live| live.settled_calls);
    let last_n = query.last_n as u32;
    // Only the shown columns of the tail (`CallReads::status_call_tail`), counted unless counted
    // here.
    let tail = store
        .status_call_tail(&record.run_id, last_n, counted_here.is_none())
        .await?;
    let (generation, calls) = (tail.generation, tail.calls);
    let total = counted_here.or(tail.total).unwrap_or_default();
    // `call_rows` keeps only the record's generation while one is live.
    let settled = match (generation, live) {
        (Some(generation), Some(_)) if generation != record.generation => 0,
        _ => total as usize,
    };
    let live_calls = live.map_or(0, |live| live.calls.len());
    let rows = call_rows(record, &calls, live);
    Ok((rows, settled + live_calls))
}

/// Settled calls of the latest generation (every generation's when none is live), plus
/// live ones, ascending by index.
fn call_rows(record: &RunRecord, calls: &[CallSummary], live: Option<&LiveView>) -> Vec<CallEntry> {
    let mut rows: Vec<CallEntry> = Vec::new();
    for call in calls
        .iter()
        .filter(|c| c.generation == record.generation || live.is_none())
    {
        if call.kind == CallKind::Checkpoint {
            continue;
        }
        let shown = call.result.as_ref().map(preview::preview);
        rows.push(CallEntry {
            index: call.index,
            kind: call.kind,
            label: call.label.clone(),
            phase: call.phase.clone(),
            model: call.model_requested.clone(),
            backend_id: call.backend_id.clone(),
            timeout_ms: None,
            status: None,
            waiting_for: None,
            attempt: None,
            attempts: call.attempts.filter(|_| call.kind == CallKind::Agent),
            result_redacted: shown.as_ref().is_some_and(|p| p.redacted),
            result_truncated: shown.as_ref().is_some_and(|p| p.truncated),
            result_preview: shown.map(|p| p.preview),
            error_code: call.error.as_ref().map(|error| error.code.clone()),
            error_message: call
                .error
                .as_ref()
                .map(|error| error_message(&error.message)),
            replayed: call.origin == CallOrigin::JournalReplay,
            live_reason: call.live_reason,
            changes: call.changes.clone(),
        });
    }
    if let Some(live) = live {
        for (index, call) in &live.calls {
            rows.push(CallEntry {
                index: *index,
                kind: CallKind::Agent,
                label: Some(call.label.clone()),
                phase: call.phase.clone(),
                model: call.model.clone(),
                backend_id: call.backend_id.clone(),
                timeout_ms: Some(call.timeout_ms),
                status: Some(call.state),
                waiting_for: call.waiting_for.clone(),
                attempt: Some(call.attempt),
                attempts: None,
                result_preview: None,
                result_redacted: false,
                result_truncated: false,
                error_code: None,
                error_message: None,
                replayed: false,
                live_reason: None,
                changes: None,
            });
        }
    }
    rows.sort_by_key(|entry| entry.index);
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

/// The document without calls, phases and logs, its counters unset (see [`fit`]).
fn head(
    record: &RunRecord,
    live: Option<&LiveView>,
    permissions: &[PendingPermission],
    query: &StatusQuery,
) -> StatusDocument {
    let run_id = record.run_id.as_str();
    let reason = match record.pause_reason {
        Some(reason) => Some(reason.as_str().to_owned()),
        None if record.status == RunStatus::Aborted
            && crate::engine::approval::setup_declined(record) =>
        {
            Some(crate::engine::approval::SETUP_DECLINED.to_owned())
        }
        None => None,
    };
    StatusDocument {
        run_id: record.run_id.clone(),
        status: record.status,
        workflow_name: record.workflow_name.clone(),
        limits: record.limits.to_json(),
        script_uri: script_uri(record),
        script_path: record.script_file.clone(),
        events_uri: format!("workflow://runs/{run_id}/events"),
        generation: record.generation,
        started_at: crate::util::iso_time(record.started_at),
        updated_at: crate::util::iso_time(record.updated_at),
        token_usage: live.map(|l| l.usage).unwrap_or(record.token_usage),
        summary: record
            .summary
            .clone()
            .filter(|_| record.status == RunStatus::Paused || record.status.is_terminal()),
        current_phase: live
            .and_then(|l| l.current_phase.clone())
            .or_else(|| record.current_phase.clone()),
        reason,
        error_code: record.error_code.clone(),
        result_uri: (record.status == RunStatus::Completed && record.result.is_some())
            .then(|| format!("workflow://runs/{run_id}/result")),
        setup: record
            .setup
            .clone()
            .filter(|_| record.status == RunStatus::Pending),
        script_revisions: record.script_revisions.clone(),
        latest_activity: live.and_then(|l| l.latest_activity.clone()),
        pending_permissions: permissions.iter().map(PendingPermission::to_json).collect(),
        workspace: record.workspace.clone(),
        filter: Filter {
            last_n: query.last_n,
            log_lines: query.log_lines,
            label_glob: query.label_glob.clone(),
        },
        calls: Vec::new(),
        phases: Vec::new(),
        log_tail: LogTailView {
            lines: Vec::new(),
            total_lines: 0,
            omitted_lines: 0,
            truncated_lines: 0,
            redacted_lines: 0,
        },
        truncation: Truncation {
            max_structured_bytes: MAX_STRUCTURED_BYTES,
            byte_cap_applied: false,
            phases: Shortened {
                total: 0,
                returned: 0,
                shortened: false,
                redacted: None,
            },
            logs: Shortened {
                total: 0,
                returned: 0,
                shortened: false,
                redacted: Some(0),
            },
            calls: CallsShown {
                total: 0,
                matched: 0,
                returned: 0,
                shortened_results: 0,
                redacted_results: 0,
            },
        },
        outcome: None,
        remote_pending_permissions: Vec::new(),
    }
}

/// Log lines `outcome` shows of a run that did not complete.
const OUTCOME_LOG_LINES: usize = 20;

/// `outcome` of a paused or terminal run; `logs` are the run's last log lines, all of them
/// for a completed run.
async fn outcome(
    store: &(impl CallReads + ?Sized),
    record: &RunRecord,
    mut logs: Vec<String>,
) -> StoreResult<StatusOutcome> {
    let mut outcome = StatusOutcome::default();
    let checkpoints = store.checkpoint_calls(&record.run_id).await?;
    outcome.checkpoints_taken = checkpoints
        .iter()
        .filter(|c| c.outcome == CallOutcome::Result)
        .map(|c| CheckpointTaken {
            call_index: c.index,
            source: match c.origin {
                CallOrigin::JournalReplay => "journal",
                CallOrigin::Confirm => "injected",
                _ => "headless",
            },
        })
        .collect();
    if record.status == RunStatus::Completed {
        outcome.result = record.result.clone();
        outcome.logs = Some(logs);
    } else {
        logs.drain(..logs.len().saturating_sub(OUTCOME_LOG_LINES));
        let tail: Vec<String> = logs
            .iter()
            .map(|l| preview::cap_text(&redact::redact_text(l).0, preview::TEXT_CAP).0)
            .collect();
        outcome.log_tail = Some(tail);
    }
    outcome.auth_context = record.auth_context.clone();
    outcome.checkpoint_context = record.checkpoint_context.clone();
    outcome.reset_hint = record.reset_hint.clone();
    outcome.reset_at = record.reset_at.map(crate::util::iso_time);
    outcome.budget_context = budget_context(record);
    outcome.error = record.error_message.as_ref().map(|message| OutcomeError {
        code: record.error_code.clone(),
        message: redact::redact_text(message).0,
    });
    Ok(outcome)
}

/// The limit a run paused `budget` reached, from its limits and its spend (both stored with
/// the run, so nothing else is): the first limit the spend has reached, tokens first.
pub(crate) fn budget_context(record: &RunRecord) -> Option<Value> {
    use crate::budget::{Budget, RunBudget};
    if record.status != RunStatus::Paused || record.pause_reason != Some(PauseReason::Budget) {
        return None;
    }
    let budget = RunBudget {
        limits: crate::budget::SpendLimits::of(&record.limits),
    };
    budget
        .may_start(&record.token_usage)
        .err()
        .map(|exhausted| exhausted.to_json())
}

/// Longest failure message a status call entry or an `agentEnd` event carries.
pub(crate) const ERROR_MESSAGE_CAP: usize = 240;

/// A call's failure message as status and events show it: redacted, on one line, capped at
/// [`ERROR_MESSAGE_CAP`] bytes.
pub(crate) fn error_message(message: &str) -> String {
    let (clean, _) = redact::redact_text(message);
    let line = clean.replace(['\n', '\r'], " ");
    if line.len() <= ERROR_MESSAGE_CAP {
        return line;
    }
    format!("{}…", crate::util::truncate_utf8(&line, ERROR_MESSAGE_CAP))
}
