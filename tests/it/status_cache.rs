//! The workflow tool's kept `status` answers (`src/tools/workflow/status_cache.rs`): for
//! a run that is not running, a kept answer is served while the run's stored version stands,
//! and after every kind of write that changes what status shows, the answer is the one a
//! server that kept nothing gives; for a run this process executes, a kept answer is served
//! between two steps of its driver and never after one.

use std::sync::Arc;

use agentprism::mcp::handler::McpHandler;
use agentprism::model::{CallKind, CallRecord, EventRecord, Lease, Phase, RunId};
use agentprism::store::{CallWrite, Fence, ScriptChange, Store};
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

use crate::workflow_tool::{Setup, fresh, setup};

const SCRIPT: &str = "export const meta = { name: 'kept', description: 'd', model: 'codex' };\n\
    log('first line');\n\
    for (let i = 0; i < 3; i++) { await agent('prompt ' + i, {label: 'call ' + i}); }\n\
    return 'done';";

/// Runs [`SCRIPT`] to its end; its id.
async fn completed_run(s: &Setup) -> RunId {
    let ack = s
        .call(json!({"action": "run", "projectDir": s.h.project, "script": SCRIPT}))
        .await;
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let run_id =
        RunId::parse(ack["structuredContent"]["runId"].as_str().expect("runId")).expect("a run id");
    s.h.engine.wait(&run_id).await;
    run_id
}

async fn status(server: &WorkflowServer, run_id: &RunId) -> Value {
    server
        .tools()
        .call(
            &fresh(),
            "workflow",
            &json!({"action": "status", "runId": run_id}),
        )
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .expect("status")
}

/// The answer of a server that has kept nothing yet.
async fn built_afresh(s: &Setup, run_id: &RunId) -> Value {
    let server = WorkflowServer::new(s.h.engine.clone(), WorkflowServerOptions::default());
    status(&server, run_id).await
}

#[tokio::test]
async fn a_kept_answer_is_served_while_the_version_stands() {
    let s = setup();
    let run_id = completed_run(&s).await;
    let first = status(&s.server, &run_id).await;
    assert_eq!(
        first["structuredContent"]["status"], "completed",
        "{first:#}"
    );
    assert_eq!(status(&s.server, &run_id).await, first);

    // A change the store's version does not see (its trigger dropped behind the store's
    // back) shows that the second server answers from what it kept, not from the store.
    let database = rusqlite::Connection::open(s.h.store.database_path()).expect("open");
    database
        .execute_batch("DROP TRIGGER runs_version_update")
        .expect("drop the trigger");
    database
        .execute(
            "UPDATE runs SET workflow_name = 'sneaked' WHERE run_id = ?1",
            [run_id.as_str()],
        )
        .expect("update");
    let kept = status(&s.server, &run_id).await;
    assert_eq!(kept, first, "served from the cache");
    let afresh = built_afresh(&s, &run_id).await;
    assert_eq!(afresh["structuredContent"]["workflowName"], "sneaked");
}

#[tokio::test]
async fn every_write_status_shows_gives_the_answer_built_afresh() {
    let s = setup();
    let run_id = completed_run(&s).await;
    let store: Arc<dyn Store> = s.h.store.clone();
    // The run's own lease is gone with its execution; these writes hold one of their own.
    let current = store.lease(&run_id).await.expect("lease");
    let lease = Lease {
        owner_id: "status-cache-test".to_owned(),
        pid: std::process::id(),
        proc_start: 0,
        boot_id: None,
        host: None,
        token: "token-test".to_owned(),
        acquired_at: 1,
        expires_at: None,
    };
    let expected = current.as_ref().map(|lease| lease.token.as_str());
    assert!(
        store
            .acquire_lease(&run_id, expected, &lease)
            .await
            .expect("acquire")
    );
    let fence = Fence("token-test");
    let mut answer = status(&s.server, &run_id).await;
    let check = async |what: &str, answer: &mut Value| {
        let now = status(&s.server, &run_id).await;
        assert_ne!(now, *answer, "{what}: the answer did not change");
        assert_eq!(now, built_afresh(&s, &run_id).await, "{what}");
        assert_eq!(now, status(&s.server, &run_id).await, "{what}: kept again");
        *answer = now;
    };

    let mut record = store.load_run(&run_id).await.expect("record");
    record.phases.push(Phase {
        title: "Later".to_owned(),
        detail: None,
        model: None,
    });
    record.error_message = Some("a note".to_owned());
    store
        .update_run(&record, ScriptChange::Unchanged, fence)
        .await
        .expect("update");
    check("update_run", &mut answer).await;

    let calls = store.calls(&run_id).await.expect("calls");
    let last = calls.last().expect("a call").clone();
    let added = CallRecord {
        index: last.index + 1,
        label: Some("added afterwards".to_owned()),
        settlement_ordinal: last.settlement_ordinal + 1,
        hash: "added".to_owned(),
        ..last.clone()
    };
    store
        .append_call(
            &run_id,
            CallWrite {
                record: &added,
                supersedes: &[],
                events: &[],
            },
            fence,
        )
        .await
        .expect("call");
    check("append_call", &mut answer).await;

    let seq = store.last_event_seq(&run_id).await.expect("seq") + 1;
    let line = EventRecord {
        seq,
        timestamp: 1,
        event: agentprism::model::EventJson::from_value(
            &json!({"type": "log", "runId": run_id, "scope": "root", "message": "late line"}),
        ),
        redacted: false,
        truncated: false,
    };
    store
        .append_events(&run_id, &[line], fence)
        .await
        .expect("event");
    check("append_events (a log line)", &mut answer).await;

    store
        .record_call_total(&run_id, record.generation, 40, fence)
        .await
        .expect("total");
    check("record_call_total", &mut answer).await;

    let checkpoint = CallRecord {
        index: added.index + 1,
        kind: CallKind::Checkpoint,
        settlement_ordinal: added.settlement_ordinal + 1,
        hash: "checkpoint".to_owned(),
        ..added.clone()
    };
    store
        .append_call(
            &run_id,
            CallWrite {
                record: &checkpoint,
                supersedes: &[],
                events: &[],
            },
            fence,
        )
        .await
        .expect("checkpoint");
    check("a checkpoint row", &mut answer).await;
    assert_eq!(
        answer["structuredContent"]["outcome"]["checkpointsTaken"][0]["callIndex"],
        checkpoint.index
    );
}

