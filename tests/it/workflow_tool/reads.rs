//! Reading a run through the tool and its resources: result pages, the events' tail and
//! cursor, redaction, bounded listings, the call filter, the script resources, and the
//! coalesced notices to subscribers.

use std::time::Duration;

use agentprism::mcp::handler::{McpHandler, ServerEvent, codes};
use serde_json::json;

use super::{HI, NEEDS_SETUP, fresh, is_error, parse_id, setup, text_of};

/// Scenario 20: pages never split a code point and concatenate to the resource text.
#[tokio::test]
async fn result_pages_keep_code_points_whole() {
    let s = setup();
    let run_id = s
        .run_to_end("export const meta = { name: 'x', description: 'd' };\nreturn 'é…ü漢字';")
        .await;
    let whole = s
        .read(&format!("workflow://runs/{run_id}/result"))
        .await
        .unwrap();
    let whole = whole["contents"][0]["text"].as_str().unwrap().to_owned();
    let mut offset = 0;
    let mut joined = String::new();
    loop {
        let page = s
            .call(json!({"action": "result", "runId": run_id, "offset": offset, "maxBytes": 4}))
            .await;
        let page = &page["structuredContent"];
        joined.push_str(page["chunk"].as_str().unwrap());
        offset = page["endOffset"].as_u64().unwrap();
        if page["hasMore"] == false {
            break;
        }
    }
    assert_eq!(joined, whole);
    let inside = s
        .call(json!({"action": "result", "runId": run_id, "offset": 2, "maxBytes": 4}))
        .await;
    assert!(is_error(&inside), "{inside:#}");
    let past = s
        .call(json!({"action": "result", "runId": run_id, "offset": 10_000}))
        .await;
    assert!(is_error(&past));
}

/// Scenario 21: no result before completion; reading a failed run is a success.
#[tokio::test]
async fn results_wait_for_completion_and_failed_runs_read_fine() {
    let s = setup();
    let pending = s.run(NEEDS_SETUP).await;
    let run_id = pending["structuredContent"]["runId"].as_str().unwrap();
    let result = s.call(json!({"action": "result", "runId": run_id})).await;
    assert!(is_error(&result));
    let resource = s
        .read(&format!("workflow://runs/{run_id}/result"))
        .await
        .unwrap_err();
    assert_eq!(resource.code, codes::RESOURCE_NOT_FOUND);

    // The dry run's fabricated answer passes; the live echo makes the script throw.
    let failed = s
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nconst r = await agent('hi');\nif (r.startsWith('ECHO')) throw new Error('boom');\nreturn r;")
        .await;
    let status = s.status(&failed).await;
    assert!(!is_error(&status), "{status:#}");
    assert_eq!(status["structuredContent"]["status"], "failed");
    assert!(text_of(&status).contains("failed"));
}

/// Scenario 22: the canonical events read is the newest 100; paging needs the stream id.
#[tokio::test]
async fn events_are_read_as_a_tail_and_paged_by_cursor() {
    let s = setup();
    let baseline = s
        .run_to_end("export const meta = { name: 'x', description: 'd' };\nreturn 1;")
        .await;
    let base = s
        .read_json(&format!("workflow://runs/{baseline}/events"))
        .await["endCursor"]
        .as_u64()
        .unwrap();
    let logs = 250 - base;
    let run_id = s
        .run_to_end(&format!("export const meta = {{ name: 'x', description: 'd' }};\nfor (let i = 0; i < {logs}; i++) log('line ' + i);\nreturn 1;"))
        .await;
    let uri = format!("workflow://runs/{run_id}/events");
    let tail = s.read_json(&uri).await;
    assert_eq!(tail["schemaVersion"], 1);
    assert_eq!(tail["events"].as_array().unwrap().len(), 100);
    assert_eq!(
        (
            tail["after"].as_u64(),
            tail["cursor"].as_u64(),
            tail["endCursor"].as_u64()
        ),
        (Some(150), Some(250), Some(250))
    );
    assert_eq!(tail["hasMore"], false);
    assert_eq!(tail["finalized"], true);
    assert_eq!(tail["workflowName"], "x");
    let stream = tail["streamId"].as_str().unwrap();
    assert_eq!(stream.len(), 32);
    let page = s
        .read_json(&format!("{uri}?after=0&limit=40&streamId={stream}"))
        .await;
    assert_eq!(page["events"].as_array().unwrap().len(), 40);
    assert_eq!(
        (page["cursor"].as_u64(), page["hasMore"].as_bool()),
        (Some(40), Some(true))
    );
    assert_eq!(page["events"][0]["seq"], 1);
    let wrong = s
        .read(&format!("{uri}?after=0&streamId={}", "0".repeat(32)))
        .await
        .unwrap_err();
    assert_eq!(wrong.code, codes::INVALID_PARAMS);
    let ahead = s
        .read(&format!("{uri}?after=251&streamId={stream}"))
        .await
        .unwrap_err();
    assert_eq!(ahead.code, codes::INVALID_PARAMS);
    let repeated = s
        .read(&format!("{uri}?after=1&after=2&streamId={stream}"))
        .await
        .unwrap_err();
    assert_eq!(repeated.code, codes::INVALID_PARAMS);
    let missing = s.read("workflow://runs/zzz-yyy/events").await.unwrap_err();
    assert_eq!(missing.code, codes::RESOURCE_NOT_FOUND);
    assert!(missing.message.contains("No workflow run found"));
    let malformed = s.read("workflow://runs/zzz/events").await.unwrap_err();
    assert_eq!(malformed.code, codes::INVALID_PARAMS);
}

