//! The automatic messages of a run: what the panel may inject into the conversation and what
//! a Claude Code channel notification carries, from one function over the `workflow` tool's
//! status document, so both say the same words under the same ids.
//!
//! Only required input and terminal outcomes make a message (the seed's table): a pending
//! setup approval, a parked permission request, a checkpoint pause, any other pause, and a
//! terminal outcome. Phase starts, progress and usage stay quiet. Each message's id is
//! derived from what it is about, never from when it was seen, so every view and every
//! session computes the same id for the same event:
//!
//! | kind | `eventId` |
//! |---|---|
//! | `setup` | `setup-<setupId>` |
//! | `permission` | `permission-<permissionId>` |
//! | `checkpoint` | `checkpoint-<generation>-<callIndex>` |
//! | `paused` | `paused-<generation>-<reason>` |
//! | `terminal` | `terminal-<generation>-<status>` |
//!
//! A resume starts a new generation, so a run that pauses or ends again makes a new message.
//! Text that comes from the script or an agent (a checkpoint prompt, a call label, a tool
//! title, an error message) is cut to [`QUOTED_CHARS`] characters, control characters
//! replaced, so a message stays small and on its own lines.

use serde_json::Value;

/// The longest quoted text (checkpoint prompt, label, tool title, error) in a message.
pub(crate) const QUOTED_CHARS: usize = 400;

/// One automatic message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AutoMessage {
    /// Stable per event (the table above).
    pub(crate) event_id: String,
    /// `terminal`, `checkpoint`, `paused`, `permission` or `setup`.
    pub(crate) kind: &'static str,
    /// The run's status when the message was made.
    pub(crate) status: String,
    /// The text shown to the model.
    pub(crate) content: String,
}

/// The automatic messages a run's status document calls for, setup and permissions first
/// (they block the run), then a pause or the terminal outcome.
pub(crate) fn automatic_messages(status: &Value) -> Vec<AutoMessage> {
    let run = Run::of(status);
    let mut messages = Vec::new();
    if let Some(request) = status.pointer("/setup/request")
        && let Some(setup_id) = request.get("id").and_then(Value::as_str)
    {
        messages.push(run.message(
            format!("setup-{setup_id}"),
            "setup",
            format!(
                "Workflow run {id} ({name}) waits for approval of the agent backends its script \
                 declares. Review them, then answer with the workflow tool: action \
                 \"setup-response\", runId \"{id}\", setupId \"{setup_id}\".",
                id = run.id,
                name = run.name,
            ),
        ));
    }
    let permissions = status
        .get("pendingPermissions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for permission in permissions {
        if let Some(message) = run.permission(permission) {
            messages.push(message);
        }
    }
    match run.status {
        "paused" => messages.push(run.pause(status)),
        "completed" | "failed" | "aborted" => messages.push(run.terminal(status)),
        _ => {}
    }
    messages
}

/// What every message of one run names.
struct Run<'a> {
    id: &'a str,
    name: String,
    status: &'a str,
    generation: u64,
}

