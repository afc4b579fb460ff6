//! Rerunning chosen calls of a run through the real binaries and the mock agent: the CLI's
//! `resume --rerun` on a completed run and on a failed one, and the daemon's `workflow` tool
//! with `rerun` over HTTP. The mock's prompt log says which calls reached an agent again; the
//! run's status says which were redone and why the others ran live or replayed; the store
//! keeps the set-aside rows. A target that names nothing is refused with nothing changed.

use agentprism::model::RunId;
use agentprism::store::{CallReads, EventReads, SqliteStore};
use serde_json::{Value, json};

use crate::budget::workflow;
use crate::daemon::{World, open_session, wait_for};
use crate::support::context::{DEADLINE, TestContext, prompts_in_log};

/// Three calls: `draft` answers the text of `draft.txt` (read through the client), `review`
/// is built from that answer, `other` depends on nothing.
fn script(draft: &std::path::Path) -> String {
    format!(
        "export const meta = {{ name: 'rerun', description: 'd', model: 'mock' }};\n\
         const draft = await agent('draft\\n@mock read {}', {{ label: 'draft' }});\n\
         const review = await agent('review: ' + draft + '\\n@mock reply reviewed ' + draft, {{ label: 'review' }});\n\
         const other = await agent('independent\\n@mock reply other', {{ label: 'other' }});\n\
         return {{ draft, review, other }};\n",
        draft.display()
    )
}

