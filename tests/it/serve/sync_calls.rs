//! Synchronous `tools/call`s of served workflows in both protocol eras, what they leave
//! behind (nothing: neither a listed run nor a stored one), the checkpoint workflow's tool
//! error, and terminal async runs staying pollable.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use super::{Served, copy_folder, fixtures, http, made_up_id, wait_until};
use crate::support::context::{DEADLINE, TestContext, finish_child, first_text};

/// The runs stored under a folder server's state folder, read by the CLI.
fn stored_runs(ctx: &TestContext, state: &Path) -> Vec<Value> {
    let child = ctx
        .command(&["runs", "--all", "--json"])
        .env("AGENTPRISM_PERSISTENCE_ROOT", state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentprism runs");
    let finished = finish_child(child, DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    finished.json().as_array().cloned().unwrap_or_default()
}

#[test]
fn synchronous_calls_answer_in_both_eras_and_leave_no_run_behind() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let state = ctx.path("serve-state");
    let served = Served::start(&ctx, &folder, &["--state-dir", state.to_str().unwrap()]);

    // Stateless (2026-07-28).
    let stateless = served.stateless();
    let tools = stateless.method("tools/list", json!({}));
    let echo = tools["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "echo"))
        .unwrap_or_else(|| panic!("no echo tool in {tools}"));
    assert_eq!(
        echo["_meta"]["mhl"]["run"]["tool"], "mhl_run_start",
        "{echo}"
    );
    let result = stateless.tool("echo", json!({"text": "stateless hello"}));
    assert_eq!(
        result["structuredContent"],
        json!({"result": {"echoed": "stateless hello"}}),
        "{result}"
    );
    assert_ne!(result["isError"], true, "{result}");
    let text: Value = serde_json::from_str(&first_text(&result)).unwrap();
    assert_eq!(text, json!({"echoed": "stateless hello"}));

    // A stateless request without its `_meta` (and no session) is refused with -32602.
    let bare = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}}});
    let reply = http(
        served.address,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        bare.to_string().as_bytes(),
    );
    assert_eq!(reply.json()["error"]["code"], -32602, "{reply:?}");
    assert_eq!(reply.json()["id"], 9);

    // A legacy session.
    let session = served.session(&[]);
    let result = session.tool("echo", json!({"text": "legacy hello"}));
    assert_eq!(
        result["structuredContent"],
        json!({"result": {"echoed": "legacy hello"}}),
        "{result}"
    );
    // Arguments are validated against the workflow's input schema.
    let invalid = session.tool("echo", json!({"words": 3}));
    assert_eq!(invalid["isError"], true, "{invalid}");

    // A checkpoint cannot be answered inside a tools/call.
    for caller in [&session, &stateless] {
        let gated = caller.tool("approval", json!({"request": "deploy"}));
        assert_eq!(gated["isError"], true, "{gated}");
        let message = first_text(&gated);
        assert!(
            message.contains("checkpoint") && message.contains("mhl_run_start"),
            "{message}"
        );
    }

    // None of those calls left a run: not listed, not stored.
    assert_eq!(session.method("run/list", json!({}))["runs"], json!([]));
    assert_eq!(stateless.method("run/list", json!({}))["runs"], json!([]));
    // One async run, so the store read below is known to see this server's runs.
    let run_id = session.start("echo", json!({"text": "kept"}));
    session.wait_state(&run_id, "completed");
    let stopped = served.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
    let stored = stored_runs(&ctx, &state);
    let ids: Vec<&str> = stored
        .iter()
        .filter_map(|run| run["runId"].as_str())
        .collect();
    assert_eq!(
        ids,
        vec![run_id.as_str()],
        "only the async run is stored: {stored:?}"
    );
}

#[test]
fn terminal_runs_stay_pollable_through_methods_tools_and_resources() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let served = Served::start(&ctx, &folder, &[]);
    let session = served.session(&[]);

    let started = session.tool(
        "mhl_run_start",
        json!({"name": "echo", "arguments": {"text": "poll me"}}),
    );
    assert_ne!(started["isError"], true, "{started}");
    let run_id = started["structuredContent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let links: Vec<&str> = started["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "resource_link")
        .filter_map(|item| item["uri"].as_str())
        .collect();
    let logs_uri = format!("mhl://run/{run_id}/logs");
    let result_uri = format!("mhl://run/{run_id}/result");
    assert_eq!(
        links,
        vec![logs_uri.as_str(), result_uri.as_str()],
        "{started}"
    );

    let done = session.wait_state(&run_id, "completed");
    assert_eq!(done["result"], json!({"echoed": "poll me"}), "{done}");
    assert_eq!(done["name"], "echo");
    assert!(done.get("resumable").is_none(), "{done}");
    // Polled again, through each face, it answers the same.
    for _ in 0..3 {
        assert_eq!(session.status(&run_id), done);
    }
    let by_tool = session.tool("mhl_run_status", json!({"runId": run_id}));
    assert_eq!(by_tool["structuredContent"], done, "{by_tool}");
    let by_path = session
        .send_to("/mcp/run/status", "run/status", json!({"runId": run_id}))
        .result();
    assert_eq!(by_path, done);

    let logs = session.method("run/logs", json!({"runId": run_id}));
    assert_eq!(logs["lines"], json!(["echoing 7 characters"]), "{logs}");
    assert_eq!(logs["totalLines"], 1);
    let read = |uri: &str| {
        let contents = session.send("resources/read", json!({"uri": uri})).result();
        contents["contents"][0]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(read(&logs_uri), "echoing 7 characters");
    let result: Value = serde_json::from_str(&read(&result_uri)).unwrap();
    assert_eq!(result, json!({"echoed": "poll me"}));

    // Resuming a completed run is refused by the engine (-32000), and the run is unchanged.
    let again = session.send("run/resume", json!({"runId": run_id})).json();
    assert_eq!(again["error"]["code"], -32000, "{again}");
    assert_eq!(session.status(&run_id), done);
    let listed = session.method("run/list", json!({}));
    assert_eq!(listed, json!({"runs": [done]}));
}