impl Run<'_> {
    fn of(status: &Value) -> Run<'_> {
        Run {
            id: status["runId"].as_str().unwrap_or_default(),
            name: quoted(status["workflowName"].as_str().unwrap_or_default()),
            status: status["status"].as_str().unwrap_or_default(),
            generation: status["generation"].as_u64().unwrap_or_default(),
        }
    }

    fn message(&self, event_id: String, kind: &'static str, content: String) -> AutoMessage {
        AutoMessage {
            event_id,
            kind,
            status: self.status.to_owned(),
            content,
        }
    }

    fn permission(&self, permission: &Value) -> Option<AutoMessage> {
        let permission_id = permission.get("permissionId")?.as_str()?;
        let options: Vec<&str> = permission["options"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|option| option["optionId"].as_str())
            .collect();
        let tool = permission
            .pointer("/toolCall/title")
            .and_then(Value::as_str)
            .map(|title| format!(" to use {:?}", quoted(title)))
            .unwrap_or_default();
        Some(self.message(
            format!("permission-{permission_id}"),
            "permission",
            format!(
                "Workflow run {id} ({name}): agent {label:?} (call {index}) asks for permission{tool}. \
                 Answer with the workflow tool: action \"permissions-response\", runId \"{id}\", \
                 permissionId \"{permission_id}\", one of the options {options}.",
                id = self.id,
                name = self.name,
                label = quoted(permission["label"].as_str().unwrap_or_default()),
                index = permission["callIndex"],
                options = quoted(&options.join(", ")),
            ),
        ))
    }

    fn pause(&self, status: &Value) -> AutoMessage {
        let (id, name) = (self.id, &self.name);
        if let Some(checkpoint) = status.pointer("/outcome/checkpointContext") {
            let index = checkpoint["callIndex"].as_u64().unwrap_or_default();
            let prompt = quoted(checkpoint["prompt"].as_str().unwrap_or_default());
            let choices = checkpoint["choices"]
                .as_array()
                .map(|choices| {
                    let names: Vec<String> = choices
                        .iter()
                        .map(|choice| match choice.as_str() {
                            Some(text) => text.to_owned(),
                            None => choice.to_string(),
                        })
                        .collect();
                    format!(" (one of: {})", quoted(&names.join(", ")))
                })
                .unwrap_or_default();
            return self.message(
                format!("checkpoint-{}-{index}", self.generation),
                "checkpoint",
                format!(
                    "Workflow run {id} ({name}) waits at a checkpoint (call {index}): {prompt:?}{choices}. \
                     Answer with the workflow tool: action \"resume\", runId \"{id}\", \
                     checkpointReplies {{\"{index}\": <your answer>}}."
                ),
            );
        }
        let reason = status["reason"].as_str().unwrap_or("requested");
        if reason == "budget" {
            let limit = status
                .pointer("/outcome/budgetContext/message")
                .and_then(Value::as_str)
                .map(|message| format!(": {}", quoted(message)))
                .unwrap_or_default();
            return self.message(
                format!("paused-{}-{reason}", self.generation),
                "paused",
                format!(
                    "Workflow run {id} ({name}) paused because it reached its budget{limit} \
                     (reason \"budget\"). To go on, resume it with the workflow tool: action \"resume\", \
                     runId \"{id}\", and a higher tokenBudget or costBudgetUsd."
                ),
            );
        }
        // The reset time is the provider's word; `resumeAt` is when the run goes on by itself.
        let resumes = match status.pointer("/outcome/resumeAt").and_then(Value::as_str) {
            Some(at) => format!("; it resumes by itself at {at}"),
            None => String::new(),
        };
        let usage_limit = match status.pointer("/outcome/resetAt").and_then(Value::as_str) {
            Some(at) => format!(
                " because an agent backend hit its usage limit (it resets at {at}{resumes})"
            ),
            None => {
                " because an agent backend hit its usage limit (no reset time known)".to_owned()
            }
        };
        let why = match reason {
            "auth_required" => " because an agent backend's credentials are missing or expired",
            "usage_limit" => usage_limit.as_str(),
            "interrupted" => " because the process executing it ended",
            "requested" => " as requested",
            _ => "",
        };
        self.message(
            format!("paused-{}-{reason}", self.generation),
            "paused",
            format!(
                "Workflow run {id} ({name}) paused{why} (reason {reason:?}). When it can go on, \
                 resume it with the workflow tool: action \"resume\", runId \"{id}\"."
            ),
        )
    }

    fn terminal(&self, status: &Value) -> AutoMessage {
        let (id, name) = (self.id, &self.name);
        let content = match self.status {
            "completed" if status.get("resultUri").is_some() => format!(
                "Workflow run {id} ({name}) completed. Read its result with the workflow tool: \
                 action \"result\", runId \"{id}\"."
            ),
            "completed" => format!("Workflow run {id} ({name}) completed without a result value."),
            "failed" => {
                let code = status["errorCode"].as_str().unwrap_or("error");
                let message = status
                    .pointer("/outcome/error/message")
                    .and_then(Value::as_str)
                    .map(|text| format!(": {:?}", quoted(text)))
                    .unwrap_or_default();
                format!(
                    "Workflow run {id} ({name}) failed ({code}){message}. Its settled calls are \
                     kept: fix the cause and resume it with the workflow tool: action \"resume\", \
                     runId \"{id}\"."
                )
            }
            _ if status["reason"] == "setup_declined" => format!(
                "Workflow run {id} ({name}) was aborted: its backend approval was declined. \
                 Start a new run to be asked again."
            ),
            _ => format!("Workflow run {id} ({name}) was stopped."),
        };
        let content = match crate::model::EndSummary::of_status(status) {
            Some(summary) => format!("{content} Summary: {}.", summary.line_with_time()),
            None => content,
        };
        self.message(
            format!("terminal-{}-{}", self.generation, self.status),
            "terminal",
            content,
        )
    }
}