/// The answer a transport that writes bytes gets for `status` in a legacy session of
/// `version`: `(text it writes, the value a `Value` transport gets)`.
async fn wire_status(
    server: &agentprism::mcp::McpServer,
    session: &str,
    run_id: &RunId,
    id: u64,
) -> (Option<String>, Value) {
    use agentprism::mcp::jsonrpc::{self, Message};
    use agentprism::mcp::{TransportContext, TransportKind};
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "workflow", "arguments": {"action": "status", "runId": run_id}}});
    let Ok(Message::Request(request)) = jsonrpc::parse(body.to_string().as_bytes()) else {
        panic!("a request");
    };
    let mut context = TransportContext::new(TransportKind::Http, "wire");
    context.session_id = Some(session.to_owned());
    let resolution = server.resolve(&request, Some(session));
    let wire = server
        .handle_request_wire(request.clone(), resolution, &context)
        .await;
    let resolution = server.resolve(&request, Some(session));
    let plain = server.handle_request(request, resolution, &context).await;
    assert_eq!((plain.status, wire.status), (200, 200));
    assert_eq!(plain.json, None, "a Value caller never gets text");
    match &wire.json {
        Some(_) => assert_eq!(wire.response, None, "text or a value, not both"),
        None => assert!(wire.response.is_some()),
    }
    (wire.json, plain.response.expect("a response"))
}

async fn legacy_session(server: &agentprism::mcp::McpServer, version: &str) -> String {
    let outcome = server
        .handle_bytes(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "wire", "version": "1"}}})
            .to_string()
            .as_bytes(),
            agentprism::mcp::TransportContext::new(agentprism::mcp::TransportKind::Http, "wire"),
        )
        .await;
    outcome.new_session.expect("a session")
}

