//! Traces and metrics of runs over OTLP/HTTP protobuf (docs/observability.md), checked
//! against a receiver the test starts on loopback: it decodes every `ExportTraceServiceRequest`
//! and `ExportMetricsServiceRequest` a real daemon posts while the mock agent runs a workflow,
//! and the tests look at the span tree (parents by id), the attributes, the metrics and the
//! `traceparent` the agent got in `session/prompt`'s `_meta`, and a run paused on a
//! checkpoint and resumed staying in one trace with its wait and its replayed call. Also: a
//! daemon told telemetry is disabled sends nothing, and one asked for a protocol it cannot do
//! refuses to start, naming the variable.
//!
//! Each test has its own HOME, state folder and ports; waits poll the receiver or the store
//! under a deadline; every process started is killed when the test ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentprism::discovery::record::read_own_record;
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::daemon::{mcp_post, open_session, try_http};
use crate::support::context::{DEADLINE, Running, TestContext};
use crate::support::http1::{self, Handler, RecordedRequest, Response};

const AGENT_LOG: &str = "agents.log";

/// An OTLP/HTTP receiver: keeps every request and answers an empty success.
#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<RecordedRequest>>,
}

impl Handler for Receiver {
    async fn respond(&self, _request: &RecordedRequest) -> Response {
        Response {
            status: 200,
            content_type: "application/x-protobuf",
            body: Vec::new(),
            retry_after: None,
            headers: None,
        }
    }

    fn record(&self, request: RecordedRequest) {
        http1::lock(&self.requests).push(request);
    }

    fn bad_request(&self, problem: &str) -> Response {
        Response {
            status: 400,
            content_type: "text/plain",
            body: problem.as_bytes().to_vec(),
            retry_after: None,
            headers: None,
        }
    }

    fn name(&self) -> &'static str {
        "otlp receiver"
    }
}

impl Receiver {
    fn spans(&self) -> Vec<Span> {
        http1::lock(&self.requests)
            .iter()
            .filter(|request| request.path == "/v1/traces")
            .flat_map(|request| {
                ExportTraceServiceRequest::decode(request.body.as_slice())
                    .expect("an ExportTraceServiceRequest")
                    .resource_spans
            })
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans)
            .collect()
    }

    fn metric_names(&self) -> Vec<String> {
        http1::lock(&self.requests)
            .iter()
            .filter(|request| request.path == "/v1/metrics")
            .flat_map(|request| {
                ExportMetricsServiceRequest::decode(request.body.as_slice())
                    .expect("an ExportMetricsServiceRequest")
                    .resource_metrics
            })
            .flat_map(|resource| resource.scope_metrics)
            .flat_map(|scope| scope.metrics)
            .map(|metric| metric.name)
            .collect()
    }

    fn count(&self) -> usize {
        http1::lock(&self.requests).len()
    }
}

/// The receiver on an ephemeral loopback port, served by its own runtime for the test's life.
fn receiver() -> (Arc<Receiver>, u16, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind the receiver");
    let port = listener.local_addr().expect("its port").port();
    let receiver = Arc::new(Receiver::default());
    runtime.spawn(http1::accept_loop(listener, receiver.clone()));
    (receiver, port, runtime)
}

fn context(otel: &[(&str, String)]) -> TestContext {
    let ctx = TestContext::new();
    let log = ctx.path(AGENT_LOG);
    let mut ctx = ctx
        .with_mock_backend(json!({"MOCK_ACP_LOG": log}))
        .set("AGENTPRISM_DAEMON_PORT", "0");
    for (key, value) in otel {
        ctx = ctx.set(key, value.clone());
    }
    ctx
}

/// `agentprism daemon run` and its port, once its record is written and `/healthz` answers.
fn daemon(ctx: &TestContext) -> (Running, u16) {
    let daemon = ctx.spawn(&["daemon", "run"]);
    let path = ctx
        .state()
        .join(format!("daemons/instances/{}.json", daemon.pid()));
    let port = wait_for("the daemon's record", || {
        read_own_record(&path)
            .filter(|record| {
                try_http(record.port, "GET", "/healthz?challenge=x", &[], "")
                    .is_some_and(|reply| reply.status == 200)
            })
            .map(|record| record.port)
    });
    (daemon, port)
}

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `script` through the `workflow` tool with `meta` as the request's `_meta`; the run id.
fn start_run(ctx: &TestContext, port: u16, script: &str, meta: Value) -> String {
    let arguments = json!({"action": "run", "projectDir": ctx.project(), "script": script});
    let result = workflow_tool(port, arguments, meta);
    result["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId: {result}"))
        .to_owned()
}

