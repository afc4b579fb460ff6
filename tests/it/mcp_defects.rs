//! Regression tests for MCP behaviours real clients depend on: stateless exact retries, skill directory caching fields, GET stream replay,
//! `subscriptions/listen` acknowledgements, `list_changed` per admission and deletion, no
//! progress after admission, and tool-call error shaping.

use std::sync::Arc;
use std::time::Duration;

use agentprism::mcp::handler::{Era, McpHandler, RequestContext, RequestNotifier, ServerEvent};
use agentprism::mcp::{McpServer, ServerOptions, TransportContext, TransportKind};
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

use crate::workflow_tool::{Setup, setup};

const WAIT: Duration = Duration::from_secs(30);

const PAUSES: &str = "export const meta = { name: 'p', description: 'd', model: 'codex' };\nawait agent('one');\nconst ok = await checkpoint('go on?');\nreturn ok;";

/// A stateless (2026-07-28) request context with JSON-RPC id `id`.
fn stateless(id: Value) -> RequestContext {
    let mut context = crate::workflow_tool::context(None, id);
    context.era = Era::Modern {
        version: "2026-07-28".into(),
    };
    context
}

fn run_id_of(result: &Value) -> agentprism::model::RunId {
    let id = result["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId in {result:#}"));
    agentprism::model::RunId::parse(id).unwrap()
}

impl Setup {
    async fn tool(&self, ctx: &RequestContext, arguments: Value) -> Value {
        self.server
            .tools()
            .call(ctx, "workflow", &arguments)
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .unwrap_or_else(|e| panic!("{arguments}: {e}"))
    }

    /// Starts the pausing script with a stateless request (id 1); its run id.
    async fn stateless_run(&self) -> agentprism::model::RunId {
        let arguments = json!({"action": "run", "projectDir": self.h.project, "script": PAUSES});
        run_id_of(&self.tool(&stateless(json!(1)), arguments).await)
    }
}
/// Stateless ids restart at 1 in every client, so id + arguments is no identity.
/// Two clients' `run`s with the same id and script are two runs; only the same
/// `_meta["agentprism/idempotencyKey"]` with the same arguments is a retry.
#[tokio::test]
async fn stateless_runs_are_retries_only_by_idempotency_key() {
    let s = setup();
    let arguments = json!({"action": "run", "projectDir": s.h.project, "script": PAUSES});
    let first = s.tool(&stateless(json!(1)), arguments.clone()).await;
    let second = s.tool(&stateless(json!(1)), arguments.clone()).await;
    assert_ne!(
        run_id_of(&first),
        run_id_of(&second),
        "an unrelated client's run got an old acknowledgement"
    );
    let keyed = || {
        let mut ctx = stateless(json!(1));
        ctx.meta = json!({"agentprism/idempotencyKey": "client-a/1"});
        ctx
    };
    let keyed_first = s.tool(&keyed(), arguments.clone()).await;
    let keyed_again = s.tool(&keyed(), arguments.clone()).await;
    assert_eq!(keyed_first, keyed_again);
    assert_eq!(s.h.engine.list(None, 50).await.unwrap().len(), 3);
    let mut other = arguments.clone();
    other["concurrency"] = json!(2);
    let conflict = s.tool(&keyed(), other).await;
    assert_eq!(conflict["isError"], true, "{conflict:#}");
    assert_eq!(s.h.engine.list(None, 50).await.unwrap().len(), 3);
    let mut bad = stateless(json!(2));
    bad.meta = json!({"agentprism/idempotencyKey": 7});
    assert_eq!(s.tool(&bad, arguments).await["isError"], true);
}

/// A stateless `resume` receipt answers only while the generation it started is
/// the latest and still going. Once that generation paused (or was stopped), the same id
/// and arguments resume the run again, in memory and through the engine's durable receipt
/// (a new server over the same engine has no in-memory receipts).
#[tokio::test]
async fn a_stateless_resume_receipt_goes_stale_once_its_generation_ends() {
    let s = setup();
    let run_id = s.stateless_run().await;
    s.h.engine.wait(&run_id).await;
    let resume = json!({"action": "resume", "runId": run_id.to_string()});
    let generation =
        |answer: &Value| answer["structuredContent"]["continuation"]["generation"].clone();

    let resumed = s.tool(&stateless(json!(1)), resume.clone()).await;
    assert_eq!(generation(&resumed), 2, "{resumed:#}");
    s.h.engine.wait(&run_id).await;
    // The checkpoint paused generation 2 again: the same request is a new resume.
    let again = s.tool(&stateless(json!(1)), resume.clone()).await;
    assert_eq!(generation(&again), 3, "a stale receipt answered: {again:#}");
    s.h.engine.wait(&run_id).await;

    let restarted = WorkflowServer::new(s.h.engine.clone(), WorkflowServerOptions::default());
    let durable = restarted
        .tools()
        .call(&stateless(json!(1)), "workflow", &resume)
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap();
    assert_eq!(
        generation(&durable),
        4,
        "a stale durable receipt answered: {durable:#}"
    );
    let record = s.h.engine.load_reconciled(&run_id).await.unwrap();
    assert_eq!(record.generation, 4);
}

