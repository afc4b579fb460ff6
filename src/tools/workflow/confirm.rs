//! Asking an MCP client to confirm a run's size (`AGENTPRISM_CONFIRM_AGENTS`): a client of the
//! initialize era that declared `elicitation` gets a form with one boolean, `start`, on the
//! `tools/call` request's own stream; an accepted form with `start: true` confirms the run.
//! Other clients (no elicitation, or the 2026-07-28 era, which has no server-to-client
//! requests outside tasks) get the refusal, which names `maxAgents` as the way to confirm.

use std::time::Duration;

use serde_json::json;

use crate::mcp::handler::RequestContext;

/// How long the user has to answer the form before the run is refused.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// `Some(true)` when the user confirmed, `Some(false)` when they declined, cancelled or did not
/// answer in time; `None` when the client cannot be asked.
pub(super) async fn ask(ctx: &RequestContext, message: &str, agents: u32) -> Option<bool> {
    if ctx.era.is_modern() || !ctx.client_has(&["elicitation"]) {
        return None;
    }
    let reason = message.split("; confirm with").next().unwrap_or(message);
    let params = json!({
        "mode": "form",
        "message": format!("{reason}. Start the run?"),
        "requestedSchema": {
            "type": "object",
            "properties": {"start": {
                "type": "boolean",
                "title": format!("Start {agents} agent calls"),
                "default": false,
            }},
            "required": ["start"],
        },
    });
    let mut pending = ctx.notifier.request("elicitation/create", params)?;
    let answer = tokio::select! {
        answer = &mut pending.receiver => answer,
        () = ctx.cancel.cancelled() => return Some(false),
        () = tokio::time::sleep(ANSWER_DEADLINE) => return Some(false),
    };
    let Ok(Ok(answer)) = answer else {
        return Some(false);
    };
    Some(answer["action"] == "accept" && answer["content"]["start"] == true)
}
