//! What the folder server (`agentprism serve <dir>`) costs beyond the agents themselves
//! (area `serve` of `docs/performance.md`; the goal is under 1 ms of server time each, of
//! which the engine's preparation and VM start are most today). All in this process: a `FolderServer` over an engine on a fresh
//! SQLite store in a temporary folder, requests through the MCP core
//! (`McpServer::handle_bytes`, no socket), stateless 2026-07-28 requests, agents answered by
//! in-process runners so that only the server's own time is measured.
//!
//! - **synchronous 0-agent call**: `tools/call` of a workflow without agents, from request to
//!   answer (preparation with its dry run, admission, execution, the answer, the throwaway
//!   run's deletion): p50, p90, p99.
//! - **`run/start` → `run/status` completed, 10 calls**: from sending `run/start` of a
//!   workflow of ten sequential instant agent calls until a `run/status` polled back to back
//!   answers `completed`: p50, p90.
//! - **`run/status` with 100 runs live**: 100 runs each held inside an agent call (a runner
//!   whose turns end only when cancelled), then `run/status` of one of them, round robin:
//!   p50, p99, and this process's CPU per call.
//!
//! Run with `cargo bench --bench serve` (release) or `scripts/measure serve`. Wall times on a shared machine are noisy;
//! CPU per call is the figure to compare.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::engine::instant::{HeldRunner, InstantRunner};
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::runner::AgentRunner;
use agentprism::engine::{Engine, EngineConfig};
use agentprism::mcp::{McpServer, ServerOptions, TransportContext, TransportKind};
use agentprism::serve::{FolderOptions, FolderServer};
use agentprism::store::SqliteStore;
use serde_json::{Value, json};

mod support;

const SYNC_SAMPLES: usize = 200;
const START_SAMPLES: usize = 50;
const LIVE_RUNS: usize = 100;
const STATUS_SAMPLES: usize = 5_000;
const WARM_UP: usize = 10;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let base = tempfile::tempdir().expect("temp dir");
        let folder = write_folder(base.path());

        let instant = server(base.path(), "instant", &folder, InstantRunner::new());
        let mut sync = measure_sync(&instant).await;
        report("synchronous tools/call, 0 agents", &mut sync, None);
        let mut start = measure_start_to_completed(&instant).await;
        report(
            "run/start -> run/status completed, 10 calls",
            &mut start,
            None,
        );

        let (held_runner, _started, _cancelled) = HeldRunner::new();
        let held = server(base.path(), "held", &folder, held_runner);
        let (mut status, cpu) = measure_status_with_live_runs(&held).await;
        report(
            &format!("run/status with {LIVE_RUNS} runs live"),
            &mut status,
            Some(cpu),
        );
    });
}

/// The served folder: a 0-agent workflow and a 10-call one.
fn write_folder(base: &Path) -> std::path::PathBuf {
    let folder = base.join("workflows");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(
        folder.join("echo.js"),
        "export const meta = { name: 'echo', description: 'no agents' };\nreturn { echoed: args.text };\n",
    )
    .expect("echo.js");
    std::fs::write(
        folder.join("ten.js"),
        "export const meta = { name: 'ten', description: 'ten calls', model: 'codex' };\nfor (let i = 0; i < 10; i++) { await agent('prompt ' + i, { label: 'call ' + i }); }\nreturn 'done';\n",
    )
    .expect("ten.js");
    folder
}