/// The `workflow` tool's result for `arguments`, asked with `meta` as the request's `_meta`.
fn workflow_tool(port: u16, arguments: Value, meta: Value) -> Value {
    let session = open_session(port);
    let reply = mcp_post(
        port,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "workflow", "_meta": meta, "arguments": arguments}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let result = reply.json()["result"].clone();
    assert_ne!(result["isError"], true, "{result}");
    result
}

fn wait_status(ctx: &TestContext, run_id: &str, wanted: &str) {
    wait_for(&format!("run {run_id} to be {wanted}"), || {
        let status = ctx.status(run_id);
        let now = status["status"].as_str().unwrap_or_default();
        assert!(
            now == wanted || now == "running" || now == "pending",
            "run {run_id} is {now}: {status}"
        );
        (now == wanted).then_some(())
    });
}

fn text(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| match &attribute.value {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(text)),
            }) => Some(text.clone()),
            Some(AnyValue {
                value: Some(any_value::Value::IntValue(number)),
            }) => Some(number.to_string()),
            Some(AnyValue {
                value: Some(any_value::Value::BoolValue(flag)),
            }) => Some(flag.to_string()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

const TRACED: &str = "export const meta = { name: 'traced', description: 'three calls', model: 'mock' };
phase('Plan');
await agent('first', { label: 'first' });
phase('Build');
await agent('second\\n@mock once FLAG error -32603 boom', { label: 'second', retries: 1, retryDelayMs: 10 });
await agent('third\\n@mock tool Read notes', { label: 'third' });
return 'done';
";

#[test]
fn a_run_exports_its_span_tree_metrics_and_hands_the_agent_its_attempt_context() {
    let (receiver, port, _runtime) = receiver();
    let endpoint = format!("http://127.0.0.1:{port}");
    let ctx = context(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_SERVICE_NAME", "agentprism-test".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200".into()),
    ]);
    let flag = ctx.path("failed-once");
    let script = TRACED.replace("FLAG", &flag.to_string_lossy());
    let (_daemon, daemon_port) = daemon(&ctx);
    // The caller's trace: the run's span must join it.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{caller_trace}-{caller_span}-01");
    let run_id = start_run(
        &ctx,
        daemon_port,
        &script,
        json!({"traceparent": traceparent}),
    );
    wait_status(&ctx, &run_id, "completed");

    let spans = wait_for("the run's span", || {
        let spans = receiver.spans();
        spans
            .iter()
            .any(|span| span.name == "run traced")
            .then_some(spans)
    });
    let by_id: HashMap<Vec<u8>, &Span> = spans
        .iter()
        .map(|span| (span.span_id.clone(), span))
        .collect();
    let parent_of = |span: &Span| by_id.get(&span.parent_span_id).copied();
    let named =
        |name: &str| -> Vec<&Span> { spans.iter().filter(|span| span.name == name).collect() };

    let run = named("run traced")[0];
    assert_eq!(
        hex(&run.trace_id),
        caller_trace,
        "the run joins the caller's trace"
    );
    assert_eq!(hex(&run.parent_span_id), caller_span);
    assert_eq!(
        text(run, "agentprism.run.id").as_deref(),
        Some(run_id.as_str())
    );
    assert_eq!(
        text(run, "agentprism.workflow.name").as_deref(),
        Some("traced")
    );
    assert_eq!(text(run, "agentprism.status").as_deref(), Some("completed"));
    assert!(spans.iter().all(|span| span.trace_id == run.trace_id));

    let plan = named("phase Plan")[0];
    let build = named("phase Build")[0];
    for phase in [plan, build] {
        assert_eq!(
            parent_of(phase).map(|span| &span.span_id),
            Some(&run.span_id)
        );
    }
    let first = named("agent first")[0];
    let second = named("agent second")[0];
    let third = named("agent third")[0];
    assert_eq!(parent_of(first).map(|s| &s.span_id), Some(&plan.span_id));
    assert_eq!(parent_of(second).map(|s| &s.span_id), Some(&build.span_id));
    assert_eq!(parent_of(third).map(|s| &s.span_id), Some(&build.span_id));
    for (call, index) in [(first, "0"), (second, "1"), (third, "2")] {
        assert_eq!(text(call, "agentprism.call.index").as_deref(), Some(index));
        assert_eq!(text(call, "agentprism.backend").as_deref(), Some("mock"));
        assert_eq!(text(call, "agentprism.replayed").as_deref(), Some("false"));
        assert_eq!(text(call, "agentprism.status").as_deref(), Some("ok"));
        assert!(text(call, "gen_ai.usage.input_tokens").is_some());
    }

    check_attempts_and_tool_calls(&spans, first, second, third);
    check_prompt_contexts(&ctx, &spans, caller_trace);

    let metrics = wait_for("the call metrics", || {
        let names = receiver.metric_names();
        [
            "agentprism.tokens",
            "agentprism.call.duration",
            "agentprism.runs",
        ]
        .iter()
        .all(|wanted| names.iter().any(|name| name == wanted))
        .then_some(names)
    });
    assert!(!metrics.iter().any(|name| name == "agentprism.pauses"));
}

