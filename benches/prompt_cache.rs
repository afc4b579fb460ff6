//! What the prompt-cache hold saves and costs (area `prompt_cache` of `docs/performance.md`):
//! a fan-out of eight calls whose prompts share an 8 KiB prefix, started through the daemon's
//! MCP endpoint as a host starts it, on the real claude adapter (`scripts/install-test-deps`)
//! pointed at the tests' fake model server. The fake answers each model request after a delay
//! that stands for a provider's time to first token, and counts how many of the prompts first
//! reached it after an answer to one of them had begun: those a provider could have served
//! the shared prefix from its cache. The same fan-out runs with the hold (the default) and
//! without it (`AGENTPRISM_PROMPT_CACHE_HOLD_MS=0`), each in a daemon of its own; the wall
//! time is the `run` call to the `status` that reports it completed.
//!
//! Run with `cargo bench --bench prompt_cache` or `scripts/measure prompt_cache`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

/// The tests' fake model server and its HTTP plumbing, shared as they are (the fake names
/// the plumbing as its sibling, `super::http1`).
#[allow(dead_code)]
#[path = "../tests/it/support/fake_llm/mod.rs"]
mod fake_llm;
#[allow(dead_code)]
#[path = "../tests/it/support/http1.rs"]
mod http1;

use fake_llm::FakeLlm;
use support::http::{Client, Daemon};
use support::{TestDeps, World, figure};

const AREA: &str = "prompt_cache";
/// Calls in the fan-out.
const CALLS: u32 = 8;
/// Bytes the prompts share.
const SHARED_BYTES: usize = 8 * 1024;
/// The fake's time to first token, per model request.
const FIRST_TOKEN_MS: u64 = 1500;
const RUN_DEADLINE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(50);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let deps = TestDeps::find();
    let temp = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();
    for (name, hold) in [("with the hold", None), ("without the hold", Some("0"))] {
        let fake = runtime.block_on(FakeLlm::start());
        let marker = format!("CACHEBENCH-{}", rows.len());
        let world = world(temp.path(), &marker, &deps, &fake, hold);
        let daemon = Daemon::start(&world);
        let mut client = Client::connect(daemon.port);
        let wall = run_fan_out(&mut client, &world.project, &marker);
        let (arrived, after) = fake.arrivals_after_first_answer(&marker);
        assert_eq!(arrived, CALLS as usize, "every prompt reached the fake");
        println!(
            "{name}: {after} of {arrived} prompts reached the provider after the first answer began; {:.2} s end to end",
            wall.as_secs_f64()
        );
        rows.push((after, wall));
        drop(client);
        drop(daemon);
    }
    let ((held_after, held_wall), (free_after, free_wall)) = (rows[0], rows[1]);
    figure(
        AREA,
        &format!(
            "prompts of a {CALLS}-call fan-out sharing 8 KiB that reach the provider after the first answer began: with the hold / without"
        ),
        format!("{held_after} / {free_after} of {CALLS}"),
        "-",
    );
    figure(
        AREA,
        &format!(
            "that fan-out end to end through MCP, time to first token {FIRST_TOKEN_MS} ms: with the hold / without (cost)"
        ),
        format!(
            "{:.2} s / {:.2} s (+{:.2} s)",
            held_wall.as_secs_f64(),
            free_wall.as_secs_f64(),
            held_wall.as_secs_f64() - free_wall.as_secs_f64()
        ),
        "-",
    );
}

/// A private world whose claude backend is the real adapter pointed at `fake`.
fn world(base: &Path, name: &str, deps: &TestDeps, fake: &FakeLlm, hold: Option<&str>) -> World {
    let mut world = World::new(base, name);
    let node = deps.get("node");
    let node_dir = Path::new(&node)
        .parent()
        .expect("node's folder")
        .display()
        .to_string();
    world.env.retain(|(key, _)| key != "PATH");
    world.env.extend(
        [
            ("PATH", format!("{node_dir}:/usr/bin:/bin")),
            ("AGENTPRISM_CLAUDE_ACP_CMD", node),
            ("AGENTPRISM_CLAUDE_ACP_ARGS", deps.get("claude_acp_entry")),
            ("ANTHROPIC_BASE_URL", fake.base_url()),
            ("ANTHROPIC_API_KEY", "mock".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
            ("DISABLE_TELEMETRY", "1".to_owned()),
            ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ]
        .map(|(key, value)| (key.to_owned(), value)),
    );
    if let Some(hold) = hold {
        world.env.push((
            "AGENTPRISM_PROMPT_CACHE_HOLD_MS".to_owned(),
            hold.to_owned(),
        ));
    }
    world
}

/// Starts the fan-out with the `workflow` tool and polls `status` until it completed: the
/// wall time between the two.
fn run_fan_out(client: &mut Client, project: &Path, marker: &str) -> Duration {
    let line = "Shared project context for every reviewer, line after line. ";
    let script = format!(
        "export const meta = {{ name: 'fanout', description: 'prompt-cache bench', model: 'claude' }};\n\
         const shared = '{line}'.repeat({});\n\
         return await parallel(Array.from({{ length: {CALLS} }}, (_, n) => () => agent(`{marker} ${{shared}}MOCK_DELAY={FIRST_TOKEN_MS} question ${{n}}`)));\n",
        SHARED_BYTES / line.len() + 1
    );
    let started = Instant::now();
    let answer = tool_call(
        client,
        json!({"action": "run", "projectDir": project.display().to_string(), "script": script,
            "concurrency": CALLS}),
    );
    let run_id = answer["result"]["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("the run was not admitted: {answer}"))
        .to_owned();
    loop {
        let status = tool_call(client, json!({"action": "status", "runId": run_id}));
        let status = &status["result"]["structuredContent"];
        match status["status"].as_str() {
            Some("completed") => return started.elapsed(),
            Some("running" | "pending") => {}
            _ => panic!("the fan-out ended other than completed: {status}"),
        }
        assert!(
            started.elapsed() < RUN_DEADLINE,
            "the fan-out did not end in time"
        );
        std::thread::sleep(POLL);
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn tool_call(client: &mut Client, arguments: Value) -> Value {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    client.request(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "workflow", "arguments": arguments}}))
}
