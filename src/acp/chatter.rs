//! Adapter chatter: text an adapter sends as `agent_message_chunk` that is not the model's
//! answer — warnings, retry and compaction progress, startup banners. Left in, it becomes
//! (part of) the call's result, so each form the built-in adapters were seen to send is
//! recognised here and turned into an [`AgentUpdate::Notice`], which the run keeps as an
//! `agentNotice` event instead.
//!
//! Matching is by whole chunk: every form below is sent as a chunk of its own, while a
//! model's answer streams in arbitrary pieces, so a pattern anchored at a chunk's start and
//! specific to one adapter's wording does not eat an answer. `docs/adapters.md` lists the
//! forms with the adapter versions they were seen in.

use serde_json::Value;

/// Whether a message chunk is adapter chatter rather than the agent's answer. `update` is
/// the raw `session/update` object, for markers an adapter puts in `_meta`.
pub(crate) fn is_chatter(text: &str, update: &Value) -> bool {
    // pi-acp marks forwarded pi notifications.
    if update.pointer("/_meta/piAcp/notify").is_some() {
        return true;
    }
    let text = text.trim();
    // codex-acp 0.16, before every turn on a model it has no metadata for.
    (text.starts_with("Model metadata for `") && text.contains("not found"))
        // pi-acp 0.0.34: pi's auto-retry and auto-compaction, and its startup banner.
        || text == "Retrying..."
        || (text.starts_with("Retrying (attempt ") && text.ends_with("s)..."))
        || text == "Retry finished, resuming."
        || text == "Context nearing limit, running automatic compaction..."
        || text.starts_with("Automatic compaction finished; context was summarized")
        || is_pi_banner(text)
        || (text.starts_with("Pi ") && text.ends_with("request is not supported in ACP yet; cancelling it."))
        // claude-agent-acp 0.101: Claude Code's notices, appended after the reply.
        || text.starts_with("**Warning:** ")
}

/// pi-acp's startup info: `pi v1.6.0` then `---`, possibly with an update notice between.
fn is_pi_banner(text: &str) -> bool {
    let mut lines = text.lines();
    let Some(first) = lines.next() else {
        return false;
    };
    let version = first.strip_prefix("pi v").unwrap_or_default();
    !version.is_empty()
        && version
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '.' || ch == '-')
        && text.lines().any(|line| line.trim() == "---")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_adapters_observed_chatter_is_recognised() {
        let plain = json!({"sessionUpdate": "agent_message_chunk"});
        for text in [
            "Model metadata for `mock-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.",
            "Retrying (attempt 1/3, waiting 2s)...",
            "Retrying...",
            "Retry finished, resuming.",
            "Context nearing limit, running automatic compaction...",
            "Automatic compaction finished; context was summarized to continue the session.",
            "pi v1.6.0\n---\n",
            "pi v1.6.0\nNew version available: v1.7.0\n---\n",
            "Pi editor UI request is not supported in ACP yet; cancelling it.",
            "**Warning:** We're changing auto mode to no longer charge for classifier requests in Claude Code.",
        ] {
            assert!(is_chatter(text, &plain), "{text:?}");
        }
        let notify = json!({"sessionUpdate": "agent_message_chunk", "_meta": {"piAcp": {"notify": {"level": "info"}}}});
        assert!(is_chatter("anything", &notify));
    }

    #[test]
    fn answers_are_not_chatter() {
        let plain = json!({"sessionUpdate": "agent_message_chunk"});
        for text in [
            "MOCK-REPLY: Say hello",
            "{\"ok\": true}",
            "Retrying is a good idea here.",
            "pi v2 is what you asked about",
            "Warning: the tests are flaky",
            "The model metadata for `x` was not found in the file.",
        ] {
            assert!(!is_chatter(text, &plain), "{text:?}");
        }
    }
}