/// The spans called `name`.
fn spans_named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|span| span.name == name).collect()
}

/// One attempt for the first call, a failed attempt and its retry for the second, and the
/// third's tool call under its attempt.
fn check_attempts_and_tool_calls(spans: &[Span], first: &Span, second: &Span, third: &Span) {
    let attempts_of = |call: &Span| -> Vec<&Span> {
        let mut attempts: Vec<&Span> = spans_named(spans, "agentprism.attempt")
            .into_iter()
            .filter(|attempt| attempt.parent_span_id == call.span_id)
            .collect();
        attempts.sort_by_key(|attempt| text(attempt, "agentprism.attempt"));
        attempts
    };
    assert_eq!(attempts_of(first).len(), 1);
    let retried = attempts_of(second);
    assert_eq!(retried.len(), 2, "one failed attempt and its retry");
    assert_eq!(
        text(retried[0], "agentprism.error.code").as_deref(),
        Some("AGENT_EXECUTION_ERROR")
    );
    assert_eq!(text(retried[1], "agentprism.status").as_deref(), Some("ok"));
    let third_attempt = attempts_of(third)[0];
    let tools = spans_named(spans, "agentprism.tool_call");
    assert_eq!(tools.len(), 1, "the one tool call the agent reported");
    assert_eq!(tools[0].parent_span_id, third_attempt.span_id);
    assert_eq!(
        text(tools[0], "agentprism.status").as_deref(),
        Some("completed")
    );
}

/// Each prompt the mock received carried its own attempt's context.
fn check_prompt_contexts(ctx: &TestContext, spans: &[Span], caller_trace: &str) {
    // Each prompt carried its attempt's context.
    let log = std::fs::read_to_string(ctx.path(AGENT_LOG)).expect("the agents' log");
    let sent: Vec<String> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == "session/prompt")
        .map(|message| {
            message["params"]["_meta"]["traceparent"]
                .as_str()
                .unwrap_or_else(|| panic!("a prompt without traceparent: {message}"))
                .to_owned()
        })
        .collect();
    let mut expected: Vec<String> = spans_named(spans, "agentprism.attempt")
        .iter()
        .map(|attempt| format!("00-{caller_trace}-{}-01", hex(&attempt.span_id)))
        .collect();
    let mut sent_sorted = sent.clone();
    sent_sorted.sort();
    expected.sort();
    assert_eq!(
        sent_sorted, expected,
        "one traceparent per attempt, its own"
    );
}

const CHECKPOINTED: &str =
    "export const meta = { name: 'resumed', description: 'a checkpoint', model: 'mock' };