#[test]
fn a_synchronous_call_reports_progress_and_reads_its_companion_file() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let served = Served::start(&ctx, &folder, &[]);
    let session = served.session(&[]);
    let answer = session.send(
        "tools/call",
        json!({"name": "review", "arguments": {"topic": "lifetimes"},
               "_meta": {"progressToken": "review-1"}}),
    );
    let result = answer.result();
    assert_ne!(result["isError"], true, "{result}");
    let review = &result["structuredContent"]["result"];
    assert_eq!(review["topic"], "lifetimes", "{result}");
    let reply = review["answer"].as_str().unwrap_or_default();
    assert!(
        reply.starts_with("ECHO: Review the topic below and answer in one line.")
            && reply.ends_with("Topic: lifetimes"),
        "the prompt carries the companion file's text: {reply}"
    );
    let progress: Vec<Value> = answer
        .reply
        .streamed()
        .into_iter()
        .filter(|message| message["method"] == "notifications/progress")
        .collect();
    assert!(
        progress.len() >= 2,
        "progress at preparation and per settled call: {progress:?}"
    );
    assert!(
        progress
            .iter()
            .all(|note| note["params"]["progressToken"] == "review-1"),
        "{progress:?}"
    );
    let last = progress.last().unwrap();
    assert_eq!(
        last["params"]["progress"], 1.0,
        "one settled call: {progress:?}"
    );
    // Without a progress token no notification comes first, so the answer is plain JSON.
    let quiet = session.send(
        "tools/call",
        json!({"name": "review", "arguments": {"topic": "traits"}}),
    );
    let kind = quiet.reply.header("content-type").unwrap_or_default();
    assert!(kind.starts_with("application/json"), "{kind}");
    assert_eq!(
        quiet.result()["structuredContent"]["result"]["topic"],
        "traits"
    );
}

#[test]
fn a_finished_run_is_forgotten_after_the_terminal_ttl_and_a_waiting_one_is_kept() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let served = Served::start(&ctx, &folder, &["--terminal-run-ttl", "1s"]);
    let session = served.session(&[]);

    let done = session.method(
        "run/start",
        json!({"name": "echo", "arguments": {"text": "short-lived"}}),
    );
    let done_id = done["runId"].as_str().unwrap().to_owned();
    let waiting = session.method(
        "run/start",
        json!({"name": "approval", "arguments": {"request": "keep me"}}),
    );
    let waiting_id = waiting["runId"].as_str().unwrap().to_owned();
    session.wait_state(&done_id, "completed");
    session.wait_state(&waiting_id, "input_required");
    let unknown = session
        .send("run/status", json!({"runId": made_up_id(&done_id)}))
        .normalised();

    // The sweep runs every second with this TTL: the completed run goes, answering from then
    // on exactly as an id that never existed.
    wait_until("the completed run to be swept", || {
        session
            .send("run/status", json!({"runId": done_id}))
            .normalised()
            .replace(&done_id, &made_up_id(&done_id))
            == unknown
    });
    let listed = session.method("run/list", json!({}));
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|run| run["runId"].as_str())
        .collect();
    assert_eq!(ids, vec![waiting_id.as_str()], "{listed}");
    // A run waiting at a checkpoint is someone's open question: it is kept.
    assert_eq!(session.status(&waiting_id)["state"], "input_required");
}

#[test]
fn a_served_workflow_above_the_confirmation_threshold_runs_without_a_question() {
    let ctx = TestContext::new().set("AGENTPRISM_CONFIRM_AGENTS", "3");
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    std::fs::write(
        folder.join("fan.js"),
        "export const meta = { name: 'fan', description: 'five calls', model: 'mock' };\n\
         return (await parallel([1, 2, 3, 4, 5].map((i) => () => agent('call ' + i)))).length;\n",
    )
    .unwrap();
    let served = Served::start(&ctx, &folder, &[]);
    let result = served.stateless().tool("fan", json!({}));
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"result": 5}),
        "{result}"
    );
}