/// Scenario 23: credentials are redacted in status and events, exact in the result.
#[tokio::test]
async fn credentials_are_redacted_except_in_the_exact_result() {
    let s = setup();
    let secret = "Bearer abcdefghijkl.mnopqrstuvwx";
    let run_id = s
        .run_to_end(&format!("export const meta = {{ name: 'x', description: 'd', model: 'codex' }};\nconst r = await agent('{secret}');\nlog(r);\nreturn r;"))
        .await;
    let status = s.status(&run_id).await;
    assert!(!text_of(&status).contains("abcdefghijkl"), "{status:#}");
    let mut shown = status["structuredContent"].clone();
    shown.as_object_mut().unwrap().remove("outcome");
    assert!(!shown.to_string().contains("abcdefghijkl"), "{shown:#}");
    let events = s
        .read(&format!("workflow://runs/{run_id}/events"))
        .await
        .unwrap();
    assert!(!events.to_string().contains("abcdefghijkl"));
    let result = s
        .read(&format!("workflow://runs/{run_id}/result"))
        .await
        .unwrap();
    assert!(
        result["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains(secret)
    );
}

/// Scenario 24: listings show the 50 newest runs; older runs stay readable by URI.
#[tokio::test]
async fn listings_are_bounded_but_direct_reads_are_not() {
    let s = setup();
    let mut ids = Vec::new();
    for _ in 0..60 {
        ids.push(
            s.run_to_end("export const meta = { name: 'x', description: 'd' };\nreturn 1;")
                .await,
        );
        // started_at has millisecond resolution; keep the order unambiguous.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let list = s.server.list_resources(&fresh(), None).await.unwrap();
    let resources = list["resources"].as_array().unwrap();
    let events: Vec<&str> = resources
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .filter(|uri| uri.ends_with("/events"))
        .collect();
    assert_eq!(events.len(), 50);
    let results = resources
        .iter()
        .filter(|r| r["uri"].as_str().unwrap().ends_with("/result"))
        .count();
    assert_eq!(results, 50);
    let scripts = resources
        .iter()
        .filter(|r| r["mimeType"] == "text/javascript")
        .count();
    assert_eq!(scripts, 50);
    let oldest = &ids[0];
    assert!(!events.contains(&format!("workflow://runs/{oldest}/events").as_str()));
    let read = s
        .read_json(&format!("workflow://runs/{oldest}/events"))
        .await;
    assert_eq!(read["runId"], oldest.as_str());
    let completion = s
        .server
        .complete(&fresh(), json!({"ref": {"type": "ref/resource", "uri": "workflow://runs/{id}/result"}, "argument": {"name": "id", "value": ""}}))
        .await
        .unwrap();
    assert_eq!(
        completion["completion"]["values"].as_array().unwrap().len(),
        50
    );
    let newest = ids.last().unwrap();
    let prefixed = s
        .server
        .complete(&fresh(), json!({"ref": {"type": "ref/resource", "uri": "workflow://runs/{id}/events"}, "argument": {"name": "id", "value": newest}}))
        .await
        .unwrap();
    assert_eq!(prefixed["completion"]["values"], json!([newest]));
}

/// Scenario 25: labelGlob then lastN, ascending.
#[tokio::test]
async fn status_filters_calls_by_label_glob() {
    let s = setup();
    let run_id = s
        .run_to_end("export const meta = { name: 'x', description: 'd', model: 'codex' };\nfor (const n of [1, 2, 3]) { await agent('r' + n, {label: 'review:' + n}); await agent('w' + n, {label: 'write:' + n}); }\nreturn 1;")
        .await;
    let status = s
        .call(json!({"action": "status", "runId": run_id, "labelGlob": "review:*", "lastN": 2}))
        .await;
    let labels: Vec<&str> = status["structuredContent"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["label"].as_str())
        .collect();
    assert_eq!(labels, ["review:2", "review:3"]);
}

/// Only files a run recorded are script resources; they read their current text.
#[tokio::test]
async fn script_resources_are_only_recorded_files() {
    let s = setup();
    let ack = s.run(HI).await;
    let document = &ack["structuredContent"];
    let uri = document["scriptUri"].as_str().unwrap();
    let read = s.read(uri).await.unwrap();
    assert_eq!(read["contents"][0]["mimeType"], "text/javascript");
    assert_eq!(read["contents"][0]["text"], HI);
    let path = document["scriptPath"].as_str().unwrap();
    std::fs::write(path, "// edited\n").unwrap();
    assert_eq!(
        s.read(uri).await.unwrap()["contents"][0]["text"],
        "// edited\n"
    );

    let stranger = s.h.project.join("stranger.js");
    std::fs::write(&stranger, "secret").unwrap();
    let error = s
        .read(&format!("file://{}", stranger.display()))
        .await
        .unwrap_err();
    assert_eq!(error.code, codes::RESOURCE_NOT_FOUND);
    let error = s.read("file:///etc/passwd").await.unwrap_err();
    assert_eq!(error.code, codes::RESOURCE_NOT_FOUND);

    // A scriptPath run records the caller's own file.
    let own = s.h.project.join("own.js");
    std::fs::write(&own, HI).unwrap();
    let ack = s
        .call(json!({"action": "run", "projectDir": s.h.project, "scriptPath": own}))
        .await;
    assert_eq!(ack["structuredContent"]["scriptSource"], "path", "{ack:#}");
    assert_eq!(
        ack["structuredContent"]["scriptPath"],
        own.display().to_string()
    );
    let read = s.read(&format!("file://{}", own.display())).await.unwrap();
    assert_eq!(read["contents"][0]["text"], HI);
}

/// Appended events become coalesced `resources/updated` hints; admission and a result
/// becoming available change the list.
#[tokio::test]
async fn event_appends_notify_subscribers_coalesced() {
    let s = setup();
    let mut hub = s.server.hub().subscribe();
    let run_id = s
        .run_to_end("export const meta = { name: 'x', description: 'd' };\nfor (let i = 0; i < 300; i++) log('line ' + i);\nreturn 1;")
        .await;
    let uri = format!("workflow://runs/{run_id}/events");
    s.server
        .check_subscribe(&fresh(), &uri)
        .await
        .expect("canonical events URI is subscribable");
    let mut updates = 0;
    let mut list_changes = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1000);
    while let Ok(Ok(event)) = tokio::time::timeout_at(deadline, hub.recv()).await {
        match event {
            ServerEvent::ResourceUpdated { uri: updated } if updated == uri => updates += 1,
            ServerEvent::ResourcesListChanged => list_changes += 1,
            _ => {}
        }
    }
    let appended = s.read_json(&uri).await["endCursor"].as_u64().unwrap();
    assert!(appended > 300);
    assert!(
        (1..=10).contains(&updates),
        "{updates} notifications for {appended} events"
    );
    eprintln!("coalesced: {updates} notifications for {appended} events");
    // Admission and the completed result, coalesced when close together.
    assert!((1..=2).contains(&list_changes), "{list_changes}");

    let query = s
        .server
        .check_subscribe(
            &fresh(),
            &format!("{uri}?after=0&streamId={}", "a".repeat(32)),
        )
        .await
        .unwrap_err();
    assert_eq!(query.code, codes::INVALID_PARAMS);
    let unknown = s
        .server
        .check_subscribe(&fresh(), "workflow://runs/zzz-yyy/events")
        .await
        .unwrap_err();
    assert_eq!(unknown.code, codes::RESOURCE_NOT_FOUND);

    s.server.delete_run(&parse_id(&run_id)).await.unwrap();
    let mut deleted = false;
    while let Ok(Ok(event)) = tokio::time::timeout(Duration::from_millis(200), hub.recv()).await {
        deleted |= event == ServerEvent::ResourceDeleted { uri: uri.clone() };
    }
    assert!(deleted);
    assert_eq!(
        s.read(&uri).await.unwrap_err().code,
        codes::RESOURCE_NOT_FOUND
    );
    s.server.shutdown().await;
}
