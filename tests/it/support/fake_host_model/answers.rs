//! The plans of `tests/it/host_answers.rs`. `FAKE-PLAN: page` runs the plan's script, polls
//! `status` and then pages the result, every call taken from what the host kept of the last
//! answer (a `next` call in it, or the status it states), as a model that sees only that
//! would. `FAKE-PLAN: channel` runs the script and ends its turn; when a channel message of
//! the server starts a new turn, it answers with it.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Conversation, ListedTool, Move, State, run_id_in, run_status_in};

/// How Claude Code opens a channel message it puts in the conversation.
const CHANNEL_OPENING: &str = "<channel source=\"";
/// How the fake ends the turn of `FAKE-PLAN: channel` after `run`.
const CHANNEL_WAITING: &str = "FAKE-WAITING";

impl State {
    /// The move of a `host_answers.rs` plan, or `None` when the prompt names another plan.
    pub(super) fn decide_answers(
        &self,
        conversation: &Conversation,
        tool: &ListedTool,
    ) -> Option<(Move, Duration)> {
        let named = |plan: &str| {
            let wanted = format!("FAKE-PLAN: {plan}");
            conversation.texts.iter().any(|text| text.contains(&wanted))
        };
        let workflow = |input: Value| Move::Call {
            name: tool.name.clone(),
            namespace: tool.namespace.clone(),
            input,
        };
        let last = conversation
            .calls
            .iter()
            .rev()
            .find(|call| self.is_workflow(&call.name, call.namespace.as_deref()));
        let now = Duration::ZERO;
        let channel = named("channel");
        if !channel && !named("page") {
            return None;
        }
        let Some(last) = last else {
            return Some((workflow(self.plan.run_arguments.clone()), now));
        };
        let Some(output) = &last.output else {
            return Some(self.confused(&format!("no output for call {}", last.id)));
        };
        let action = last.input["action"].as_str().unwrap_or_default();
        let run_id = last.input["runId"].as_str().unwrap_or_default().to_owned();
        if channel {
            if let Some(message) = conversation
                .texts
                .iter()
                .find(|text| text.contains(CHANNEL_OPENING))
            {
                return Some((Move::Text(format!("FAKE-DONE channel: {message}")), now));
            }
            // The turn ends after `run`; the channel message starts the next one.
            return Some(match action {
                // Over 2026-07-28 Claude Code makes `run` a task and says so instead.
                "run" => (Move::Text(CHANNEL_WAITING.to_owned()), now),
                _ => self.confused(&format!("an output for an action it never asked: {action}")),
            });
        }
        Some(match action {
            "run" => match run_id_in(output) {
                Some(run_id) => (workflow(json!({"action": "status", "runId": run_id})), now),
                None => self.confused(&format!("no run id in the run output: {output}")),
            },
            "status" => match (next_call_in(output, "result"), stated_status(output)) {
                (Some(next), _) => (workflow(next), now),
                (None, Some(status))
                    if !matches!(status.as_str(), "completed" | "failed" | "aborted") =>
                {
                    (
                        workflow(json!({"action": "status", "runId": run_id})),
                        Duration::from_millis(250),
                    )
                }
                (None, Some(status)) => self.confused(&format!(
                    "the status output says {status} but names no result call: {}",
                    glimpse(output)
                )),
                (None, None) => self.confused(&format!(
                    "the status output says nothing of the run's status: {}",
                    glimpse(output)
                )),
            },
            "result" => match next_call_in(output, "result") {
                Some(next) => (workflow(next), now),
                None if says(output, "\"hasMore\":false") => {
                    (Move::Text(format!("FAKE-DONE {run_id}")), now)
                }
                None => self.confused(&format!(
                    "a result page with neither a next call nor its end: {}",
                    glimpse(output)
                )),
            },
            other => self.confused(&format!("an output for an action it never asked: {other}")),
        })
    }
}

/// The first `workflow` call for `action` written out in `output` (a `next`, or a call a text
/// spells out): a JSON object with that `action`, a `runId` and nothing but call arguments.
/// A host that shows the answer inside a JSON string escapes its quotes; that is undone first.
pub fn next_call_in(output: &str, action: &str) -> Option<Value> {
    let unescaped;
    let text = if output.contains("{\\\"action\\\"") {
        unescaped = output.replace("\\\"", "\"");
        &unescaped
    } else {
        output
    };
    let arguments = ["action", "runId", "offset", "maxBytes"];
    text.match_indices('{').find_map(|(at, _)| {
        let value = serde_json::Deserializer::from_str(&text[at..])
            .into_iter::<Value>()
            .next()?
            .ok()?;
        let object = value.as_object()?;
        let is_call = object.get("action")?.as_str()? == action
            && object.get("runId")?.is_string()
            && object.keys().all(|key| arguments.contains(&key.as_str()));
        is_call.then_some(value)
    })
}

/// The run status `output` states: its JSON document's, its text's, or the first `"status"`
/// value in what is left of a document a host cut.
pub fn stated_status(output: &str) -> Option<String> {
    if let Some(status) = run_status_in(output) {
        return Some(status);
    }
    let unescaped = output.replace("\\\"", "\"");
    let (_, rest) = unescaped.split_once("\"status\":\"")?;
    let status: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    (!status.is_empty()).then_some(status)
}

/// Whether `output` contains `fragment`, quoted as is or escaped inside a JSON string.
fn says(output: &str, fragment: &str) -> bool {
    output.contains(fragment) || output.contains(&fragment.replace('"', "\\\""))
}

/// The start and end of a long output, for a diagnostic.
fn glimpse(output: &str) -> String {
    if output.len() <= 1200 {
        return output.to_owned();
    }
    let head: String = output.chars().take(600).collect();
    let tail: String = output
        .chars()
        .rev()
        .take(600)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{head} […{} bytes…] {tail}", output.len())
}
