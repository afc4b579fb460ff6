//! The human- and model-readable text of tool results, and the `next` field of their
//! structured content. The structured document is the contract; the text is a short summary
//! of it that tells the reader what to do next, capped at 8,192 bytes for status (engine.md
//! 6.4). The raw `outcome` never goes into text: it is uncapped and may be large.
//!
//! Hosts show the model `structuredContent` rather than the text, so what the text advises
//! is also in the document as `next`: the arguments of the one `workflow` call that moves the
//! run on, ready to send, with a value in `<angle brackets>` where only the user or the model
//! can choose it (a checkpoint answer, a permission option). `next` is `null` when nothing is
//! left to do. Its shapes are listed in docs/api.md ("What to do next").
//!
//! A host may keep only part of a large answer: Claude Code shows the first 2 KB of one it
//! moves to a file, Codex the first and last ~6 KB. So the facts a model needs to go on (the
//! run's status, its result's size, the next call) lead both the text and the document
//! ([`lead_with`]), ahead of anything large.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::engine::status::MAX_TEXT_BYTES;
use crate::model::{CallChanges, WorkspaceBase, short_commit};

/// The page size every `next` suggests for `result`. A page's chunk is a JSON string inside
/// the answer, so escaping can double its bytes (a result of quotes or backslashes); 4,096
/// bytes stay whole, with the page's other fields, under the ~12,000 bytes of a tool output
/// Codex keeps whole (it cuts the middle of a longer one), and far under Claude Code's limit.
pub(super) const RESULT_PAGE_BYTES: usize = 4_096;

/// Longest single line we quote from a preview, log or label.
const LINE_CAP: usize = 240;

pub(super) fn acknowledgement(ack: &Value) -> String {
    let run_id = ack["runId"].as_str().unwrap_or_default();
    let mut out = String::new();
    let verb = if ack["action"] == "resume" {
        "Resumed"
    } else {
        "Accepted"
    };
    let _ = write!(
        out,
        "{verb} workflow run {run_id} (status {}).",
        ack["status"].as_str().unwrap_or("unknown")
    );
    if let Some(size) = ack.get("size") {
        let _ = write!(
            out,
            " It starts {}.",
            crate::engine::estimate::describe(size)
        );
    }
    if let Some(continuation) = ack.get("continuation") {
        let _ = write!(
            out,
            " Generation {}{}.",
            continuation["generation"],
            if continuation["scriptRevised"] == true {
                ", running the revised script"
            } else {
                ""
            }
        );
        if let Some(rerun) = continuation["rerun"].as_array() {
            let _ = write!(
                out,
                " Redoing call {}; later calls whose prompts change run live, the rest replay.",
                crate::engine::rerun::describe(rerun)
            );
        }
    }
    if let Some(request) = ack.pointer("/setup/request") {
        let _ = write!(
            out,
            "\nSetup needed: {} {} Answer with action \"setup-response\", runId \"{run_id}\", setupId \"{}\", response {{action:\"accept\",content:{{approve:true}}}} or {{action:\"decline\"}}.",
            request["title"].as_str().unwrap_or_default(),
            cap(request["message"].as_str().unwrap_or_default()),
            request["id"].as_str().unwrap_or_default()
        );
    }
    if let Some(warnings) = ack["warnings"].as_array() {
        for warning in warnings {
            let _ = write!(
                out,
                "\nWarning: {}",
                cap(warning.as_str().unwrap_or_default())
            );
        }
    }
    let _ = write!(
        out,
        "\nFollow it with action \"status\" (runId \"{run_id}\") or the events resource {}; the script file is {}.",
        ack["eventsUri"].as_str().unwrap_or_default(),
        ack["scriptPath"].as_str().unwrap_or_default()
    );
    out
}

