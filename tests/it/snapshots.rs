//! Snapshots of what leaves the process: the JSON-RPC answers of the workflow server behind
//! the MCP core (`McpServer::handle_bytes`, as a transport hands it a message), in the legacy
//! session era and the stateless 2026-07-28 era. Pinned: `tools/list` in both eras (with
//! `initialize` and `server/discover`), status documents of a completed and a paused run,
//! the run, stop, pause and resume acknowledgements, and the main error texts.
//!
//! Each answer is redacted before it is compared: the test's temporary folder, run ids and
//! the crate version are replaced by name, timestamps, uuids, durations, pids and ports by
//! insta filters, so a snapshot is the same on every machine and every run. A snapshot that
//! differs, or is missing, fails `cargo test` (insta's default; `CI=true` keeps it from
//! writing `.snap.new` files there). To accept an intended change, run the tests with
//! `INSTA_UPDATE=always` and review the diff of `tests/it/snapshots/`.

use std::sync::Arc;

use agentprism::mcp::{McpServer, ServerOptions, TransportContext, TransportKind};
use serde_json::{Value, json};

use crate::workflow_tool::{Setup, setup};

const HI: &str = "export const meta = { name: 'hi', description: 'says hi' };\nreturn await agent('hi', {model: 'codex'});";

const PAUSES: &str = "export const meta = { name: 'asks', description: 'asks first', model: 'codex' };\nconst a = await agent('one', {label: 'first'});\nconst ok = await checkpoint('continue?');\nreturn {a, ok};";

/// Needs a backend approval, so it stays active (pending) without executing.
const NEEDS_SETUP: &str = "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');";

const WITH_SCHEMA: &str = "export const meta = { name: 'typed', description: 'd', model: 'codex', inputSchema: { type: 'object', properties: { n: { type: 'integer', minimum: 1 } }, required: ['n'] } };\nreturn args.n;";

/// The workflow server behind the MCP core, one legacy session, and what to redact.
struct Wire {
    setup: Setup,
    server: Arc<McpServer>,
    session: String,
    /// Run ids seen so far, in order: each becomes `[RUN_ID_<n>]`.
    run_ids: std::sync::Mutex<Vec<String>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Wire {
    async fn new() -> Wire {
        let setup = setup();
        let server = Arc::new(McpServer::new(
            setup.server.clone(),
            ServerOptions::default(),
        ));
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "snapshots", "version": "1"}}});
        let outcome = server
            .handle_bytes(initialize.to_string().as_bytes(), transport(None))
            .await;
        let session = outcome.new_session.expect("initialize creates a session");
        Wire {
            setup,
            server,
            session,
            run_ids: Default::default(),
            next_id: 1.into(),
        }
    }

    fn id(&self) -> u64 {
        self.next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// One request in the legacy session; the JSON-RPC response.
    async fn legacy(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params});
        self.send(body, Some(&self.session)).await
    }

    /// One stateless 2026-07-28 request (`_meta` carries the version and capabilities).
    async fn stateless(&self, method: &str, mut params: Value) -> Value {
        let meta = &mut params["_meta"];
        if meta.is_null() {
            *meta = json!({});
        }
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let body = json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params});
        self.send(body, None).await
    }

    async fn send(&self, body: Value, session: Option<&str>) -> Value {
        let outcome = self
            .server
            .handle_bytes(body.to_string().as_bytes(), transport(session))
            .await;
        let response = outcome
            .response
            .unwrap_or_else(|| panic!("no response to {body}"));
        self.note_run_id(&response);
        response
    }

    /// A `workflow` tool call in the legacy session.
    async fn tool(&self, arguments: Value) -> Value {
        self.legacy(
            "tools/call",
            json!({"name": "workflow", "arguments": arguments}),
        )
        .await
    }

    async fn run(&self, script: &str) -> Value {
        self.tool(json!({"action": "run", "projectDir": self.setup.h.project, "script": script}))
            .await
    }

    /// Runs `script` until it settles (completes or pauses); its run id.
    async fn settled(&self, script: &str) -> String {
        let ack = self.run(script).await;
        let run_id = run_id_of(&ack);
        self.setup
            .h
            .engine
            .wait(&agentprism::model::RunId::parse(&run_id).unwrap())
            .await;
        run_id
    }

    fn note_run_id(&self, response: &Value) {
        let found = response
            .pointer("/result/structuredContent/runId")
            .and_then(Value::as_str);
        if let Some(run_id) = found {
            let mut ids = self.run_ids.lock().unwrap();
            if !ids.iter().any(|known| known == run_id) {
                ids.push(run_id.to_owned());
            }
        }
    }

    /// `value` as pretty JSON with this test's folder and run ids replaced by name; the
    /// filters of [`assert_wire`] do the rest.
    fn redacted(&self, value: &Value) -> String {
        let mut text = serde_json::to_string_pretty(value).unwrap();
        let folder = self.setup.h.project.parent().unwrap().display().to_string();
        text = text.replace(&folder, "[TMP]");
        for (index, run_id) in self.run_ids.lock().unwrap().iter().enumerate() {
            text = text.replace(run_id.as_str(), &format!("[RUN_ID_{}]", index + 1));
        }
        text.replace(env!("CARGO_PKG_VERSION"), "[VERSION]")
    }
}

