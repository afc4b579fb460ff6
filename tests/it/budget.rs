//! Run budgets through the real binaries: a daemon, its `workflow` tool over HTTP, the CLI,
//! and the mock agent, whose usage is known (a token per 4 bytes, at least one, of the
//! prompt in and of the reply out). A run of sequential calls pauses with reason `budget`
//! after exactly the call that reaches its `tokenBudget`; a SIGKILL of the daemon leaves the
//! spend the journal holds; `resume` with a higher limit finishes the run, and no settled call
//! runs twice (the mock agent's prompt log counts them).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{World, mcp_post, open_session, wait_for};
use crate::support::context::{DEADLINE, prompts_in_log, wait_gone};

/// Tokens of the mock agent for `bytes` of text.
fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4).max(1) as u64
}

/// A call's usage when the mock agent echoes `prompt` (its directive lines are not echoed).
fn echo_usage(prompt: &str, echoed: &str) -> u64 {
    tokens(prompt.len()) + tokens(format!("ECHO: {echoed}").len())
}

/// The `workflow` tool's result for `arguments`.
pub(crate) fn workflow(port: u16, session: &str, id: u64, arguments: Value) -> Value {
    let reply = mcp_post(
        port,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "workflow", "arguments": arguments}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["result"].clone()
}

/// Waits for the stored run to settle (any status but running/pending) and returns it.
fn settled(world: &World, run_id: &str) -> Value {
    wait_for("the run to settle", DEADLINE, || {
        let status = world.ctx.status(run_id);
        (!matches!(status["status"].as_str(), Some("running" | "pending"))).then_some(status)
    })
}

pub(crate) fn kill_daemons(world: &World) {
    let pids = world.daemon_pids();
    assert!(!pids.is_empty(), "a daemon runs");
    for pid in &pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    wait_gone(&pids);
}

#[test]
fn a_budget_pauses_after_the_crossing_call_survives_sigkill_and_resumes_higher() {
    let log = "mock.log";
    let world = World::with(|ctx| {
        let log_path = ctx.path(log);
        ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log_path}))
    });
    let gate = world.ctx.path("gate");
    let last_prompt = format!("call 3\n@mock wait_file {}", gate.display());
    let script = format!(
        "export const meta = {{ name: 'budget', description: 'd', model: 'mock' }};\n\
         const out = [];\n\
         for (let i = 0; i < 4; i++) out.push(await agent(i === 3 ? {last_prompt:?} : 'call ' + i));\n\
         return out;"
    );
    let per_call = echo_usage("call 0", "call 0");
    // Calls 0 and 1 stay below the limit, call 2 starts below it and reaches it: call 3 is
    // the one that would start at the limit.
    let limit = 2 * per_call + 1;

    let record = world.start();
    let session = open_session(record.port);
    let bad = workflow(
        record.port,
        &session,
        1,
        json!({"action": "run", "projectDir": world.ctx.project(), "script": script, "tokenBudget": 0}),
    );
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(bad.to_string().contains("tokenBudget"), "{bad}");
    // The mock agent reports no cost: a cost limit over it is refused, nothing stored.
    let cost = workflow(
        record.port,
        &session,
        2,
        json!({"action": "run", "projectDir": world.ctx.project(), "script": script, "costBudgetUsd": 1.5}),
    );
    assert_eq!(cost["isError"], true, "{cost}");
    let text = cost.to_string();
    assert!(
        text.contains("costBudgetUsd") && text.contains("mock"),
        "{text}"
    );
    let listed = world.ctx.run(&["runs", "--json"]);
    assert!(
        !listed.stdout.contains("budget"),
        "nothing stored: {}",
        listed.stdout
    );

    let started = workflow(
        record.port,
        &session,
        3,
        json!({"action": "run", "projectDir": world.ctx.project(), "script": script, "tokenBudget": limit}),
    );
    assert_eq!(
        started["structuredContent"]["limits"]["tokenBudget"], limit,
        "{started}"
    );
    let run_id = started["structuredContent"]["runId"]
        .as_str()
        .expect("run id")
        .to_owned();
    let status = settled(&world, &run_id);
    assert_eq!(status["status"], "paused", "{status}");
    assert_eq!(status["reason"], "budget");
    assert_eq!(status["limits"]["tokenBudget"], limit);
    assert_eq!(status["tokenUsage"]["totalTokens"], 3 * per_call);
    let context = &status["outcome"]["budgetContext"];
    assert_eq!(context["field"], "tokenBudget", "{status}");
    assert_eq!(context["spent"], 3 * per_call);
    assert_eq!(context["limit"], limit);
    assert_eq!(
        prompts_in_log(&world.ctx, log),
        ["call 0", "call 1", "call 2"]
    );

    // A SIGKILL of the daemon changes nothing of the spend.
    kill_daemons(&world);
    let after_kill = world.ctx.status(&run_id);
    assert_eq!(after_kill["tokenUsage"], status["tokenUsage"]);
    assert_eq!(after_kill["reason"], "budget");

    // Resume with a higher limit; kill the daemon while call 3 runs.
    let record = world.start();
    let session = open_session(record.port);
    let resumed = workflow(
        record.port,
        &session,
        4,
        json!({"action": "resume", "runId": run_id, "tokenBudget": 1000}),
    );
    assert_eq!(
        resumed["structuredContent"]["limits"]["tokenBudget"], 1000,
        "{resumed}"
    );
    wait_for("call 3 to run", DEADLINE, || {
        (prompts_in_log(&world.ctx, log).len() == 4).then_some(())
    });
    kill_daemons(&world);
    let interrupted = world.ctx.status(&run_id);
    assert_eq!(interrupted["status"], "paused", "{interrupted}");
    assert_eq!(
        interrupted["tokenUsage"]["totalTokens"],
        3 * per_call,
        "only settled calls count"
    );
    assert_eq!(interrupted["limits"]["tokenBudget"], 1000);

    std::fs::write(&gate, "open").expect("open the gate");
    let record = world.start();
    let session = open_session(record.port);
    let resumed = workflow(
        record.port,
        &session,
        5,
        json!({"action": "resume", "runId": run_id}),
    );
    assert!(resumed["isError"] != true, "{resumed}");
    let done = settled(&world, &run_id);
    assert_eq!(done["status"], "completed", "{done}");
    let last = echo_usage(&last_prompt, "call 3");
    assert_eq!(done["tokenUsage"]["totalTokens"], 3 * per_call + last);
    let prompts = prompts_in_log(&world.ctx, log);
    assert_eq!(
        prompts,
        [
            "call 0",
            "call 1",
            "call 2",
            last_prompt.as_str(),
            last_prompt.as_str()
        ],
        "settled calls replayed; only the call the SIGKILL interrupted ran again"
    );
}

