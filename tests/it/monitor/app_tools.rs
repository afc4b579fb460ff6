//! The app-only tools and the launcher: shapes as `docs/monitor.md` pins them, every limit at
//! its edge, unknown runs as the `workflow` tool's own error, and the receipt ledger (first
//! claim wins per host scope). Calls go through the MCP core as an MCP Apps host makes them.

use serde_json::{Value, json};

use super::{Host, is_error, text_of, ui};
use crate::engine::harness;

const HEADER: &str = "export const meta = { name: 'mon', description: 'd', model: 'codex' };\n";
const UNKNOWN: &str = "zzzz0000-unknown";

async fn ui_host() -> (Host, String) {
    let host = Host::new(harness());
    let session = host.initialize(ui()).await;
    (host, session)
}

/// A refusal that names `needle`.
fn refused(result: &Value, needle: &str) {
    assert!(is_error(result), "{result:#}");
    assert!(text_of(result).contains(needle), "{needle}: {result:#}");
}

#[tokio::test]
async fn the_launcher_answers_the_run_it_binds_to() {
    let (host, session) = ui_host().await;
    let run_id = host
        .run(&session, &format!("{HEADER}return await agent('a');"))
        .await;
    host.settle(&run_id).await;
    let opened = host
        .call(&session, "workflow_monitor", json!({"runId": run_id}))
        .await;
    assert!(!is_error(&opened), "{opened:#}");
    assert_eq!(
        opened["structuredContent"],
        json!({"runId": run_id, "status": "completed", "workflowName": "mon"})
    );
    let unknown = host
        .call(&session, "workflow_monitor", json!({"runId": UNKNOWN}))
        .await;
    refused(
        &unknown,
        &format!("No workflow run found for runId \"{UNKNOWN}\""),
    );
    refused(
        &host.call(&session, "workflow_monitor", json!({})).await,
        "runId is required",
    );
    refused(
        &host
            .call(
                &session,
                "workflow_monitor",
                json!({"runId": run_id, "x": 1}),
            )
            .await,
        "unknown field \"x\"",
    );
    refused(
        &host
            .call(&session, "workflow_monitor", json!({"runId": 7}))
            .await,
        "runId must be a string",
    );
}