fn transport(session: Option<&str>) -> TransportContext {
    let mut context = TransportContext::new(TransportKind::Http, "snapshots");
    context.session_id = session.map(str::to_owned);
    context
}

fn run_id_of(answer: &Value) -> String {
    answer
        .pointer("/result/structuredContent/runId")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no runId in {answer:#}"))
        .to_owned()
}

/// What varies between runs and machines, whatever named it: RFC 3339 times, uuids,
/// durations and elapsed times, pids, folder hashes, operation ids, loopback ports, and run
/// ids the test did not see.
const FILTERS: &[(&str, &str)] = &[
    (
        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
        "[TIME]",
    ),
    (
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[UUID]",
    ),
    (
        r#""(durationMs|elapsedMs|startedAtMs|updatedAtMs|finishedAtMs|waitedMs)": \d+"#,
        r#""$1": "[MS]""#,
    ),
    // A run summary's duration in words (`8.1s`, `2m 05s`), after its tokens or cost.
    (
        r" · (\d+ms|\d+\.\ds|\d+m \d{2}s|\d+h \d{2}m) \(generation",
        " · [DURATION] (generation",
    ),
    (r#""pid": \d+"#, r#""pid": "[PID]""#),
    // A project's store folder is named by a hash of its path, which is a temp dir here.
    (r"project-[0-9a-f]{12}\b", "project-[PATH_HASH]"),
    // Resume operation ids hash the session and request that made them.
    (r"\bmcp-[0-9a-f]{32}\b", "mcp-[OPERATION]"),
    (r"(127\.0\.0\.1|localhost|\[::1\]):\d+", "$1:[PORT]"),
    (r"\b[0-9a-z]{8,9}-[0-9a-z]{6}\b", "[OTHER_RUN_ID]"),
];

/// Compares `value`, redacted, with the snapshot `name`.
fn assert_wire(wire: &Wire, name: &str, value: &Value) {
    let text = wire.redacted(value);
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in FILTERS {
        settings.add_filter(pattern, *replacement);
    }
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

#[tokio::test]
async fn tools_list_and_the_handshake_in_both_eras() {
    let wire = Wire::new().await;
    let initialize = wire
        .send(
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "snapshots", "version": "1"}}}),
            None,
        )
        .await;
    assert_wire(&wire, "legacy_initialize", &initialize);
    let legacy = wire.legacy("tools/list", json!({})).await;
    assert_wire(&wire, "legacy_tools_list", &legacy);
    let stateless = wire.stateless("tools/list", json!({})).await;
    assert_wire(&wire, "stateless_tools_list", &stateless);
    let discover = wire.stateless("server/discover", json!({})).await;
    assert_wire(&wire, "stateless_server_discover", &discover);
    // The two eras list the same tools; only the result's envelope differs.
    assert_eq!(legacy["result"]["tools"], stateless["result"]["tools"]);
}

#[tokio::test]
async fn status_of_a_completed_and_of_a_paused_run() {
    let wire = Wire::new().await;
    let completed = wire.settled(HI).await;
    let status = wire
        .tool(json!({"action": "status", "runId": completed}))
        .await;
    assert_eq!(
        status["result"]["structuredContent"]["status"], "completed",
        "{status:#}"
    );
    assert_wire(&wire, "status_completed", &status);

    let paused = wire.settled(PAUSES).await;
    let status = wire
        .tool(json!({"action": "status", "runId": paused}))
        .await;
    assert_eq!(
        status["result"]["structuredContent"]["status"], "paused",
        "{status:#}"
    );
    assert_wire(&wire, "status_paused", &status);
    // The same document in the stateless era, with its result envelope.
    let stateless = wire
        .stateless(
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "status", "runId": paused}}),
        )
        .await;
    assert_wire(&wire, "stateless_status_paused", &stateless);
}