pub(super) fn stop_headline(status: &Value, call_index: Option<u32>) -> String {
    let run_id = status["runId"].as_str().unwrap_or_default();
    if let Some(index) = call_index {
        return format!(
            "Cancelled call {index} of run {run_id}; its slot resolves to null (AGENT_CANCELLED) and the run goes on."
        );
    }
    if status["alreadyTerminal"] == true {
        return format!("Run {run_id} was already finished; nothing to stop.");
    }
    if status["stopped"] == true && status["reason"] == "setup_declined" {
        return format!(
            "Stopped run {run_id} while it waited for backend approval; the approval is cancelled (setup_declined), so the run cannot be resumed."
        );
    }
    if status["stopped"] == true {
        return format!("Stopped run {run_id}; it can be resumed with action \"resume\".");
    }
    let operation = status
        .pointer("/control/operationId")
        .and_then(Value::as_str);
    if status.pointer("/control/state") == Some(&Value::from("pending"))
        && let (Some(operation), Some(pid)) = (operation, status.pointer("/control/owner/pid"))
    {
        return format!(
            "Stop of run {run_id} is pending (operation {operation}): the server process {pid} executing it did not answer. The request is recorded and carried out when that process next checks; stop again to retry with the same operation, or pass forceOwner if that process is superseded."
        );
    }
    match operation {
        Some(operation) => format!(
            "Stop of run {run_id} requested; the run has not settled yet (operation {operation}). Check status again."
        ),
        None => format!("Stop of run {run_id} requested."),
    }
}

pub(super) fn pause_headline(status: &Value) -> String {
    let run_id = status["runId"].as_str().unwrap_or_default();
    match (status["pauseRequested"] == true, status["paused"] == true) {
        (_, true) => format!("Run {run_id} is paused; continue it with action \"resume\"."),
        (true, false) => format!(
            "Pause of run {run_id} requested; agents already running finish first. Check status again."
        ),
        (false, false) => {
            format!("Run {run_id} is not executing here, so there was nothing to pause.")
        }
    }
}

/// The status summary.
pub(super) fn status(headline: Option<&str>, status: &Value) -> String {
    let mut out = String::new();
    if let Some(headline) = headline {
        out.push_str(headline);
        out.push('\n');
    }
    run_line(&mut out, status);
    result_and_next(&mut out, status);
    waits(&mut out, status);
    summary(&mut out, status);
    workspace(&mut out, status);
    calls(&mut out, status);
    if let Some(lines) = status.pointer("/logTail/lines").and_then(Value::as_array)
        && !lines.is_empty()
    {
        let _ = writeln!(out, "Log (last {}):", lines.len());
        for line in lines {
            let _ = writeln!(out, "  {}", cap(line.as_str().unwrap_or_default()));
        }
    }
    if let Some(uri) = status["eventsUri"].as_str() {
        let _ = write!(out, "Events: {uri}");
    }
    fit(out)
}

/// `Run <id> (<name>): <status> (<reason>), error <code>`, the phase and the error.
fn run_line(out: &mut String, status: &Value) {
    let run_id = status["runId"].as_str().unwrap_or_default();
    let _ = write!(
        out,
        "Run {run_id} ({}): {}",
        cap(status["workflowName"].as_str().unwrap_or_default()),
        status["status"].as_str().unwrap_or("unknown")
    );
    if let Some(reason) = status["reason"].as_str() {
        let _ = write!(out, " ({reason})");
    }
    if let Some(code) = status["errorCode"].as_str() {
        let _ = write!(out, ", error {code}");
    }
    out.push('\n');
    if let Some(phase) = status["currentPhase"].as_str() {
        let _ = writeln!(out, "Phase: {}", cap(phase));
    }
    if let Some(message) = status
        .pointer("/outcome/error/message")
        .and_then(Value::as_str)
    {
        let _ = writeln!(out, "Error: {}", cap(message));
    }
}

/// What the run cost, once a generation ended or paused it: after the lines that say what to
/// do next, which a host that keeps only the start must still see.
fn summary(out: &mut String, status: &Value) {
    if let Some(summary) = crate::model::EndSummary::of_status(status) {
        for (position, line) in summary.details("  ").iter().enumerate() {
            let _ = match position {
                0 => writeln!(out, "Summary: {line}"),
                _ => writeln!(out, "{}", cap(line)),
            };
        }
    }
}

