//! Reopening a paused call's session when its run resumes, through the real CLI and the mock
//! agent: the agent reopens the recorded session and gets the continuation prompt, or, when it
//! cannot reopen sessions, a fresh session and the original prompt.

use serde_json::{Value, json};

use crate::support::context::{TestContext, prompts_in_log};

const SCRIPT: &str = "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\nreturn await agent('the task\\n@mock usage_limit');\n";

const CONTINUATION: &str = "You were interrupted. Continue the task you were given; when done, give your final answer as asked.";

/// Every inbound message of `method` in the mock's log.
fn messages(ctx: &TestContext, method: &str) -> Vec<Value> {
    std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == method)
        .collect()
}

/// The methods the mock received, in order, for failure messages.
fn trail(ctx: &TestContext) -> String {
    std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|message| format!("{} {}", message["method"], message["params"]["sessionId"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The methods the mock process of the resume received: those after the second `initialize`
/// (the first process also answered the admission probe).
fn resumed_methods(ctx: &TestContext) -> Vec<String> {
    let methods: Vec<String> = std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|message| message["method"].as_str().map(str::to_owned))
        .collect();
    let second = methods
        .iter()
        .enumerate()
        .filter(|(_, method)| *method == "initialize")
        .nth(1)
        .map_or(methods.len(), |(at, _)| at);
    methods[second..].to_vec()
}

/// Runs [`SCRIPT`] until its usage-limit pause; returns the run id and the paused session's id.
fn paused_run(ctx: &TestContext) -> (String, String) {
    let path = ctx.write("wf.js", SCRIPT);
    let paused = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    assert_eq!(ctx.status(&run_id)["reason"], "usage_limit");
    let prompts = messages(ctx, "session/prompt");
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let session_id = prompts[0]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    (run_id, session_id)
}

#[test]
fn a_usage_paused_call_reopens_its_session_with_the_continuation_prompt() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    // The resumed run talks to a new mock process, which reopens the id as an agent that
    // keeps its sessions on disk would.
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let (run_id, session_id) = paused_run(&ctx);

    let done = ctx.run(&["resume", &run_id]);
    assert_eq!(done.code(), 0, "{}\n{}", done.stderr, trail(&ctx));
    let reopens: Vec<Value> = ["session/resume", "session/load"]
        .iter()
        .flat_map(|method| messages(&ctx, method))
        .collect();
    assert_eq!(reopens.len(), 1, "{reopens:?}");
    assert_eq!(reopens[0]["params"]["sessionId"], session_id.as_str());
    assert_eq!(
        resumed_methods(&ctx),
        [
            "initialize",
            "session/resume",
            "session/prompt",
            "session/close"
        ],
        "{}",
        trail(&ctx)
    );
    let prompts = prompts_in_log(&ctx, "agent.log");
    assert_eq!(
        prompts.last().map(String::as_str),
        Some(CONTINUATION),
        "{prompts:?}"
    );
    let last_prompt = messages(&ctx, "session/prompt").pop().unwrap();
    assert_eq!(last_prompt["params"]["sessionId"], session_id.as_str());
    assert_eq!(done.json(), json!(format!("ECHO: {CONTINUATION}")));
}

#[test]
fn without_the_capability_the_call_starts_fresh_with_its_original_prompt() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({
        "MOCK_ACP_LOG": log,
        "MOCK_ACP_LOAD_UNKNOWN": "1",
        "MOCK_ACP_LOAD_SESSION": "0",
    }));
    let (run_id, _) = paused_run(&ctx);

    let again = ctx.run(&["resume", &run_id]);
    assert_eq!(
        again.code(),
        3,
        "the original prompt hits the limit again: {}",
        again.stderr
    );
    assert!(messages(&ctx, "session/resume").is_empty());
    assert!(messages(&ctx, "session/load").is_empty());
    assert_eq!(
        resumed_methods(&ctx),
        [
            "initialize",
            "session/new",
            "session/prompt",
            "session/close"
        ],
        "{}",
        trail(&ctx)
    );
    let prompts = prompts_in_log(&ctx, "agent.log");
    assert_eq!(prompts, vec!["the task\n@mock usage_limit"; 2]);
}

#[test]
fn continue_prompt_replaces_the_default_continuation() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let script = SCRIPT.replace(
        "@mock usage_limit')",
        "@mock usage_limit', {continuePrompt: 'carry on'})",
    );
    let path = ctx.write("wf.js", &script);
    let paused = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let done = ctx.run(&["resume", &paused.run_id()]);
    assert_eq!(done.code(), 0, "{}\n{}", done.stderr, trail(&ctx));
    assert_eq!(done.json(), json!("ECHO: carry on"));
}