/// A folder server over a fresh store under `base/<name>` whose agents `runner` answers.
fn server(base: &Path, name: &str, folder: &Path, runner: Arc<dyn AgentRunner>) -> Arc<McpServer> {
    let state = base.join(name);
    let store = Arc::new(SqliteStore::open(&state).expect("open the store"));
    let config = EngineConfig {
        home: Some(base.to_path_buf()),
        probe: false,
        max_runs: LIVE_RUNS + 10,
        max_active_per_project: LIVE_RUNS + 10,
        allow_script_backends: true,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        store,
        runner,
        Arc::new(NamedBackends::new(["codex"])),
        config,
    );
    let loaded = agentprism::serve::folder::load(folder).expect("load the folder");
    let handler = FolderServer::new(engine, loaded, FolderOptions::default()).expect("server");
    Arc::new(McpServer::new(handler, ServerOptions::default()))
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

async fn call(server: &McpServer, id: usize, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let outcome = server
        .handle_bytes(
            body.as_bytes(),
            TransportContext::new(TransportKind::Http, "serve-bench"),
        )
        .await;
    let response = outcome.response.expect("a response");
    assert!(
        response.get("error").is_none(),
        "{method} failed: {response}"
    );
    response["result"].clone()
}

async fn measure_sync(server: &McpServer) -> Vec<Duration> {
    let mut samples = Vec::new();
    for id in 0..SYNC_SAMPLES + WARM_UP {
        let started = Instant::now();
        let result = call(
            server,
            id,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hello"}}),
        )
        .await;
        assert_eq!(
            result["structuredContent"]["result"]["echoed"], "hello",
            "{result}"
        );
        if id >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    samples
}

async fn measure_start_to_completed(server: &McpServer) -> Vec<Duration> {
    let mut samples = Vec::new();
    let mut id = 0;
    for round in 0..START_SAMPLES + 2 {
        let started = Instant::now();
        id += 1;
        let run = call(server, id, "run/start", json!({"name": "ten"})).await;
        let run_id = run["runId"].as_str().expect("runId").to_owned();
        loop {
            id += 1;
            let status = call(server, id, "run/status", json!({"runId": run_id})).await;
            match status["state"].as_str() {
                Some("completed") => break,
                Some("working") => tokio::task::yield_now().await,
                other => panic!("unexpected state {other:?}: {status}"),
            }
        }
        if round >= 2 {
            samples.push(started.elapsed());
        }
    }
    samples
}

async fn measure_status_with_live_runs(server: &McpServer) -> (Vec<Duration>, Duration) {
    let mut run_ids = Vec::new();
    for id in 0..LIVE_RUNS {
        let run = call(server, id, "run/start", json!({"name": "ten"})).await;
        run_ids.push(run["runId"].as_str().expect("runId").to_owned());
    }
    // Every run must be inside its first agent call before measuring.
    for run_id in &run_ids {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = call(server, 0, "run/status", json!({"runId": run_id})).await;
            assert_eq!(status["state"], "working", "{status}");
            if status["calls"]["running"] == 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id} never reached its agent call"
            );
            tokio::task::yield_now().await;
        }
    }
    let mut samples = Vec::new();
    let cpu_before = process_cpu();
    for id in 0..STATUS_SAMPLES {
        let run_id = &run_ids[id % run_ids.len()];
        let started = Instant::now();
        let status = call(server, id, "run/status", json!({"runId": run_id})).await;
        samples.push(started.elapsed());
        debug_assert_eq!(status["state"], "working");
    }
    let cpu = process_cpu().saturating_sub(cpu_before) / STATUS_SAMPLES as u32;
    (samples, cpu)
}

fn report(what: &str, samples: &mut [Duration], cpu: Option<Duration>) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    print!(
        "{what}: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms over {} samples",
        ms(at(50)),
        ms(at(90)),
        ms(at(99)),
        samples.len()
    );
    match cpu {
        Some(cpu) => println!("; process CPU per call {:.3} ms", ms(cpu)),
        None => println!(),
    }
    support::figure(
        "serve",
        &format!("{what}: p50 / p99"),
        format!("{:.3} / {:.3} ms", ms(at(50)), ms(at(99))),
        "p50 < 1 ms",
    );
}

/// This process's user + system CPU, from `/proc/self/stat` (clock ticks of 10 ms).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields 14 and 15 of the line are utime and stime; `fields` starts at field 3.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