/// The result's size and where to read it, and the next call written out whole, right after
/// the run line: the lines a model must not miss when a host keeps only the start.
fn result_and_next(out: &mut String, status: &Value) {
    if let (Some(uri), Some(bytes)) = (status["resultUri"].as_str(), status["resultBytes"].as_u64())
    {
        let _ = writeln!(
            out,
            "Result: {bytes} bytes of JSON at {uri}. Page it with the next call, continuing at each page's endOffset until hasMore is false."
        );
    }
    if !status["next"].is_null() {
        let _ = writeln!(out, "Next call: {}", status["next"]);
    }
}

/// What the run waits for, each with the action that answers it: a checkpoint, credentials,
/// a setup approval, agents' permission requests.
fn waits(out: &mut String, status: &Value) {
    if let Some(context) = status.pointer("/outcome/checkpointContext") {
        let _ = writeln!(
            out,
            "Checkpoint {} ({}) waits for an answer: action \"resume\" with checkpointReplies {{\"{}\": <answer>}}.",
            context["callIndex"],
            context["kind"].as_str().unwrap_or("confirm"),
            context["callIndex"]
        );
    }
    if let Some(context) = status.pointer("/outcome/authContext") {
        let _ = writeln!(
            out,
            "Backend {} needs credentials; configure them, then action \"resume\".",
            context["backendId"].as_str().unwrap_or("unknown")
        );
    }
    if let Some(request) = status.pointer("/setup/request") {
        let _ = writeln!(
            out,
            "Setup waits: {} Answer with action \"setup-response\", setupId \"{}\".",
            cap(request["message"].as_str().unwrap_or_default()),
            request["id"].as_str().unwrap_or_default()
        );
    }
    for permission in status["pendingPermissions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let options: Vec<&str> = permission["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["optionId"].as_str())
            .collect();
        let _ = writeln!(
            out,
            "Permission {} (call {} {}) waits: options {}. Answer with action \"permissions-response\".",
            permission["permissionId"].as_str().unwrap_or_default(),
            permission["callIndex"],
            cap(permission["label"].as_str().unwrap_or_default()),
            options.join(", ")
        );
    }
}

/// The calls shown, one line each: index, label, state and result preview.
fn calls(out: &mut String, status: &Value) {
    let Some(calls) = status["calls"].as_array() else {
        return;
    };
    let total = &status["truncation"]["calls"]["total"];
    let _ = writeln!(out, "Calls ({} shown of {}):", calls.len(), total);
    for call in calls {
        let state = call["status"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| call["errorCode"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                if call["replayed"] == true {
                    "replayed".to_owned()
                } else {
                    "done".to_owned()
                }
            });
        let preview = match &call["resultPreview"] {
            Value::Null => String::new(),
            Value::String(text) => format!(": {}", cap(text)),
            other => format!(": {}", cap(&other.to_string())),
        };
        let _ = writeln!(
            out,
            "  #{} {} [{state}]{preview}",
            call["index"],
            cap(call["label"].as_str().unwrap_or_default())
        );
        if let Some(changes) = call
            .get("changes")
            .and_then(|c| serde_json::from_value::<CallChanges>(c.clone()).ok())
        {
            let _ = writeln!(out, "    changes: {}", cap(&changes.summary()));
        }
    }
}

/// Where the run's isolated calls start from, when it isolates any.
fn workspace(out: &mut String, status: &Value) {
    let Some(base) = status
        .get("workspace")
        .and_then(|b| serde_json::from_value::<WorkspaceBase>(b.clone()).ok())
    else {
        return;
    };
    let _ = writeln!(
        out,
        "Isolated calls start from commit {} of {}{}; each call's branch is in its `changes`.",
        short_commit(&base.commit),
        cap(&base.repository),
        if base.dirty {
            " (the tree's uncommitted changes at admission are not in it)"
        } else {
            ""
        }
    );
}