/// A run admitted and settled within the coalescing window changes the resource
/// list once, not once for the admission and again for its result; a run that pauses
/// changes it once too.
#[tokio::test]
async fn one_admission_is_one_list_change() {
    const COMPLETES: &str = "export const meta = { name: 'c', description: 'd', model: 'codex' };\nreturn await agent('one');";
    for script in [PAUSES, COMPLETES] {
        let s = setup();
        let mut hub = s.server.hub().subscribe();
        let started = std::time::Instant::now();
        let ack = s
            .tool(
                &stateless(json!(1)),
                json!({"action": "run", "projectDir": s.h.project, "script": script}),
            )
            .await;
        let run_id = run_id_of(&ack);
        s.h.engine.wait(&run_id).await;
        let settled_after = started.elapsed();
        // Wait for the first list change and the settled run's hints, then close the count
        // with a marker published after them.
        let events_uri = format!("workflow://runs/{run_id}/events");
        let (mut list_changes, mut hints) = (0, 0);
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut next = async || match tokio::time::timeout_at(deadline, hub.recv()).await {
            Ok(Ok(event)) => event,
            other => panic!("the hub ended early: {other:?}"),
        };
        while list_changes == 0 || hints < 2 {
            match next().await {
                ServerEvent::ResourcesListChanged => list_changes += 1,
                ServerEvent::ResourceUpdated { uri } if uri == events_uri => hints += 1,
                _ => {}
            }
        }
        s.server.hub().publish(ServerEvent::ToolsListChanged);
        loop {
            match next().await {
                ServerEvent::ResourcesListChanged => list_changes += 1,
                ServerEvent::ToolsListChanged => break,
                _ => {}
            }
        }
        if settled_after < Duration::from_millis(200) {
            assert_eq!(list_changes, 1, "{script}");
        } else {
            // A slow machine settled the run after the window: two changes are right then.
            eprintln!("the run took {settled_after:?}; {list_changes} list changes");
            assert!(list_changes <= 2);
        }
    }
}

/// No progress notification after admission: sent that close to the response, it
/// can arrive after it, when the client no longer knows the token.
#[tokio::test]
async fn no_progress_follows_admission() {
    let s = setup();
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = stateless(json!(1));
    ctx.progress_token = Some(json!("tok"));
    ctx.notifier = RequestNotifier::new(sender);
    let ack = s
        .tool(
            &ctx,
            json!({"action": "run", "projectDir": s.h.project, "script": PAUSES}),
        )
        .await;
    assert_eq!(ack["structuredContent"]["accepted"], true, "{ack:#}");
    drop(ctx);
    let mut progress = Vec::new();
    while let Some(notification) = receiver.recv().await {
        progress.push(notification.params);
    }
    assert!(!progress.is_empty(), "preparation reports progress");
    for params in &progress {
        assert!(
            params["progress"].as_f64() < params["total"].as_f64(),
            "a progress notification says the work is done before the response does: {params}"
        );
    }
}

/// Input the tool refuses is a tool execution error the model can correct: the
/// same text, `isError: true`, `structuredContent.error = {action, field, accepted}`; an
/// unknown tool stays -32602.
#[tokio::test]
async fn invalid_tool_input_is_a_tool_execution_error() {
    let s = setup();
    let result = s
        .tool(
            &stateless(json!(1)),
            json!({"action": "status", "runId": "abc-def", "maxBytes": 5}),
        )
        .await;
    assert_eq!(result["isError"], true, "{result:#}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("workflow action \"status\": field \"maxBytes\""),
        "{text}"
    );
    assert_eq!(
        result["structuredContent"]["error"],
        json!({"action": "status", "field": "maxBytes",
               "accepted": ["action", "runId", "lastN", "labelGlob", "logLines"]})
    );
    let unknown = s
        .server
        .tools()
        .call(&stateless(json!(2)), "nope", &json!({}))
        .await
        .map(agentprism::mcp::ToolAnswer::into_value)
        .unwrap_err();
    assert_eq!(
        unknown.code,
        agentprism::mcp::handler::codes::INVALID_PARAMS
    );
}

/// The workflow server behind the MCP core, for tests that need the core's dispatch.
fn core(s: &Setup) -> Arc<McpServer> {
    Arc::new(McpServer::new(s.server.clone(), ServerOptions::default()))
}