#[tokio::test]
async fn workflow_runs_puts_active_runs_first_within_its_limit() {
    let (host, session) = ui_host().await;
    let paused = host
        .run(
            &session,
            &format!("{HEADER}await agent('a');\nreturn await checkpoint('go?');"),
        )
        .await;
    host.settle(&paused).await;
    let mut finished = Vec::new();
    for _ in 0..2 {
        let run_id = host
            .run(&session, &format!("{HEADER}return await agent('b');"))
            .await;
        host.settle(&run_id).await;
        finished.push(run_id);
    }
    let listed = host.call(&session, "workflow-runs", json!({})).await;
    let runs = listed["structuredContent"]["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["runId"].as_str().unwrap()).collect();
    // The paused run is the oldest, yet first; the finished ones follow (newest first, but
    // two runs started within one millisecond may tie, so only the set is asserted).
    assert_eq!(ids.len(), 3, "{listed:#}");
    assert_eq!(ids[0], paused, "{listed:#}");
    assert!(ids[1..].contains(&finished[0].as_str()) && ids[1..].contains(&finished[1].as_str()));
    let first = &runs[0];
    assert_eq!(first["status"], "paused");
    assert_eq!(first["workflowName"], "mon");
    assert_eq!(first["projectDir"], json!(host.h.project));
    for key in ["startedAt", "updatedAt"] {
        assert!(
            first[key].as_str().unwrap().ends_with('Z'),
            "{key}: {first}"
        );
    }
    let one = host
        .call(&session, "workflow-runs", json!({"limit": 1}))
        .await;
    assert_eq!(
        one["structuredContent"]["runs"].as_array().unwrap().len(),
        1
    );
    let fifty = host
        .call(&session, "workflow-runs", json!({"limit": 50}))
        .await;
    assert_eq!(
        fifty["structuredContent"]["runs"].as_array().unwrap().len(),
        3
    );
    for limit in [json!(0), json!(51), json!(-1), json!("5"), json!(1.5)] {
        refused(
            &host
                .call(&session, "workflow-runs", json!({"limit": limit}))
                .await,
            "limit must be a whole number from 1 to 50",
        );
    }
    let elsewhere = host
        .call(
            &session,
            "workflow-runs",
            json!({"projectDir": "/nonexistent/project"}),
        )
        .await;
    assert_eq!(
        elsewhere["structuredContent"]["runs"],
        json!([]),
        "{elsewhere:#}"
    );
    refused(
        &host
            .call(&session, "workflow-runs", json!({"projectDir": "relative"}))
            .await,
        "projectDir must be an absolute path",
    );
}

#[tokio::test]
async fn workflow_events_is_the_status_document_and_an_events_page() {
    let (host, session) = ui_host().await;
    let run_id = host
        .run(
            &session,
            &format!(
                "{HEADER}for (let i = 0; i < 3; i++) log('line ' + i);\nreturn await agent('a');"
            ),
        )
        .await;
    host.settle(&run_id).await;
    let status = host
        .call(
            &session,
            "workflow",
            json!({"action": "status", "runId": run_id}),
        )
        .await;
    let fed = host
        .call(
            &session,
            "workflow-events",
            json!({"runId": run_id, "limit": 2}),
        )
        .await;
    assert!(!is_error(&fed), "{fed:#}");
    let fed = &fed["structuredContent"];
    assert_eq!(
        fed["status"], status["structuredContent"],
        "the workflow tool's own document"
    );
    let events = &fed["events"];
    let stream = events["streamId"].as_str().unwrap();
    let resource = host
        .legacy(
            &session,
            "resources/read",
            json!({"uri": format!("workflow://runs/{run_id}/events?after=0&limit=2&streamId={stream}")}),
        )
        .await;
    let page: Value =
        serde_json::from_str(resource["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(*events, page, "the events resource's own document");
    assert_eq!(events["events"].as_array().unwrap().len(), 2);
    let end = events["endCursor"].as_u64().unwrap();
    assert!(end > 2, "{events:#}");

    let at = |after: Value, limit: Value| {
        let host = &host;
        let session = session.clone();
        let run_id = run_id.clone();
        async move {
            host.call(
                &session,
                "workflow-events",
                json!({"runId": run_id, "after": after, "limit": limit}),
            )
            .await
        }
    };
    let last = at(json!(end), json!(1000)).await;
    assert_eq!(
        last["structuredContent"]["events"]["events"],
        json!([]),
        "{last:#}"
    );
    let all = at(json!(0), json!(1000)).await;
    assert_eq!(
        all["structuredContent"]["events"]["events"]
            .as_array()
            .unwrap()
            .len() as u64,
        end
    );
    let one = at(json!(0), json!(1)).await;
    assert_eq!(
        one["structuredContent"]["events"]["events"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    refused(
        &at(json!(end + 1), json!(1)).await,
        "ahead of the run's event stream",
    );
    refused(
        &at(json!(-1), json!(1)).await,
        "after must be a whole number from 0",
    );
    refused(
        &at(json!(0), json!(0)).await,
        "limit must be a whole number from 1 to 1000",
    );
    refused(
        &at(json!(0), json!(1001)).await,
        "limit must be a whole number from 1 to 1000",
    );
    let unknown = host
        .call(&session, "workflow-events", json!({"runId": UNKNOWN}))
        .await;
    refused(&unknown, "No workflow run found");
}

#[tokio::test]
async fn notifications_are_claimed_once_per_host_scope() {
    let (host, first) = ui_host().await;
    let second = host.initialize(ui()).await;
    let run_id = host
        .run(&first, &format!("{HEADER}return await agent('a');"))
        .await;
    host.settle(&run_id).await;
    let listed = host
        .call(&first, "workflow-notifications", json!({"runId": run_id}))
        .await;
    let notifications = listed["structuredContent"]["notifications"]
        .as_array()
        .unwrap();
    assert_eq!(notifications.len(), 1, "{listed:#}");
    let terminal = &notifications[0];
    assert_eq!(terminal["kind"], "terminal");
    assert_eq!(terminal["status"], "completed");
    assert_eq!(terminal["claimed"], false);
    assert!(terminal["content"].as_str().unwrap().contains(&run_id));
    let event_id = terminal["eventId"].as_str().unwrap();
    assert_eq!(event_id, "terminal-1-completed");

    let claim = |session: String| {
        let host = &host;
        let run_id = run_id.clone();
        async move {
            host.call(
                &session,
                "workflow-notifications",
                json!({"runId": run_id, "claim": event_id}),
            )
            .await["structuredContent"]
                .clone()
        }
    };
    assert_eq!(
        claim(first.clone()).await,
        json!({"runId": run_id, "eventId": event_id, "claimed": true})
    );
    assert_eq!(
        claim(first.clone()).await["claimed"],
        false,
        "the first claim won"
    );
    assert_eq!(
        claim(second.clone()).await["claimed"],
        true,
        "another host scope"
    );
    let relisted = host
        .call(&first, "workflow-notifications", json!({"runId": run_id}))
        .await;
    assert_eq!(
        relisted["structuredContent"]["notifications"][0]["claimed"],
        true
    );

    // 2026-07-28 views of the daemon's one user share the local scope.
    let modern_claim = json!({"name": "workflow-notifications", "arguments": {"runId": run_id, "claim": event_id}});
    let won = host.modern(ui(), "tools/call", modern_claim.clone()).await;
    assert_eq!(
        won["result"]["structuredContent"]["claimed"], true,
        "{won:#}"
    );
    let lost = host.modern(ui(), "tools/call", modern_claim).await;
    assert_eq!(lost["result"]["structuredContent"]["claimed"], false);

    // An id that is not one of the run's messages is never recorded.
    let longest = "x".repeat(256);
    let stray = host
        .call(
            &first,
            "workflow-notifications",
            json!({"runId": run_id, "claim": longest}),
        )
        .await;
    assert_eq!(stray["structuredContent"]["claimed"], false, "{stray:#}");
    for bad in [json!(""), json!("x".repeat(257)), json!(3)] {
        refused(
            &host
                .call(
                    &first,
                    "workflow-notifications",
                    json!({"runId": run_id, "claim": bad}),
                )
                .await,
            "claim must be an eventId",
        );
    }
}