#[tokio::test]
async fn run_stop_pause_and_resume_acknowledgements() {
    let wire = Wire::new().await;
    let ack = wire.run(PAUSES).await;
    assert_wire(&wire, "ack_run", &ack);
    let paused = run_id_of(&ack);
    let id = agentprism::model::RunId::parse(&paused).unwrap();
    wire.setup.h.engine.wait(&id).await;

    let resumed = wire
        .tool(json!({"action": "resume", "runId": paused, "checkpointReplies": {"1": true}}))
        .await;
    assert_eq!(
        resumed["result"]["structuredContent"]["accepted"], true,
        "{resumed:#}"
    );
    assert_wire(&wire, "ack_resume", &resumed);
    wire.setup.h.engine.wait(&id).await;

    let completed = paused;
    let pause = wire
        .tool(json!({"action": "pause", "runId": completed}))
        .await;
    assert_wire(&wire, "ack_pause_completed", &pause);
    let stop = wire
        .tool(json!({"action": "stop", "runId": completed}))
        .await;
    assert_wire(&wire, "ack_stop_completed", &stop);

    let to_stop = wire.settled(PAUSES).await;
    let stop = wire.tool(json!({"action": "stop", "runId": to_stop})).await;
    assert_eq!(
        stop["result"]["structuredContent"]["stopped"], true,
        "{stop:#}"
    );
    assert_wire(&wire, "ack_stop_paused", &stop);
}

#[tokio::test]
async fn the_main_error_texts() {
    let wire = Wire::new().await;
    let project = wire.setup.h.project.clone();
    let cases = [
        (
            "error_unknown_run",
            json!({"action": "status", "runId": "zzz-yyy"}),
        ),
        (
            "error_invalid_field",
            json!({"action": "status", "runId": "abc-def", "maxBytes": 5}),
        ),
        (
            "error_invalid_value",
            json!({"action": "status", "runId": "abc-def", "lastN": 51}),
        ),
        (
            "error_input_schema",
            json!({"action": "run", "projectDir": project, "script": WITH_SCHEMA, "args": {"n": "two"}}),
        ),
        (
            "error_script_syntax",
            json!({"action": "run", "projectDir": project, "script": "export const meta = { name: 'bad', description: 'd' };\nreturn (;"}),
        ),
        (
            "error_script_without_meta",
            json!({"action": "run", "projectDir": project, "script": "return 1;"}),
        ),
    ];
    for (name, arguments) in cases {
        let answer = wire.tool(arguments.clone()).await;
        assert_eq!(answer["result"]["isError"], true, "{arguments}: {answer:#}");
        assert_wire(&wire, name, &answer);
    }

    // Capacity: a project holds four active runs; the fifth is refused.
    for _ in 0..4 {
        let ack = wire.run(NEEDS_SETUP).await;
        assert_eq!(
            ack["result"]["structuredContent"]["status"], "pending",
            "{ack:#}"
        );
    }
    let fifth = wire.run(NEEDS_SETUP).await;
    assert_eq!(fifth["result"]["isError"], true, "{fifth:#}");
    assert_wire(&wire, "error_project_capacity", &fifth);

    // Conflict: the same idempotency key with other arguments.
    let keyed = |arguments: Value| {
        json!({"name": "workflow", "arguments": arguments,
               "_meta": {"agentprism/idempotencyKey": "snapshots/1"}})
    };
    let other = project.parent().unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let first = wire
        .stateless(
            "tools/call",
            keyed(json!({"action": "run", "projectDir": other, "script": PAUSES})),
        )
        .await;
    assert_eq!(
        first["result"]["structuredContent"]["accepted"], true,
        "{first:#}"
    );
    let conflict = wire
        .stateless(
            "tools/call",
            keyed(
                json!({"action": "run", "projectDir": other, "script": PAUSES, "concurrency": 2}),
            ),
        )
        .await;
    assert_eq!(conflict["result"]["isError"], true, "{conflict:#}");
    assert_wire(&wire, "error_idempotency_conflict", &conflict);

    // Protocol errors: an unknown tool, and a stateless request of a version we do not speak.
    let unknown_tool = wire
        .legacy("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_wire(&wire, "error_unknown_tool", &unknown_tool);
    let old = json!({"jsonrpc": "2.0", "id": "v", "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "1999-01-01",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let unsupported = wire.send(old, None).await;
    assert_wire(&wire, "error_unsupported_version", &unsupported);
}