/// `(label, replayed, liveReason)` of each call status lists.
fn shown(status: &Value) -> Vec<(String, bool, Option<String>)> {
    status["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|call| {
            (
                call["label"].as_str().unwrap_or_default().to_owned(),
                call["replayed"] == true,
                call["liveReason"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn labelled(rows: &[(&str, bool, Option<&str>)]) -> Vec<(String, bool, Option<String>)> {
    rows.iter()
        .map(|(label, replayed, reason)| {
            ((*label).to_owned(), *replayed, reason.map(str::to_owned))
        })
        .collect()
}

fn with_log(ctx: TestContext) -> TestContext {
    let log = ctx.path("agent.log");
    ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}))
}

#[test]
fn a_completed_run_reruns_one_call_and_what_depends_on_it() {
    let ctx = with_log(TestContext::new());
    let draft = ctx.write("project/draft.txt", "first draft");
    let path = ctx.write("wf.js", &script(&draft));
    let done = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let run_id = done.run_id();
    assert_eq!(done.json()["review"], "reviewed first draft");
    assert_eq!(prompts_in_log(&ctx, "agent.log").len(), 3);

    std::fs::write(&draft, "second draft").expect("edit the draft");
    let redone = ctx.run(&["resume", &run_id, "--rerun", "draft"]);
    assert_eq!(redone.code(), 0, "{}", redone.stderr);
    assert!(
        redone.stderr.contains("redoing call 0 (draft)"),
        "{}",
        redone.stderr
    );
    assert_eq!(
        redone.json(),
        json!({"draft": "second draft", "review": "reviewed second draft", "other": "other"})
    );
    // The draft and the review it feeds reached the agent again; the other call did not.
    let prompts = prompts_in_log(&ctx, "agent.log");
    assert_eq!(prompts.len(), 5, "{prompts:#?}");
    assert!(prompts[3].starts_with("draft"), "{prompts:#?}");
    assert!(
        prompts[4].starts_with("review: second draft"),
        "{prompts:#?}"
    );
    let status = ctx.status(&run_id);
    assert_eq!(status["status"], "completed");
    assert_eq!(
        status["summary"]["calls"],
        json!({"total": 3, "live": 2, "replayed": 1, "failed": 0, "retried": 0}),
        "{status:#}"
    );
    assert_eq!(
        shown(&status),
        labelled(&[
            ("draft", false, Some("rerun")),
            ("review", false, Some("notRecorded")),
            ("other", true, None),
        ])
    );

    // The set-aside answer stays in the history, superseded by the generation that redid it,
    // and the resumed event names it.
    let store = SqliteStore::open(&ctx.state()).expect("open the store");
    let id = RunId::parse(&run_id).expect("a run id");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let history = runtime.block_on(store.calls(&id)).expect("calls");
    let first_draft = history
        .iter()
        .find(|row| row.generation == 1 && row.index == 0)
        .expect("the first draft's row");
    assert_eq!(first_draft.result, Some(json!("first draft")));
    assert_eq!(first_draft.superseded_by, Some(2));
    let resumed: Vec<Value> = runtime
        .block_on(store.events(&id, 0, 10_000))
        .expect("events")
        .into_iter()
        .map(|event| event.event.value())
        .filter(|event| event["type"] == "resumed")
        .collect();
    assert_eq!(
        resumed.last().map(|e| e["rerun"].clone()),
        Some(json!([{"generation": 1, "callIndex": 0, "label": "draft"}])),
        "{resumed:#?}"
    );
    drop(store);

    // A target that names nothing is refused, and nothing changes.
    for (target, expected) in [
        ("9", "call 9 has no recorded answer to rerun"),
        ("nosuch", "no recorded agent call is labelled \"nosuch\""),
    ] {
        let refused = ctx.run(&["resume", &run_id, "--rerun", target]);
        assert_ne!(refused.code(), 0, "{target}");
        assert!(refused.stderr.contains(expected), "{}", refused.stderr);
        assert!(refused.stderr.contains("rerun"), "{}", refused.stderr);
    }
    let after = ctx.status(&run_id);
    assert_eq!(after["status"], "completed");
    assert_eq!(after["generation"], status["generation"]);
    assert_eq!(prompts_in_log(&ctx, "agent.log").len(), 5);
    // Without rerun a completed run is still not resumable.
    let plain = ctx.run(&["resume", &run_id]);
    assert_ne!(plain.code(), 0);
    assert!(
        plain.stderr.contains("name calls to redo with rerun"),
        "{}",
        plain.stderr
    );
}

#[test]
fn a_failed_run_reruns_a_good_call_and_the_failed_one_runs_again() {
    let ctx = with_log(TestContext::new());
    let flag = ctx.path("failed-once");
    let path = ctx.write(
        "wf.js",
        &format!(
            "export const meta = {{ name: 'rerun-failed', description: 'd', model: 'mock' }};\n\
             const first = await agent('first\\n@mock reply one', {{ label: 'first' }});\n\
             const second = await agent('second\\n@mock once {} error -32603 broken', {{ label: 'second' }});\n\
             if (second === null) throw new Error('the second call failed');\n\
             return {{ first, second }};\n",
            flag.display()
        ),
    );
    let failed = ctx.run(&["run", path.to_str().unwrap()]);
    assert_ne!(failed.code(), 0, "{}", failed.stderr);
    let run_id = failed.run_id();
    assert_eq!(ctx.status(&run_id)["status"], "failed");

    let redone = ctx.run(&["resume", &run_id, "--rerun", "0"]);
    assert_eq!(redone.code(), 0, "{}", redone.stderr);
    let status = ctx.status(&run_id);
    assert_eq!(
        shown(&status),
        labelled(&[
            ("first", false, Some("rerun")),
            ("second", false, Some("failedBefore")),
        ])
    );
    assert_eq!(prompts_in_log(&ctx, "agent.log").len(), 4);
}

fn settled(world: &World, run_id: &str, generation: u64) -> Value {
    wait_for("the run to settle", DEADLINE, || {
        let status = world.ctx.status(run_id);
        let ended = !matches!(status["status"].as_str(), Some("running" | "pending"));
        (ended && status["generation"] == generation).then_some(status)
    })
}

#[test]
fn the_daemon_tool_reruns_by_index_and_refuses_bad_targets_naming_rerun() {
    let world = World::with(with_log);
    let draft = world.ctx.write("project/draft.txt", "v1");
    let record = world.start();
    let session = open_session(record.port);
    let ack = workflow(
        record.port,
        &session,
        1,
        json!({"action": "run", "projectDir": world.ctx.project(), "script": script(&draft)}),
    );
    let run_id = ack["structuredContent"]["runId"]
        .as_str()
        .expect("runId")
        .to_owned();
    settled(&world, &run_id, 1);

    for (id, rerun, expected) in [
        (
            2,
            json!("draft"),
            "must be an array of call indexes and labels",
        ),
        (3, json!([]), "must have 1 to 256 items"),
        (
            4,
            json!([{"index": 0}]),
            "item 0 must be a call index or a label",
        ),
        (5, json!([-1]), "item 0 (-1) is not a call index"),
        (6, json!([7]), "call 7 has no recorded answer to rerun"),
    ] {
        let refused = workflow(
            record.port,
            &session,
            id,
            json!({"action": "resume", "runId": run_id, "rerun": rerun}),
        );
        assert_eq!(refused["isError"], true, "{refused:#}");
        let text = refused["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(expected), "{rerun}: {text}");
        assert!(text.contains("rerun"), "{rerun}: {text}");
    }
    assert_eq!(world.ctx.status(&run_id)["generation"], 1);

    std::fs::write(&draft, "v2").expect("edit the draft");
    let resumed = workflow(
        record.port,
        &session,
        7,
        json!({"action": "resume", "runId": run_id, "rerun": [0]}),
    );
    assert_eq!(resumed["isError"], Value::Null, "{resumed:#}");
    assert_eq!(
        resumed["structuredContent"]["continuation"]["rerun"],
        json!([{"generation": 1, "callIndex": 0, "label": "draft"}]),
        "{resumed:#}"
    );
    let status = settled(&world, &run_id, 2);
    assert_eq!(status["status"], "completed");
    assert_eq!(
        shown(&status),
        labelled(&[
            ("draft", false, Some("rerun")),
            ("review", false, Some("notRecorded")),
            ("other", true, None),
        ])
    );
    let prompts = prompts_in_log(&world.ctx, "agent.log");
    assert_eq!(
        prompts
            .iter()
            .filter(|p| p.starts_with("independent"))
            .count(),
        1,
        "{prompts:#?}"
    );
}

#[test]
fn a_paused_run_reruns_a_call_while_its_checkpoint_is_answered() {
    let ctx = with_log(TestContext::new());
    let path = ctx.write(
        "wf.js",
        "export const meta = { name: 'rerun-paused', description: 'd', model: 'mock' };\n\
         const first = await agent('first\\n@mock reply one', { label: 'first' });\n\
         const go = await checkpoint('go on?');\n\
         const last = await agent('last\\n@mock reply two', { label: 'last' });\n\
         return { first, go, last };\n",
    );
    let paused = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    let waiting = ctx.status(&run_id);
    let checkpoint = waiting["outcome"]["checkpointContext"]["callIndex"].clone();
    let reply = format!("{checkpoint}=true");
    let done = ctx.run(&["resume", &run_id, "--reply", &reply, "--rerun", "first"]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(
        done.json(),
        json!({"first": "one", "go": true, "last": "two"})
    );
    let status = ctx.status(&run_id);
    assert_eq!(
        shown(&status),
        labelled(&[
            ("first", false, Some("rerun")),
            ("last", false, Some("notRecorded")),
        ])
    );
    assert_eq!(prompts_in_log(&ctx, "agent.log").len(), 3);
}