/// `text` cut to [`QUOTED_CHARS`] characters, control characters as spaces.
fn quoted(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(QUOTED_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(QUOTED_CHARS).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(extra: Value) -> Value {
        let mut status = json!({"runId": "mabc-def", "workflowName": "review", "status": "running", "generation": 2});
        for (key, value) in extra.as_object().unwrap() {
            status[key] = value.clone();
        }
        status
    }

    fn ids(status: &Value) -> Vec<(String, &'static str)> {
        automatic_messages(status)
            .into_iter()
            .map(|message| (message.event_id, message.kind))
            .collect()
    }

    #[test]
    fn a_running_run_without_pending_input_is_quiet() {
        assert!(automatic_messages(&document(json!({"currentPhase": "build"}))).is_empty());
        assert!(automatic_messages(&document(json!({"status": "pending"}))).is_empty());
    }

    #[test]
    fn each_kind_has_its_id_and_says_how_to_answer() {
        let setup = document(
            json!({"status": "pending", "setup": {"request": {"id": "s-1", "title": "t"}}}),
        );
        assert_eq!(ids(&setup), [("setup-s-1".to_owned(), "setup")]);
        assert!(
            automatic_messages(&setup)[0]
                .content
                .contains("\"setup-response\"")
        );

        let permission = document(
            json!({"pendingPermissions": [{"permissionId": "p-1", "callIndex": 3, "label": "fix", "toolCall": {"title": "rm -rf\nx"}, "options": [{"optionId": "allow"}, {"optionId": "deny"}]}]}),
        );
        let message = &automatic_messages(&permission)[0];
        assert_eq!(
            (message.event_id.as_str(), message.kind),
            ("permission-p-1", "permission")
        );
        assert!(
            message.content.contains("allow, deny"),
            "{}",
            message.content
        );
        assert!(!message.content.contains('\n'), "{}", message.content);

        let checkpoint = document(
            json!({"status": "paused", "reason": "checkpoint_required", "outcome": {"checkpointContext": {"callIndex": 1, "prompt": "go?", "choices": ["red", "blue"]}}}),
        );
        assert_eq!(
            ids(&checkpoint),
            [("checkpoint-2-1".to_owned(), "checkpoint")]
        );
        assert!(
            automatic_messages(&checkpoint)[0]
                .content
                .contains("one of: red, blue")
        );

        let budget = document(
            json!({"status": "paused", "reason": "budget", "outcome": {"budgetContext": {"field": "tokenBudget", "spent": 18, "limit": 14, "message": "the run reached its token budget: 18 of 14 tokens spent (tokenBudget)"}}}),
        );
        assert_eq!(ids(&budget), [("paused-2-budget".to_owned(), "paused")]);
        let content = &automatic_messages(&budget)[0].content;
        assert!(
            content.contains("18 of 14 tokens") && content.contains("higher tokenBudget"),
            "{content}"
        );

        let paused = document(json!({"status": "paused", "reason": "auth_required"}));
        assert_eq!(
            ids(&paused),
            [("paused-2-auth_required".to_owned(), "paused")]
        );

        for (status, extra) in [
            (
                "completed",
                json!({"resultUri": "workflow://runs/mabc-def/result"}),
            ),
            (
                "failed",
                json!({"errorCode": "script", "outcome": {"error": {"message": "boom"}}}),
            ),
            ("aborted", json!({})),
        ] {
            let mut terminal = document(extra);
            terminal["status"] = json!(status);
            let messages = automatic_messages(&terminal);
            assert_eq!(messages.len(), 1, "{status}");
            assert_eq!(messages[0].event_id, format!("terminal-2-{status}"));
            assert_eq!(messages[0].kind, "terminal");
            assert_eq!(messages[0].status, status);
        }
    }

    /// The message that a run ended says what it cost; a run without a summary (one that
    /// ended before any generation ran) says nothing of it.
    #[test]
    fn the_terminal_message_carries_the_summary() {
        let summary = json!({"durationMs": 8123, "generation": 2,
            "calls": {"total": 12, "live": 3, "replayed": 9, "failed": 0, "retried": 1},
            "usage": [], "total": {"inputTokens": 900, "outputTokens": 120, "totalTokens": 1020, "costUsd": 0.012}});
        let completed = document(json!({"status": "completed", "summary": summary}));
        let content = &automatic_messages(&completed)[0].content;
        assert!(
            content.ends_with(" Summary: 12 calls · 1.0k tok · $0.01 · 8.1s."),
            "{content}"
        );
        let stopped = document(json!({"status": "aborted"}));
        let content = &automatic_messages(&stopped)[0].content;
        assert!(!content.contains("Summary"), "{content}");
    }

    /// A usage-limit pause says when the limit resets, or that no time is known, and that the
    /// run resumes by itself only when that is scheduled.
    #[test]
    fn a_usage_limit_pause_says_when_the_limit_resets() {
        let known = document(
            json!({"status": "paused", "reason": "usage_limit", "outcome": {"resetAt": "2026-01-01T15:00:00.000Z"}}),
        );
        let content = &automatic_messages(&known)[0].content;
        assert!(
            content.contains("it resets at 2026-01-01T15:00:00.000Z"),
            "{content}"
        );
        assert!(!content.contains("by itself"), "{content}");
        let scheduled = document(
            json!({"status": "paused", "reason": "usage_limit", "outcome": {"resetAt": "2026-01-01T15:00:00.000Z", "resumeAt": "2026-01-01T15:00:02.500Z"}}),
        );
        let content = &automatic_messages(&scheduled)[0].content;
        assert!(
            content.contains("it resumes by itself at 2026-01-01T15:00:02.500Z"),
            "{content}"
        );
        let unknown = document(json!({"status": "paused", "reason": "usage_limit"}));
        let content = &automatic_messages(&unknown)[0].content;
        assert!(content.contains("no reset time known"), "{content}");
        assert!(content.contains("resume it"), "{content}");
        assert_eq!(
            ids(&unknown),
            [("paused-2-usage_limit".to_owned(), "paused")]
        );
    }

    #[test]
    fn quoted_text_is_bounded_at_its_edge() {
        let exact = "x".repeat(QUOTED_CHARS);
        assert_eq!(quoted(&exact), exact);
        let over = "x".repeat(QUOTED_CHARS + 1);
        assert_eq!(quoted(&over), format!("{exact}…"));
        assert_eq!(quoted("a\tb\u{7}"), "a b ");
    }
}
