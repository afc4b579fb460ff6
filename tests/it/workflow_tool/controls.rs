//! Answering and steering a run through the tool: checkpoints through `resume`, `stop`,
//! setup answered once, exact retries, preparation's progress and cancellation, and
//! permissions and single-call stops.

use super::*;

/// Scenario 12: checkpoints pause; a wrong-kind answer is a tool error; the right one
/// continues and is recorded as injected.
#[tokio::test]
async fn checkpoints_are_answered_through_resume() {
    let s = setup();
    let run_id = s
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nconst a = await agent('one');\nconst ok = await checkpoint('continue?');\nreturn {a, ok};")
        .await;
    let status = s.status(&run_id).await;
    let document = &status["structuredContent"];
    assert_eq!(
        (document["status"].as_str(), document["reason"].as_str()),
        (Some("paused"), Some("checkpoint_required"))
    );
    let index = document["outcome"]["checkpointContext"]["callIndex"]
        .as_u64()
        .unwrap();
    assert!(text_of(&status).contains("checkpointReplies"), "{status:#}");
    let wrong = s
        .call(json!({"action": "resume", "runId": run_id, "checkpointReplies": {index.to_string(): "yes"}}))
        .await;
    assert!(is_error(&wrong), "{wrong:#}");
    let resumed = s
        .call(json!({"action": "resume", "runId": run_id, "checkpointReplies": {index.to_string(): true}}))
        .await;
    let ack = &resumed["structuredContent"];
    assert_eq!(
        (ack["accepted"].as_bool(), ack["action"].as_str()),
        (Some(true), Some("resume")),
        "{resumed:#}"
    );
    assert_eq!(ack["continuation"]["scriptRevised"], false);
    assert!(
        ack["continuation"]["operationId"]
            .as_str()
            .unwrap()
            .starts_with("mcp-")
    );
    s.h.engine.wait(&parse_id(&run_id)).await;
    let done = s.status(&run_id).await;
    assert_eq!(done["structuredContent"]["status"], "completed", "{done:#}");
    assert_eq!(
        done["structuredContent"]["outcome"]["checkpointsTaken"][0]["source"],
        "injected"
    );
}

/// Scenario 16 (the tool side): stopping a finished run is a no-op; a paused run stops cold
/// and resumes.
#[tokio::test]
async fn stop_answers_already_terminal_or_stops() {
    let s = setup();
    let finished = s.run_to_end(HI).await;
    let stop = s.call(json!({"action": "stop", "runId": finished})).await;
    assert!(!is_error(&stop));
    assert_eq!(stop["structuredContent"]["stopped"], false);
    assert_eq!(stop["structuredContent"]["alreadyTerminal"], true);

    let paused = s
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nawait agent('a');\nawait checkpoint('go?');\nreturn 1;")
        .await;
    let stop = s.call(json!({"action": "stop", "runId": paused})).await;
    assert_eq!(stop["structuredContent"]["stopped"], true, "{stop:#}");
    assert_eq!(stop["structuredContent"]["status"], "aborted");
    let events = s
        .read_json(&format!("workflow://runs/{paused}/events"))
        .await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"]["type"] == "stopped")
    );
    let resumed = s
        .call(json!({"action": "resume", "runId": paused, "checkpointReplies": {"1": true}}))
        .await;
    assert_eq!(
        resumed["structuredContent"]["accepted"], true,
        "{resumed:#}"
    );
    let cancel = s
        .call(json!({"action": "stop", "runId": finished, "callIndex": 0}))
        .await;
    assert!(is_error(&cancel), "{cancel:#}");
    let pause = s.call(json!({"action": "pause", "runId": finished})).await;
    assert_eq!(
        pause["structuredContent"]["pauseRequested"], false,
        "{pause:#}"
    );
}