/// Cuts a quoted string to one bounded line.
fn cap(text: &str) -> String {
    let line = text.replace(['\n', '\r'], " ");
    if line.len() <= LINE_CAP {
        return line;
    }
    format!("{}…", crate::util::truncate_utf8(&line, LINE_CAP))
}

/// Keeps the text within [`MAX_TEXT_BYTES`], cutting whole lines from the end.
fn fit(text: String) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text;
    }
    let marker = "\n… (shortened; the structured content has the whole status)";
    let budget = MAX_TEXT_BYTES - marker.len();
    let cut = crate::util::truncate_utf8(&text, budget);
    let cut = cut.rfind('\n').map(|at| &cut[..at]).unwrap_or(cut);
    format!("{cut}{marker}")
}

/// `next` of a status, stop or pause answer (and of a run/resume acknowledgement, whose
/// fields it shares): what moves the run described by `document` on.
pub(super) fn next_for_status(document: &Value) -> Value {
    let Some(run_id) = document["runId"].as_str() else {
        return Value::Null;
    };
    let status = document["status"].as_str().unwrap_or_default();
    if let Some(request) = document.pointer("/setup/request") {
        return json!({
            "action": "setup-response",
            "runId": run_id,
            "setupId": request["id"],
            "response": {"action": "accept", "content": {"approve": true}},
        });
    }
    if let Some(permission) = document["pendingPermissions"]
        .as_array()
        .and_then(|list| list.first())
    {
        let options: Vec<&str> = permission["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|option| option["optionId"].as_str())
            .collect();
        return json!({
            "action": "permissions-response",
            "runId": run_id,
            "permissionId": permission["permissionId"],
            "response": {"outcome": {"outcome": "selected", "optionId": format!("<one of: {}>", options.join(", "))}},
        });
    }
    match status {
        "completed" if document.get("resultUri").is_some() => json!({
            "action": "result",
            "runId": run_id,
            "offset": 0,
            "maxBytes": RESULT_PAGE_BYTES,
        }),
        "completed" => Value::Null,
        "aborted" if document["reason"] == "setup_declined" => Value::Null,
        "paused" | "failed" | "aborted" => match document.pointer("/outcome/checkpointContext") {
            Some(context) => {
                let answer = match context["kind"].as_str() {
                    Some("input") => "<the answer text>".to_owned(),
                    Some("select") => format!(
                        "<one of: {}>",
                        context["choices"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|choice| match choice {
                                Value::String(text) => text.clone(),
                                other => other.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => "<true or false>".to_owned(),
                };
                let mut replies = serde_json::Map::new();
                replies.insert(context["callIndex"].to_string(), Value::String(answer));
                json!({"action": "resume", "runId": run_id, "checkpointReplies": replies})
            }
            None => match document.pointer("/outcome/budgetContext") {
                // The user decides how much more the run may spend.
                Some(budget) if budget["field"].is_string() => {
                    let mut next = json!({"action": "resume", "runId": run_id});
                    next[budget["field"].as_str().unwrap_or_default()] = Value::String(format!(
                        "<a limit above {}, the spend so far>",
                        budget["spent"]
                    ));
                    next
                }
                _ => json!({"action": "resume", "runId": run_id}),
            },
        },
        _ => json!({"action": "status", "runId": run_id}),
    }
}

/// `next` of a result page: the following page, or nothing after the last. Its size is the
/// one asked for, but never more than [`RESULT_PAGE_BYTES`].
pub(super) fn next_for_result(page: &Value, max_bytes: usize) -> Value {
    if page["hasMore"] != true {
        return Value::Null;
    }
    json!({
        "action": "result",
        "runId": page["runId"],
        "offset": page["endOffset"],
        "maxBytes": max_bytes.min(RESULT_PAGE_BYTES),
    })
}

/// A result page with its `next` ahead of its `chunk`, which comes last: a host that cuts a
/// page still shows where the following one starts.
pub(super) fn page_with_next(page: Value, next: Value) -> Value {
    let Value::Object(fields) = page else {
        return page;
    };
    let mut ordered = serde_json::Map::with_capacity(fields.len() + 1);
    let mut chunk = None;
    for (key, value) in fields {
        if key == "chunk" {
            chunk = Some(value);
        } else {
            ordered.insert(key, value);
        }
    }
    ordered.insert("next".to_owned(), next);
    if let Some(chunk) = chunk {
        ordered.insert("chunk".to_owned(), chunk);
    }
    Value::Object(ordered)
}

/// `document` with `lead` first, in that order, and then its other fields in their own order.
/// A lead value of `null` or absent from `document` still takes its place when given here.
pub(super) fn lead_with(document: Value, lead: Vec<(&str, Value)>) -> Value {
    let Value::Object(fields) = document else {
        return document;
    };
    let mut ordered = serde_json::Map::with_capacity(fields.len() + lead.len());
    for (key, value) in lead {
        ordered.insert(key.to_owned(), value);
    }
    for (key, value) in fields {
        if !ordered.contains_key(&key) {
            ordered.insert(key, value);
        }
    }
    Value::Object(ordered)
}

/// The bytes of `value` as JSON text (`JSON.stringify`), counted without building the text.
pub(super) fn json_bytes(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page names the following one ahead of its chunk, which comes last, at no more than
    /// the page size every host shows whole; the last page names none.
    #[test]
    fn a_result_page_names_the_next_page_before_its_chunk() {
        let page = json!({"action": "result", "runId": "ma-b", "totalBytes": 20000, "offset": 0,
            "endOffset": 16384, "hasMore": true, "chunk": "x"});
        let next = next_for_result(&page, 16_384);
        assert_eq!(
            next,
            json!({"action": "result", "runId": "ma-b", "offset": 16384, "maxBytes": RESULT_PAGE_BYTES})
        );
        assert_eq!(
            next_for_result(&page, 100)["maxBytes"],
            100,
            "a smaller page stays"
        );
        let shaped = page_with_next(page, next);
        let keys: Vec<&str> = shaped
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "action",
                "runId",
                "totalBytes",
                "offset",
                "endOffset",
                "hasMore",
                "next",
                "chunk"
            ]
        );
        let last = json!({"runId": "ma-b", "endOffset": 20000, "hasMore": false, "chunk": "y"});
        assert_eq!(next_for_result(&last, 4096), Value::Null);
    }

    /// A run a generation ended or paused shows its summary under the run line: the calls
    /// broken down, then what each backend and model spent.
    #[test]
    fn the_status_text_shows_the_summary() {
        let document = json!({
            "runId": "ma-b", "status": "paused", "reason": "requested", "workflowName": "w",
            "summary": {"durationMs": 125000, "generation": 2,
                "calls": {"total": 4, "live": 1, "replayed": 3, "failed": 1, "retried": 0},
                "usage": [{"backend": "claude", "model": "sonnet", "calls": 2, "inputTokens": 900,
                           "outputTokens": 120, "totalTokens": 1020}],
                "total": {"inputTokens": 900, "outputTokens": 120, "totalTokens": 1020}},
            "calls": [],
        });
        let text = status(None, &document);
        assert!(
            text.contains("Run ma-b (w): paused (requested)\nSummary: 4 calls · 1.0k tok · 2m 05s (generation 2: 1 live, 3 replayed, 1 failed, 0 retried)\n  claude sonnet: 2 calls, 1.0k tok (900 in, 120 out)\n"),
            "{text}"
        );
        let running = json!({"runId": "ma-b", "status": "running", "calls": []});
        assert!(!status(None, &running).contains("Summary"));
    }

    /// An isolated call's branch and diff size follow its line, and the base the run's
    /// calls start from comes before them; a call without changes reads as before.
    #[test]
    fn the_status_text_shows_isolated_calls_branches_and_the_base() {
        let document = json!({
            "runId": "ma-b", "status": "completed", "workflowName": "w",
            "workspace": {"repository": "/repo", "commit": "0123456789abcdef0123456789abcdef01234567", "dirty": true},
            "calls": [
                {"index": 0, "label": "fix", "changes": {"branch": "agentprism/ma-b/0-fix",
                    "baseCommit": "0123456789abcdef0123456789abcdef01234567",
                    "headCommit": "89abcdef0123456789abcdef0123456789abcdef",
                    "filesChanged": 3, "insertions": 20, "deletions": 4}},
                {"index": 1, "label": "idle", "changes": {"branch": null,
                    "baseCommit": "0123456789abcdef0123456789abcdef01234567",
                    "headCommit": "0123456789abcdef0123456789abcdef01234567",
                    "filesChanged": 0, "insertions": 0, "deletions": 0}},
                {"index": 2, "label": "shared"},
            ],
            "truncation": {"calls": {"total": 3}},
        });
        let text = status(None, &document);
        assert!(
            text.contains("Isolated calls start from commit 0123456 of /repo (the tree's uncommitted changes at admission are not in it)"),
            "{text}"
        );
        assert!(
            text.contains("  #0 fix [done]\n    changes: agentprism/ma-b/0-fix  3 files changed, +20 -4  0123456..89abcde\n"),
            "{text}"
        );
        assert!(
            text.contains("  #1 idle [done]\n    changes: no changes (base 0123456)\n"),
            "{text}"
        );
        assert!(text.contains("  #2 shared [done]\n"), "{text}");
        assert_eq!(text.matches("changes:").count(), 2, "{text}");
        let plain = json!({"runId": "ma-b", "status": "completed", "calls": []});
        assert!(!status(None, &plain).contains("Isolated"));
    }

    #[test]
    fn json_bytes_counts_the_text_json_writes() {
        let value = json!({"a": "é \" \\ \n 🙂", "b": [1, 2.5, null, true]});
        assert_eq!(json_bytes(&value), value.to_string().len());
    }

    /// A permission waiting for an answer comes before polling: the run cannot go on
    /// without it, and the option ids the request advertised are the choice.
    #[test]
    fn a_pending_permission_is_the_next_call() {
        let document = json!({
            "runId": "ma-b", "status": "running",
            "pendingPermissions": [{"permissionId": "p-1", "callIndex": 0,
                "options": [{"optionId": "allow"}, {"optionId": "reject"}]}],
        });
        assert_eq!(
            next_for_status(&document),
            json!({"action": "permissions-response", "runId": "ma-b", "permissionId": "p-1",
                   "response": {"outcome": {"outcome": "selected", "optionId": "<one of: allow, reject>"}}})
        );
        let running = json!({"runId": "ma-b", "status": "running"});
        assert_eq!(
            next_for_status(&running),
            json!({"action": "status", "runId": "ma-b"})
        );
        let interrupted = json!({"runId": "ma-b", "status": "paused", "reason": "interrupted"});
        assert_eq!(
            next_for_status(&interrupted),
            json!({"action": "resume", "runId": "ma-b"})
        );
        let input = json!({"runId": "ma-b", "status": "paused",
            "outcome": {"checkpointContext": {"callIndex": 3, "kind": "input"}}});
        assert_eq!(
            next_for_status(&input),
            json!({"action": "resume", "runId": "ma-b", "checkpointReplies": {"3": "<the answer text>"}})
        );
        let budget = json!({"runId": "ma-b", "status": "paused", "reason": "budget",
            "outcome": {"budgetContext": {"field": "tokenBudget", "spent": 18, "limit": 14}}});
        assert_eq!(
            next_for_status(&budget),
            json!({"action": "resume", "runId": "ma-b", "tokenBudget": "<a limit above 18, the spend so far>"})
        );
    }
}