const before = await agent('before', { label: 'before' });
const answer = await checkpoint('go on?');
await agent('after', { label: 'after' });
return answer;
";

#[test]
fn a_resumed_run_stays_in_its_trace_and_replays_show_as_replayed_spans() {
    let (receiver, port, _runtime) = receiver();
    let ctx = context(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200".into()),
    ]);
    let (_daemon, daemon_port) = daemon(&ctx);
    let run_id = start_run(&ctx, daemon_port, CHECKPOINTED, json!({}));
    wait_status(&ctx, &run_id, "paused");
    let first = wait_for("the first generation's run span", || {
        receiver
            .spans()
            .into_iter()
            .find(|span| span.name == "run resumed")
    });
    assert_eq!(
        text(&first, "agentprism.pause.reason").as_deref(),
        Some("checkpoint_required")
    );
    assert!(first.parent_span_id.is_empty(), "a root of its own");
    workflow_tool(
        daemon_port,
        json!({"action": "resume", "runId": run_id, "checkpointReplies": {"1": true}}),
        json!({}),
    );
    wait_status(&ctx, &run_id, "completed");
    let spans = wait_for("the second generation's spans", || {
        let spans = receiver.spans();
        (spans
            .iter()
            .filter(|span| span.name == "run resumed")
            .count()
            == 2
            && spans.iter().any(|span| span.name == "agent after"))
        .then_some(spans)
    });
    let second = spans
        .iter()
        .find(|span| span.name == "run resumed" && span.span_id != first.span_id)
        .expect("the second run span");
    assert_eq!(second.trace_id, first.trace_id, "one trace for the run");
    assert_eq!(second.parent_span_id, first.span_id);
    assert_eq!(
        text(second, "agentprism.run.generation").as_deref(),
        Some("2")
    );
    // The pause between the generations: from the moment the first one paused (its `paused`
    // event, stamped in milliseconds) to the second one's start.
    let wait = spans
        .iter()
        .find(|span| span.name == "wait checkpoint_required")
        .expect("the wait span");
    assert_eq!(wait.parent_span_id, first.span_id);
    assert_eq!(wait.trace_id, first.trace_id);
    let millisecond = 1_000_000;
    assert!(wait.start_time_unix_nano + millisecond >= first.start_time_unix_nano);
    assert!(wait.start_time_unix_nano <= first.end_time_unix_nano);
    assert!(wait.end_time_unix_nano >= second.start_time_unix_nano);
    let befores: Vec<&Span> = spans
        .iter()
        .filter(|span| span.name == "agent before")
        .collect();
    assert_eq!(befores.len(), 2, "the live call and its replay");
    let replayed: Vec<&&Span> = befores
        .iter()
        .filter(|span| text(span, "agentprism.replayed").as_deref() == Some("true"))
        .collect();
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].parent_span_id, second.span_id);
    assert!(
        spans
            .iter()
            .all(|span| span.name == "agentprism.attempt" || span.trace_id == first.trace_id)
    );
    wait_for("the pause metric", || {
        receiver
            .metric_names()
            .iter()
            .any(|name| name == "agentprism.pauses")
            .then_some(())
    });
}

#[test]
fn a_disabled_sdk_sends_nothing() {
    let (receiver, port, _runtime) = receiver();
    let ctx = context(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_SDK_DISABLED", "true".into()),
    ]);
    let (daemon, daemon_port) = daemon(&ctx);
    let run_id = start_run(
        &ctx,
        daemon_port,
        "export const meta = { name: 'quiet', description: 'one call', model: 'mock' };\nreturn await agent('hello');",
        json!({}),
    );
    wait_status(&ctx, &run_id, "completed");
    // A daemon that stops exports what it buffered: after its exit nothing can still come.
    daemon.signal(Signal::SIGTERM);
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert_eq!(receiver.count(), 0);
}

#[test]
fn a_protocol_that_cannot_be_done_is_refused_at_daemon_start_naming_the_variable() {
    let ctx = context(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9".into()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
    ]);
    let finished = ctx.spawn(&["daemon", "run"]).finish(DEADLINE);
    assert_ne!(finished.code(), 0);
    assert!(
        finished.stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{}",
        finished.stderr
    );
}