#[tokio::test]
async fn a_kept_answer_goes_out_as_its_text_the_same_bytes_a_value_would_give() {
    let s = setup();
    let run_id = completed_run(&s).await;
    let server = agentprism::mcp::McpServer::new(s.server.clone(), Default::default());
    let session = legacy_session(&server, "2025-11-25").await;
    // A first build leaves a marker and answers with a value; the second keeps the answer.
    let (first, value) = wire_status(&server, &session, &run_id, 1).await;
    assert_eq!(first, None, "not kept yet");
    let mut texts = Vec::new();
    for id in 2..5 {
        let (text, value) = wire_status(&server, &session, &run_id, id).await;
        let text = text.expect("a kept answer goes out as text");
        assert_eq!(
            text,
            serde_json::to_string(&value).unwrap(),
            "the same bytes"
        );
        texts.push(text);
    }
    assert_eq!(
        serde_json::from_str::<Value>(&texts[0]).unwrap()["result"],
        value["result"],
        "the kept answer is the built one"
    );
    assert!(
        value["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|block| block["type"] == "resource_link"),
        "{value:#}"
    );
    // A session older than 2025-06-18 must not see the links: shaped from the value.
    let old = legacy_session(&server, "2025-03-26").await;
    let (text, value) = wire_status(&server, &old, &run_id, 9).await;
    assert_eq!(text, None, "an older session's answer is reshaped");
    assert!(
        value["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .all(|block| block["type"] != "resource_link"),
        "{value:#}"
    );
}

/// A held call, cancelled by a stop of its `callIndex`, then a second held call: the run stays
/// live throughout, and the document changes with each step of its driver.
const LIVE_SCRIPT: &str = "export const meta = { name: 'live', description: 'd', model: 'codex' };\n\
    try { await agent('first', {label: 'first'}); } catch (e) { log('first ended'); }\n\
    await agent('second', {label: 'second'});\n\
    return 'done';";

/// A workflow server over an engine whose agent turns wait until cancelled.
struct LiveSetup {
    _dir: tempfile::TempDir,
    project: std::path::PathBuf,
    store: Arc<agentprism::store::SqliteStore>,
    engine: agentprism::engine::Engine,
    server: Arc<WorkflowServer>,
    started: tokio::sync::mpsc::UnboundedReceiver<()>,
}

fn live_setup() -> LiveSetup {
    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store =
        Arc::new(agentprism::store::SqliteStore::open(&dir.path().join("state")).expect("store"));
    let (runner, started, _cancelled) = agentprism::engine::instant::HeldRunner::new();
    let engine = agentprism::engine::Engine::new(
        store.clone(),
        runner,
        Arc::new(crate::engine::NamedBackends::new(["codex"])),
        agentprism::engine::EngineConfig {
            home: Some(dir.path().to_path_buf()),
            ..agentprism::engine::EngineConfig::default()
        },
    );
    let server = WorkflowServer::new(engine.clone(), WorkflowServerOptions::default());
    LiveSetup {
        _dir: dir,
        project,
        store,
        engine,
        server,
        started,
    }
}

impl LiveSetup {
    async fn call(&self, arguments: Value) -> Value {
        self.server
            .tools()
            .call(&fresh(), "workflow", &arguments)
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .expect("tool call")
    }

    /// The answer of a server that has kept nothing yet.
    async fn built_afresh(&self, run_id: &RunId) -> Value {
        let server = WorkflowServer::new(self.engine.clone(), WorkflowServerOptions::default());
        status(&server, run_id).await
    }

    /// Status until the answer is served from what was kept: the document of a run whose
    /// driver is between steps. A step (a call starting, say) may still be under way when
    /// the turn's start is signalled, so the first answers may be built afresh.
    async fn settled_status(&self, run_id: &RunId) -> Value {
        let mut previous = status(&self.server, run_id).await;
        for _ in 0..10_000 {
            let now = status(&self.server, run_id).await;
            if now == previous && now == self.built_afresh(run_id).await {
                return now;
            }
            previous = now;
            tokio::task::yield_now().await;
        }
        panic!("the kept answer never matched a fresh one: {previous:#}");
    }
}

#[tokio::test]
async fn a_live_runs_answer_is_kept_between_its_drivers_steps() {
    let mut s = live_setup();
    let ack = s
        .call(json!({"action": "run", "projectDir": s.project, "script": LIVE_SCRIPT}))
        .await;
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let run_id =
        RunId::parse(ack["structuredContent"]["runId"].as_str().expect("runId")).expect("a run id");
    s.started.recv().await.expect("the first turn started");
    let first = s.settled_status(&run_id).await;
    assert_eq!(first["structuredContent"]["status"], "running", "{first:#}");

    // A write behind the engine's back (no driver step, no stored version for a running
    // run): the kept answer is served, a server that kept nothing sees the write.
    let database = rusqlite::Connection::open(s.store.database_path()).expect("open");
    database
        .execute(
            "UPDATE runs SET workflow_name = 'sneaked' WHERE run_id = ?1",
            [run_id.as_str()],
        )
        .expect("update");
    assert_eq!(
        status(&s.server, &run_id).await,
        first,
        "served from the cache"
    );
    let afresh = s.built_afresh(&run_id).await;
    assert_eq!(afresh["structuredContent"]["workflowName"], "sneaked");
    database
        .execute(
            "UPDATE runs SET workflow_name = 'live' WHERE run_id = ?1",
            [run_id.as_str()],
        )
        .expect("restore");

    // Steps of the driver: the first call ends (cancelled), the second one starts. The kept
    // answer is never served after them.
    let stop = s
        .call(json!({"action": "stop", "runId": run_id, "callIndex": 0}))
        .await;
    assert_eq!(stop["isError"], Value::Null, "{stop:#}");
    s.started.recv().await.expect("the second turn started");
    let second = s.settled_status(&run_id).await;
    assert_eq!(
        second["structuredContent"]["status"], "running",
        "{second:#}"
    );
    assert_ne!(second, first, "the answer changed with the steps");
    let labels: Vec<&str> = second["structuredContent"]["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|call| call["label"].as_str())
        .collect();
    assert_eq!(labels, ["first", "second"], "{second:#}");
    s.engine.shutdown(std::time::Duration::from_secs(5)).await;
}