#[test]
fn the_cli_sets_and_raises_a_token_budget() {
    let log = "mock.log";
    let world = World::with(|ctx| {
        let log_path = ctx.path(log);
        ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log_path}))
    });
    let script = world.ctx.write(
        "project/budget.js",
        "export const meta = { name: 'cli-budget', description: 'd', model: 'mock' };\n\
         const out = [];\n\
         for (let i = 0; i < 3; i++) out.push(await agent('call ' + i));\n\
         return out.length;",
    );
    let script = script.to_str().expect("utf-8 path");
    let refused = world.ctx.run(&["run", script, "--token-budget", "0"]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--token-budget"),
        "{}",
        refused.stderr
    );

    let per_call = echo_usage("call 0", "call 0");
    let limit = per_call.to_string();
    let paused = world.ctx.run(&["run", script, "--token-budget", &limit]);
    let run_id = paused.run_id();
    let status = world.ctx.status(&run_id);
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("paused"), Some("budget")),
        "{status}"
    );
    assert!(
        paused.stderr.contains("--token-budget"),
        "the CLI says how to go on: {}",
        paused.stderr
    );
    assert_eq!(prompts_in_log(&world.ctx, log), ["call 0"]);

    let shown = world.ctx.run(&["status", &run_id]);
    assert!(
        shown.stdout.contains("reason: budget")
            && shown.stdout.contains(&format!("token budget: {limit}"))
            && shown
                .stdout
                .contains("budget: the run reached its token budget"),
        "{}",
        shown.stdout
    );
    let low = world
        .ctx
        .run(&["resume", &run_id, "--token-budget", &limit]);
    assert_eq!(
        low.code(),
        2,
        "a limit at the spend is refused: {}",
        low.stderr
    );
    assert!(low.stderr.contains("tokenBudget"), "{}", low.stderr);
    let done = world
        .ctx
        .run(&["resume", &run_id, "--token-budget", "1000"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let status = world.ctx.status(&run_id);
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["limits"]["tokenBudget"], 1000);
    assert_eq!(
        prompts_in_log(&world.ctx, log),
        ["call 0", "call 1", "call 2"]
    );
}
