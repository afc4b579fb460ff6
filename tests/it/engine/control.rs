//! Controlling a running run through the engine: pause lets running calls finish and
//! interrupts queued ones, a single call's stop, a run's stop and the resume that replays its
//! prefix, auth and usage limits pausing the run, permission requests waiting for an answer,
//! and the progress and transcript events of a running call.

use std::path::PathBuf;

use agentprism::engine::StatusQuery;
use agentprism::model::{CallOrigin, RunId};
use agentprism::store::{CallReads, EventReads};
use serde_json::{Value, json};

use super::{Harness, mock_harness};

async fn wait_running(h: &Harness, run_id: &RunId, count: usize) -> Value {
    wait_status(h, run_id, |status| {
        status["calls"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["status"] == "running").count())
            .unwrap_or(0)
            >= count
    })
    .await
}

async fn wait_status(h: &Harness, run_id: &RunId, predicate: impl Fn(&Value) -> bool) -> Value {
    let started = std::time::Instant::now();
    loop {
        let status = json!(
            h.engine
                .status(run_id, &StatusQuery::default())
                .await
                .unwrap()
        );
        if predicate(&status) {
            return status;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "status never matched: {status:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn pause_lets_running_calls_finish_and_interrupts_queued_ones() {
    let h = mock_harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'mock' };\n\
        return await parallel([0, 1, 2, 3, 4].map((i) => () => agent('p' + i + '\\n@mock delay 400')));";
    let admission = h
        .admit(
            script,
            agentprism::engine::LimitOverrides {
                concurrency: Some(2),
                ..Default::default()
            },
        )
        .await;
    let run_id = admission.run_id;
    let count = |status: &Value, state: &str| {
        status["calls"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["status"] == state).count())
            .unwrap_or(0)
    };
    // Concurrency 2: two calls run, three wait for a slot.
    wait_status(&h, &run_id, |status| {
        count(status, "running") == 2 && count(status, "queued") == 3
    })
    .await;
    let paused = json!(
        h.engine
            .pause(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(paused["pauseRequested"], true);
    h.engine.wait(&run_id).await;
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("paused"), Some("requested")),
        "{status:#}"
    );
    let calls = h.store.latest_calls(&run_id).await.unwrap();
    let journaled = calls
        .iter()
        .filter(|c| c.outcome == agentprism::model::CallOutcome::Result)
        .count();
    let interrupted = calls
        .iter()
        .filter(|c| c.aborted && c.origin == CallOrigin::Engine)
        .count();
    assert_eq!((journaled, interrupted), (2, 3), "{calls:#?}");
    // Resume replays the two finished calls and runs the three interrupted ones.
    let status = h.resume_to_end(&run_id, vec![]).await;
    assert_eq!(status["status"], "completed", "{status:#}");
    let calls = h.store.latest_calls(&run_id).await.unwrap();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.origin == CallOrigin::JournalReplay)
            .count(),
        2
    );
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn stopping_one_call_returns_null_and_the_run_goes_on() {
    let h = mock_harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'mock' };\n\
        return await parallel([() => agent('stuck\\n@mock hang'), () => agent('fine\\n@mock delay 300')]);";
    let run_id = h.start(script).await.unwrap();
    let status = wait_running(&h, &run_id, 2).await;
    let stuck = status["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["index"] == 0)
        .unwrap()
        .clone();
    assert_eq!(stuck["status"], "running");
    let not_live = h
        .engine
        .stop(&run_id, Some(7), &StatusQuery::default())
        .await
        .unwrap_err();
    assert!(not_live.to_string().contains("0:agent 0"), "{not_live}");
    h.engine
        .stop(&run_id, Some(0), &StatusQuery::default())
        .await
        .unwrap();
    h.engine.wait(&run_id).await;
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(status["outcome"]["result"], json!([null, "ECHO: fine"]));
    assert_eq!(status["calls"][0]["errorCode"], "AGENT_CANCELLED");
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn stopping_a_running_run_aborts_it_and_resume_replays_the_prefix() {
    let h = mock_harness();
    let script = "export const meta = { name: 'x', description: 'd', model: 'mock' };\n\
        const a = await agent('first');\nconst b = await agent('second\\n@mock hang');\nreturn [a, b];";
    let run_id = h.start(script).await.unwrap();
    wait_status(&h, &run_id, |status| {
        status["calls"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["index"] == 1 && c["status"] == "running")
        })
    })
    .await;
    let stopped = json!(
        h.engine
            .stop(&run_id, None, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(stopped["stopped"], true, "{stopped:#}");
    assert_eq!(stopped["status"], "aborted");
    let events = h.store.events(&run_id, 0, 1000).await.unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.event.event_type().as_deref() == Some("stopped"))
            .count(),
        1
    );
    // The stored script is edited so the resumed call finishes: a revision.
    let file = PathBuf::from(stopped["scriptPath"].as_str().unwrap());
    std::fs::write(&file, script.replace("\\n@mock hang", "")).unwrap();
    let status = h.resume_to_end(&run_id, vec![]).await;
    assert_eq!(
        status["outcome"]["result"],
        json!(["ECHO: first", "ECHO: second"]),
        "{status:#}"
    );
    assert_eq!(status["calls"][0]["replayed"], true, "{status:#}");
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn auth_and_usage_limits_pause_the_run() {
    let h = mock_harness();
    let (run_id, status) = h.run_to_end("export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn await agent('x\\n@mock auth_required');").await;
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("paused"), Some("auth_required")),
        "{status:#}"
    );
    assert_eq!(status["outcome"]["authContext"]["backendId"], "mock");
    assert_eq!(
        status["outcome"]["authContext"]["methods"][0]["id"],
        "mock-login"
    );
    let _ = run_id;
    let (_, status) = h.run_to_end("export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn await agent('x\\n@mock usage_limit');").await;
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("paused"), Some("usage_limit")),
        "{status:#}"
    );
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn permission_requests_wait_for_an_answer() {
    let h = mock_harness();
    let mut notices = h.engine.subscribe();
    let run_id = h.start("export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn await agent('x\\n@mock permission');").await.unwrap();
    let (permission_id, request) = loop {
        match notices.recv().await.unwrap() {
            agentprism::engine::events::RunNotice::Permission {
                run_id: id,
                permission_id,
                request,
            } if id == run_id => break (permission_id, request),
            _ => {}
        }
    };
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        status["pendingPermissions"][0]["permissionId"],
        permission_id.as_str()
    );
    let option = request["options"][0]["optionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let wrong = agentprism::engine::runner::PermissionOutcome::Selected {
        option_id: "nope".into(),
    };
    assert!(
        h.engine
            .respond_permission(&run_id, &permission_id, wrong)
            .await
            .is_err()
    );
    let right = agentprism::engine::runner::PermissionOutcome::Selected { option_id: option };
    h.engine
        .respond_permission(&run_id, &permission_id, right)
        .await
        .unwrap();
    h.engine.wait(&run_id).await;
    let status = json!(
        h.engine
            .status(&run_id, &StatusQuery::default())
            .await
            .unwrap()
    );
    assert_eq!(
        status["outcome"]["result"],
        json!("PERMISSION: allow"),
        "{status:#}"
    );
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn progress_and_transcript_events_describe_a_running_call() {
    let h = mock_harness();
    let (run_id, status) = h
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn await agent('hi\\n@mock thought pondering\\n@mock tool Read file\\n@mock chunks 3');")
        .await;
    assert_eq!(status["status"], "completed", "{status:#}");
    let events: Vec<Value> = h
        .store
        .events(&run_id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.value())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let start = kinds.iter().position(|k| *k == "agentStart").unwrap();
    let progress = kinds
        .iter()
        .position(|k| *k == "agentProgress")
        .expect("a progress event");
    let end = kinds.iter().position(|k| *k == "agentEnd").unwrap();
    assert!(start < progress && progress < end, "{kinds:?}");
    let transcript: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "agentTranscript")
        .collect();
    let entry_kinds: Vec<&str> = transcript
        .iter()
        .map(|e| e["entry"]["kind"].as_str().unwrap())
        .collect();
    assert!(
        entry_kinds.contains(&"thought")
            && entry_kinds.contains(&"tool_call")
            && entry_kinds.contains(&"text"),
        "{transcript:#?}"
    );
    // The newest revision of the text entry holds the whole reply.
    let text = transcript
        .iter()
        .filter(|e| e["entry"]["kind"] == "text")
        .max_by_key(|e| e["revision"].as_u64())
        .unwrap();
    assert_eq!(text["entry"]["text"], "ECHO: hi");
    h.engine.shutdown(std::time::Duration::from_secs(5)).await;
}
