//! What a host's environment does to the agents of the daemon it starts, and what a model
//! driving the tool through a real shim is told to do next (`structuredContent.next`), end
//! to end: a shim launched as Claude Code launches it, the daemon it spawns, the mock agent.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::shim::{World, run_id_of};
use crate::support::context::DEADLINE;

/// What Claude Code exports to the MCP servers it launches, about its own session.
const HOST_MARKERS: [(&str, &str); 7] = [
    ("CLAUDECODE", "1"),
    ("CLAUDE_CODE_ENTRYPOINT", "cli"),
    ("CLAUDE_CODE_SESSION_ID", "host-session-1"),
    ("CLAUDE_CODE_SESSION_ACCESS_TOKEN", "host-session-token"),
    ("CLAUDE_CODE_EXECPATH", "/opt/claude/bin/claude"),
    ("CLAUDE_CODE_SSE_PORT", "41234"),
    ("CLAUDE_AGENT_SDK_VERSION", "0.2.0"),
];

/// What the user set: credentials and Claude Code settings, which agents need.
const USER_SETTINGS: [(&str, &str); 4] = [
    ("ANTHROPIC_API_KEY", "sk-user-key"),
    ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
    ("ANTHROPIC_AUTH_TOKEN", "user-auth-token"),
    ("CLAUDE_CODE_USE_BEDROCK", "0"),
];

/// Follows `next` from an acknowledgement until it names no more `status` calls.
fn follow_next(shim: &mut crate::shim::Shim, mut answer: Value, mut id: i64) -> Value {
    let started = Instant::now();
    loop {
        let next = answer["structuredContent"]["next"].clone();
        if next["action"] != "status" {
            return answer;
        }
        assert!(started.elapsed() < DEADLINE, "never settled: {answer:#}");
        std::thread::sleep(Duration::from_millis(50));
        id += 1;
        answer = shim.call_workflow(id, next);
    }
}

#[test]
fn host_session_markers_never_reach_agents_but_credentials_do() {
    let world = World::new();
    let extra: Vec<(&str, &str)> = HOST_MARKERS.iter().chain(&USER_SETTINGS).copied().collect();
    let mut shim = crate::shim::Shim::start_with(&world.context, &extra);
    shim.initialize();
    let names: Vec<&str> = extra.iter().map(|(name, _)| *name).collect();
    let script = format!(
        "export const meta = {{ name: 'env', description: 'd', model: 'mock' }};\nreturn await agent('x\\n@mock env {}');\n",
        names.join(" ")
    );
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": script}),
    );
    let run_id = run_id_of(&ack);
    // The daemon itself did inherit the host's markers from its first shim.
    let environ = std::fs::read(format!("/proc/{}/environ", world.pointer_pid())).unwrap();
    assert!(
        crate::shim::contains(&environ, b"CLAUDECODE=1\0"),
        "the test needs a daemon started with the host's markers"
    );
    let settled = follow_next(&mut shim, ack, 10);
    assert_eq!(
        settled["structuredContent"]["status"], "completed",
        "{settled:#}"
    );
    let mut next = settled["structuredContent"]["next"].clone();
    assert_eq!(
        next,
        json!({"action": "result", "runId": run_id, "offset": 0, "maxBytes": 4096})
    );
    let mut result = String::new();
    for id in 100.. {
        let page = shim.call_workflow(id, next);
        result.push_str(page["structuredContent"]["chunk"].as_str().unwrap());
        next = page["structuredContent"]["next"].clone();
        if next.is_null() {
            break;
        }
    }
    // The result is the agent's reply, a JSON string holding `{name: value}`.
    let reply: Value = serde_json::from_str(&result).unwrap();
    let seen: Value = serde_json::from_str(reply.as_str().unwrap()).unwrap();
    for (name, _) in HOST_MARKERS {
        assert_eq!(
            seen[name],
            Value::Null,
            "{name} reached the agent: {seen:#}"
        );
    }
    for (name, value) in USER_SETTINGS {
        assert_eq!(seen[name], value, "{name} must reach the agent: {seen:#}");
    }
}

/// Through a real shim and daemon, a probe slower than the probe limit is a tool error that
/// names the backend and the limit, and nothing is stored.
#[test]
fn a_probe_slower_than_the_limit_is_a_tool_error_through_the_daemon() {
    let world = World::with(|context| {
        context
            .with_mock_backend(json!({"MOCK_ACP_SESSION_DELAY_MS": "5000"}))
            .set("AGENTPRISM_PROBE_TIMEOUT_MS", "300")
    });
    let mut shim = world.shim();
    shim.initialize();
    let script = "export const meta = { name: 'slow', description: 'd', model: 'mock' };\nreturn await agent('x');\n";
    let answer = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": script}),
    );
    assert_eq!(answer["isError"], true, "{answer:#}");
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("probe of backend mock") && text.contains("300 ms"),
        "{text}"
    );
    let listed = world.context.run(&["runs", "--all", "--json"]);
    assert_eq!(listed.json(), json!([]), "nothing may be stored");
}
