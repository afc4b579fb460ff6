//! What to do about agent failures whose cause is the machine's setup rather than the
//! agent: each known wording is recognised in the failure's text (the adapter's message and
//! its stderr) and the failure gets a sentence naming the fix. The only one today is Claude
//! Code's refusal to skip permission prompts as root, which `docs/adapters.md` ("Running as
//! root") describes.

/// Claude Code's words when it is asked to skip permission prompts as uid 0 without
/// `IS_SANDBOX=1` (the full line ends "for security reasons").
const ROOT_REFUSAL: &str = "cannot be used with root/sudo privileges";

/// The advice for a failure whose message and stderr are `texts`, if one applies.
pub(crate) fn for_failure(texts: &[&str]) -> Option<&'static str> {
    texts
        .iter()
        .any(|text| text.contains(ROOT_REFUSAL))
        .then_some(ROOT_ADVICE)
}

/// Says what the variable means, where an agent's environment comes from (the daemon's,
/// fixed when the daemon starts), and the way to give it to the claude backend alone.
const ROOT_ADVICE: &str = "Claude Code refuses to run as root unless IS_SANDBOX=1 is in its \
environment (declare it only on a machine that is a sandbox). Agents inherit the daemon's \
environment, fixed when the daemon starts: set IS_SANDBOX=1 where the daemon gets it (the `env` \
of the MCP server entry that starts agentprism-workflow, or the shell that runs `agentprism \
daemon run` or `agentprism daemon install`), then run `agentprism daemon stop` so the next start \
picks it up; or give it to the claude backend alone with AGENTPRISM_CLAUDE_ACP_CMD=env and \
AGENTPRISM_CLAUDE_ACP_ARGS=\"IS_SANDBOX=1 claude-agent-acp\". docs/adapters.md, \"Running as \
root\", has the details";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_root_refusal_gets_the_sandbox_advice() {
        let stderr = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons";
        let advice = for_failure(&["Internal error", stderr]).expect("advice");
        assert!(advice.contains("IS_SANDBOX=1"), "{advice}");
        assert!(advice.contains("AGENTPRISM_CLAUDE_ACP_CMD=env"), "{advice}");
        assert_eq!(for_failure(&["Internal error", "permission denied"]), None);
    }
}