/// `subscriptions/listen` acknowledges only URIs it will honour: the canonical
/// events URI of an existing run, not a query URI nor an unknown run's.
#[tokio::test]
async fn listen_acknowledges_only_subscribable_uris() {
    let s = setup();
    let run_id = s.stateless_run().await;
    let events = format!("workflow://runs/{run_id}/events");
    let query = format!("{events}?after=0&limit=5&streamId={}", "a".repeat(32));
    let unknown = "workflow://runs/zzz-yyy/events".to_owned();
    let server = core(&s);
    let (sender, mut notes) = agentprism::mcp::outbox::outbox();
    let mut transport = TransportContext::new(TransportKind::Http, "listen");
    transport.notifications = Some(sender);
    let stop = transport.cancel.clone();
    let listen = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": {"resourcesListChanged": true,
                          "resourceSubscriptions": [events, query, unknown]}}});
    let task = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .handle_bytes(listen.to_string().as_bytes(), transport)
                .await
        })
    };
    let acknowledged = tokio::time::timeout(WAIT, notes.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        acknowledged["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        acknowledged["params"]["notifications"],
        json!({"resourcesListChanged": true, "resourceSubscriptions": [events]}),
        "{acknowledged}"
    );
    stop.cancel();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

/// A request cancelled with `notifications/cancelled` gets no response, and
/// `resource_link` blocks reach only sessions at 2025-06-18 or newer.
#[tokio::test]
async fn resource_links_go_only_to_sessions_that_know_them() {
    let s = setup();
    let server = core(&s);
    for (version, links) in [
        ("2025-03-26", false),
        ("2025-06-18", true),
        ("2025-11-25", true),
    ] {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let outcome = server
            .handle_bytes(
                init.to_string().as_bytes(),
                TransportContext::new(TransportKind::Stdio, version),
            )
            .await;
        let session = outcome.new_session.expect("a session");
        let mut transport = TransportContext::new(TransportKind::Stdio, version);
        transport.session_id = Some(session);
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "workflow",
            "arguments": {"action": "run", "projectDir": s.h.project, "script": PAUSES}}});
        let outcome = server
            .handle_bytes(call.to_string().as_bytes(), transport)
            .await;
        let result = &outcome.response.expect("a response")["result"];
        let kinds: Vec<&str> = result["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|block| block["type"].as_str())
            .collect();
        assert_eq!(
            kinds.contains(&"resource_link"),
            links,
            "{version}: {kinds:?}"
        );
        assert_eq!(kinds[0], "text", "{version}");
    }
}

/// With a daemon running, `agentprism runs rm` goes through it (the signed control
/// socket), so its MCP sessions hear `resources/list_changed`.
#[test]
fn runs_rm_through_the_daemon_tells_its_sessions() {
    use std::io::{Read, Write};

    use crate::daemon::{
        HEADER, World, mcp_post, open_session, start_run_over_http, wait_for, wait_ready,
    };
    use crate::support::context::DEADLINE;

    let world = World::new();
    let _daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let port = record.port;
    let session = open_session(port);

    // The session's GET stream, read as raw bytes.
    let mut get = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    get.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        get,
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    let mut read_until = |count: usize| {
        let mut buffer = [0u8; 4096];
        while seen.matches("notifications/resources/list_changed").count() < count {
            let n = get
                .read(&mut buffer)
                .unwrap_or_else(|e| panic!("waiting for list change {count}: {e}\n{seen}"));
            assert!(n > 0, "the GET stream ended:\n{seen}");
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    };

    // A run that pauses at a checkpoint: its admission is the only list change before rm.
    let script = format!("{HEADER}await agent('hi');\nawait checkpoint('go on?');\nreturn 1;\n");
    let run_id = start_run_over_http(port, &session, &world.ctx.project(), &script);
    read_until(1);
    let status = |run_id: &str| {
        mcp_post(
            port,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                "name": "workflow", "arguments": {"action": "status", "runId": run_id}}}),
        )
        .json()["result"]
            .clone()
    };
    wait_for("the run to pause", DEADLINE, || {
        (status(&run_id)["structuredContent"]["status"] == "paused").then_some(())
    });

    let removed = world.run(&["runs", "rm", &run_id]);
    assert_eq!(removed.code(), 0, "{}", removed.stderr);
    assert!(
        removed.stderr.contains("through the daemon"),
        "{}",
        removed.stderr
    );
    read_until(2);
    let gone = status(&run_id);
    assert_eq!(gone["isError"], true, "{gone}");

    // An unknown run is refused by the daemon with the usual text.
    let again = world.run(&["runs", "rm", &run_id]);
    assert_ne!(again.code(), 0);
    assert!(
        again.stderr.contains("No workflow run found"),
        "{}",
        again.stderr
    );
}