/// Scenario 19: backend approval through setup-response; decline is final and idempotent.
#[tokio::test]
async fn setup_is_answered_once() {
    let s = setup();
    let ack = s.run(NEEDS_SETUP).await;
    let document = &ack["structuredContent"];
    assert_eq!(document["status"], "pending");
    assert_eq!(document["setup"]["request"]["kind"], "backend-approval");
    assert!(text_of(&ack).contains("setup-response"));
    let run_id = document["runId"].as_str().unwrap();
    let setup_id = document["setup"]["request"]["id"].as_str().unwrap();
    let decline = json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": {"action": "decline"}});
    let first = s.call(decline.clone()).await;
    assert_eq!(first["structuredContent"]["status"], "aborted", "{first:#}");
    let again = s.call(decline).await;
    assert_eq!(again["structuredContent"], first["structuredContent"]);
    let accept = s
        .call(json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": {"action": "accept", "content": {"approve": true}}}))
        .await;
    assert!(is_error(&accept), "{accept:#}");
    assert_eq!(
        s.status(run_id).await["structuredContent"]["status"],
        "aborted"
    );
}

/// Decision 6: the same request id in the same session returns the first answer.
#[tokio::test]
async fn exact_retries_return_the_first_answer() {
    let s = setup();
    let arguments = json!({"action": "run", "projectDir": s.h.project, "script": HI});
    let first = s
        .server
        .tools()
        .call(&context(Some("a"), json!(7)), "workflow", &arguments)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    let again = s
        .server
        .tools()
        .call(&context(Some("a"), json!(7)), "workflow", &arguments)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(s.h.engine.list(None, 50).await.unwrap().len(), 1);
    // A new id, or the same id in another session, is a new request.
    let other = s
        .server
        .tools()
        .call(&context(Some("b"), json!(7)), "workflow", &arguments)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_ne!(
        other["structuredContent"]["runId"],
        first["structuredContent"]["runId"]
    );
    // Stateless: only the same idempotency key with the same arguments is a retry.
    let keyed = || {
        let mut ctx = context(None, json!("x"));
        ctx.meta = json!({"agentprism/idempotencyKey": "key-1"});
        ctx
    };
    let stateless = s
        .server
        .tools()
        .call(&keyed(), "workflow", &arguments)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    let stateless_again = s
        .server
        .tools()
        .call(&keyed(), "workflow", &arguments)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_eq!(stateless, stateless_again);
    let mut changed = arguments.clone();
    changed["concurrency"] = json!(2);
    let conflicting = s
        .server
        .tools()
        .call(&keyed(), "workflow", &changed)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert!(is_error(&conflicting), "{conflicting:#}");
    assert!(
        text_of(&conflicting).contains("already used with different arguments"),
        "{conflicting:#}"
    );
    assert_eq!(s.h.engine.list(None, 50).await.unwrap().len(), 3);
    // The three runs above end before the project is filled, so the four
    // below are the only active ones however slowly the machine runs.
    for run in [&first, &other, &stateless] {
        let run_id = run["structuredContent"]["runId"].as_str().unwrap();
        s.h.engine.wait(&parse_id(run_id)).await;
    }
    // Retries take no slot even when the project is full.
    for id in 100..104 {
        let ack = s
            .server
            .tools()
            .call(
                &context(Some("a"), json!(id)),
                "workflow",
                &json!({"action": "run", "projectDir": s.h.project, "script": NEEDS_SETUP}),
            )
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .unwrap();
        assert_eq!(ack["structuredContent"]["status"], "pending", "{ack:#}");
    }
    let retry = s
        .server
        .tools()
        .call(
            &context(Some("a"), json!(103)),
            "workflow",
            &json!({"action": "run", "projectDir": s.h.project, "script": NEEDS_SETUP}),
        )
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_eq!(retry["structuredContent"]["accepted"], true, "{retry:#}");
}

/// Progress notifications during preparation, and cancellation before admission.
#[tokio::test]
async fn preparation_reports_progress_and_honours_cancellation() {
    let s = setup();
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = fresh();
    ctx.progress_token = Some(json!("tok"));
    ctx.notifier = RequestNotifier::new(sender);
    let ack = s
        .server
        .tools()
        .call(
            &ctx,
            "workflow",
            &json!({"action": "run", "projectDir": s.h.project, "script": HI}),
        )
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_eq!(ack["structuredContent"]["accepted"], true);
    let mut messages = Vec::new();
    while let Ok(notification) = receiver.try_recv() {
        assert_eq!(notification.method, "notifications/progress");
        assert_eq!(notification.params["progressToken"], "tok");
        messages.push(
            notification.params["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert!(messages[0].starts_with("preparing"), "{messages:?}");
    // Nothing after admission: a notification sent that close to the response can arrive
    // after it, when the client no longer knows the token.
    assert_eq!(messages.len(), 1, "{messages:?}");

    let cancelled = fresh();
    cancelled.cancel.cancel();
    let before = s.h.engine.list(None, 50).await.unwrap().len();
    let result = s
        .server
        .tools()
        .call(
            &cancelled,
            "workflow",
            &json!({"action": "run", "projectDir": s.h.project, "script": HI}),
        )
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert!(is_error(&result), "{result:#}");
    assert_eq!(s.h.engine.list(None, 50).await.unwrap().len(), before);
}

/// Live permission requests show in status and are answered through the tool; a live call
/// can be cancelled by index (scenario 15's tool side).
#[tokio::test]
async fn permissions_and_single_call_stops_go_through_the_tool() {
    let h = crate::engine::mock_harness();
    let server = WorkflowServer::new(h.engine.clone(), WorkflowServerOptions::default());
    let s = Setup { h, server };
    let ack = s
        .run("export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn await agent('x\\n@mock permission');")
        .await;
    let run_id = ack["structuredContent"]["runId"]
        .as_str()
        .expect("admitted")
        .to_owned();
    let pending = loop {
        let status = s.status(&run_id).await;
        if let Some(pending) = status["structuredContent"]["pendingPermissions"].get(0) {
            assert!(
                text_of(&status).contains("permissions-response"),
                "{status:#}"
            );
            break pending.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let permission_id = pending["permissionId"].as_str().unwrap();
    let wrong = s
        .call(json!({"action": "permissions-response", "runId": run_id, "permissionId": permission_id, "response": {"outcome": {"outcome": "selected", "optionId": "nope"}}}))
        .await;
    assert!(is_error(&wrong), "{wrong:#}");
    let option = pending["options"][0]["optionId"].as_str().unwrap();
    let right = s
        .call(json!({"action": "permissions-response", "runId": run_id, "permissionId": permission_id, "response": {"outcome": {"outcome": "selected", "optionId": option}}}))
        .await;
    assert_eq!(right["structuredContent"]["accepted"], true, "{right:#}");
    s.h.engine.wait(&parse_id(&run_id)).await;
    assert_eq!(
        s.status(&run_id).await["structuredContent"]["outcome"]["result"],
        "PERMISSION: allow"
    );

    let ack = s
        .run("export const meta = { name: 'x', description: 'd', model: 'mock' };\nconst [a, b] = await parallel([() => agent('a\\n@mock delay 5000'), () => agent('b')]);\nreturn {a, b};")
        .await;
    let run_id = ack["structuredContent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    loop {
        let status = s.status(&run_id).await;
        let running = status["structuredContent"]["calls"]
            .as_array()
            .is_some_and(|calls| {
                calls
                    .iter()
                    .any(|c| c["index"] == 0 && c["status"] == "running")
            });
        if running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancel = s
        .call(json!({"action": "stop", "runId": run_id, "callIndex": 0}))
        .await;
    assert_eq!(
        cancel["structuredContent"]["cancelled"]["callIndex"], 0,
        "{cancel:#}"
    );
    s.h.engine.wait(&parse_id(&run_id)).await;
    let done = s.status(&run_id).await;
    assert_eq!(done["structuredContent"]["status"], "completed", "{done:#}");
    assert_eq!(
        done["structuredContent"]["outcome"]["result"]["a"],
        Value::Null
    );
    s.h.engine.shutdown(Duration::from_secs(5)).await;
}
