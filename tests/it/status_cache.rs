//! The workflow tool's kept `status` answers of runs that are not running
//! (`src/tools/workflow/status_cache.rs`): a kept answer is served while the run's stored
//! version stands, and after every kind of write that changes what status shows, the answer
//! is the one a server that kept nothing gives.

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
        .call_tool(
            &fresh(),
            "workflow",
            json!({"action": "status", "runId": run_id}),
        )
        .await
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
        event: json!({"type": "log", "runId": run_id, "scope": "root", "message": "late line"}),
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
