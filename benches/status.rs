//! What one `status` call costs on completed runs of 1, 100 and 1,000 agent calls (area
//! `status` of `docs/performance.md`; the goal is under 50 µs of daemon CPU and under 0.1 ms
//! p50 of server time for all three sizes alike, since a status answer is bounded whatever
//! the run's size). Figures, per run size:
//!
//! - **daemon CPU per call**: a real `agentprism daemon run` (own HOME, persistence root and
//!   ephemeral port) answers `status` tool calls over one keep-alive HTTP connection in a
//!   legacy session; its `utime + stime` from `/proc/<pid>/stat` over the batch, divided by
//!   the number of calls. The kernel counts in clock ticks (10 ms), so each batch runs until
//!   the daemon used at least a second of CPU (or a call or time cap is reached); its idle
//!   CPU, measured first over a quiet window, is printed beside it. A batch of `ping`s is
//!   measured the same way first: what any request costs the daemon, the floor under status.
//! - **server time p50**: the same tool call answered in this process by the MCP core over
//!   a fresh engine on the same store (`McpServer::handle_bytes`, no socket), with the CPU
//!   this process used per call (`getrusage`).
//!
//! The runs are made first with the in-process instant runner in a fresh temporary store,
//! then every figure reads that store. CPU time is the figure to compare across machines
//! and loads; wall times on a shared machine are not. Run with `cargo bench --bench status`
//! (release; `cargo bench` builds the `agentprism` binary it starts).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::engine::instant::InstantRunner;
use agentprism::engine::routing::NamedBackends;
use agentprism::engine::{Engine, EngineConfig, LimitOverrides, RunRequest, ScriptInput};
use agentprism::mcp::{McpServer, ServerOptions, TransportContext, TransportKind};
use agentprism::store::SqliteStore;
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

mod support;

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("this benchmark reads /proc and calls getrusage with the 64-bit Linux layout");

use support::World;
use support::http::{Client, Daemon, initialize_request, pid_cpu};

/// Agent calls in each measured run.
const SIZES: [u32; 3] = [1, 100, 1_000];
/// A daemon batch ends once the daemon used this much CPU (100 clock ticks)...
const DAEMON_CPU_TARGET: Duration = Duration::from_secs(1);
/// ...or after this many calls, or this much wall time, whichever comes first.
const DAEMON_MAX_CALLS: usize = 20_000;
const BATCH_WALL_LIMIT: Duration = Duration::from_secs(20);
/// In-process samples: at least the minimum, then until the wall limit or the maximum.
const MIN_SAMPLES: usize = 50;
const MAX_SAMPLES: usize = 2_000;
const IN_PROCESS_WALL_LIMIT: Duration = Duration::from_secs(5);
/// Calls before each measurement, so caches and connections are warm.
const WARM_UP: usize = 20;

const GOAL_CPU: Duration = Duration::from_micros(50);
const GOAL_P50: Duration = Duration::from_micros(100);

fn main() {
    let temp = tempfile::tempdir().expect("temp dir");
    let world = World::new(temp.path(), "status");
    let home = world
        .state
        .parent()
        .expect("the world's folder")
        .join("home");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    let runs: Vec<(u32, String)> = runtime.block_on(async {
        let engine = engine(&world, &home);
        let mut runs = Vec::new();
        for size in SIZES {
            runs.push((size, complete_run(&engine, &world, size).await));
        }
        runs
    });
    println!(
        "runs made with the instant runner under {}",
        world.state.display()
    );

    let in_process: Vec<Figure> = runtime.block_on(async {
        let server = in_process_server(&world, &home);
        let session = initialize_in_process(&server).await;
        let mut figures = Vec::new();
        for (_, run_id) in &runs {
            figures.push(measure_in_process(&server, &session, run_id).await);
        }
        figures
    });
    drop(runtime);

    let daemon = Daemon::start(&world);
    let idle = daemon.idle_cpu_rate(Duration::from_secs(2));
    println!(
        "daemon pid {} on port {}; idle CPU {:.3} ms per second",
        daemon.pid,
        daemon.port,
        idle * 1e3
    );
    let mut client = Client::connect(daemon.port);
    let ping = daemon.measure_ping(&mut client);
    println!(
        "ping (the floor of any request): daemon CPU per call {:.3} ms over {} calls ({}); HTTP round trip p50 {:.3} ms",
        ping.cpu_per_call.as_secs_f64() * 1e3,
        ping.calls,
        ping.note,
        ping.p50.as_secs_f64() * 1e3
    );
    support::figure(
        "status",
        "daemon CPU per `ping` (the floor of any request)",
        format!("{:.0} µs", ping.cpu_per_call.as_secs_f64() * 1e6),
        "-",
    );
    for ((size, run_id), local) in runs.iter().zip(&in_process) {
        let remote = daemon.measure(&mut client, run_id);
        report(*size, &remote, local);
    }
}

/// An engine over the world's store with the instant runner, routing `codex` to it.
fn engine(world: &World, home: &Path) -> Engine {
    let store = Arc::new(SqliteStore::open(&world.state).expect("open the store"));
    Engine::new(
        store,
        InstantRunner::new(),
        Arc::new(NamedBackends::new(["codex"])),
        EngineConfig {
            home: Some(home.to_path_buf()),
            ..EngineConfig::default()
        },
    )
}

/// Runs a script of `calls` sequential agent calls to completion; its run id.
async fn complete_run(engine: &Engine, world: &World, calls: u32) -> String {
    let script = format!(
        "export const meta = {{ name: 'status-bench-{calls}', description: '{calls} sequential calls', model: 'codex' }};\nfor (let i = 0; i < {calls}; i++) {{ await agent('prompt ' + i, {{label: 'call ' + i}}); }}\nreturn 'done';\n"
    );
    let admission = engine
        .start(RunRequest {
            project_dir: world.project.clone(),
            script: ScriptInput::Inline(script),
            args: json!({}),
            limits: LimitOverrides {
                max_agents: Some(i64::from(calls)),
                ..LimitOverrides::default()
            },
            caller: None,
            trace: None,
        })
        .await
        .unwrap_or_else(|e| panic!("admitting the {calls}-call run: {e}"));
    engine.wait(&admission.run_id).await;
    admission.run_id.to_string()
}

fn in_process_server(world: &World, home: &Path) -> Arc<McpServer> {
    let handler = WorkflowServer::new(engine(world, home), WorkflowServerOptions::default());
    Arc::new(McpServer::new(handler, ServerOptions::default()))
}

fn status_request(id: usize, run_id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "workflow", "arguments": {"action": "status", "runId": run_id}}})
}

fn transport(session: Option<&str>) -> TransportContext {
    let mut context = TransportContext::new(TransportKind::Http, "status-bench");
    context.session_id = session.map(str::to_owned);
    context
}

async fn initialize_in_process(server: &McpServer) -> String {
    let body = initialize_request().to_string();
    let outcome = server.handle_bytes(body.as_bytes(), transport(None)).await;
    outcome.new_session.expect("initialize creates a session")
}

/// One size's figures: samples of wall time per call, CPU per call, answer size.
struct Figure {
    calls: usize,
    p50: Duration,
    p90: Duration,
    cpu_per_call: Duration,
    answer_bytes: usize,
    /// What stopped a daemon batch, or the in-process loop.
    note: String,
}

async fn measure_in_process(server: &McpServer, session: &str, run_id: &str) -> Figure {
    let call = |id: usize| {
        let body = status_request(id, run_id).to_string();
        async move {
            let outcome = server
                .handle_bytes(body.as_bytes(), transport(Some(session)))
                .await;
            let response = outcome.response.expect("a response");
            checked_status(&response);
            response.to_string().len()
        }
    };
    for id in 0..WARM_UP {
        call(id).await;
    }
    let mut samples = Vec::new();
    let mut answer_bytes = 0;
    let cpu_before = process_cpu();
    let started = Instant::now();
    while samples.len() < MIN_SAMPLES
        || (samples.len() < MAX_SAMPLES && started.elapsed() < IN_PROCESS_WALL_LIMIT)
    {
        let one = Instant::now();
        answer_bytes = call(WARM_UP + samples.len()).await;
        samples.push(one.elapsed());
    }
    let cpu = process_cpu().saturating_sub(cpu_before);
    figure(samples, cpu, answer_bytes, String::new())
}

fn figure(mut samples: Vec<Duration>, cpu: Duration, answer_bytes: usize, note: String) -> Figure {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    Figure {
        calls: samples.len(),
        p50: at(50),
        p90: at(90),
        cpu_per_call: cpu / samples.len() as u32,
        answer_bytes,
        note,
    }
}

/// Panics unless `response` is the status document of a completed run.
fn checked_status(response: &Value) {
    let status = response.pointer("/result/structuredContent/status");
    assert_eq!(
        status.and_then(Value::as_str),
        Some("completed"),
        "not a completed run's status: {response}"
    );
}

fn report(size: u32, daemon: &Figure, local: &Figure) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "status of a completed {size}-call run ({} bytes):\n  daemon CPU per call {:.3} ms over {} calls ({}); HTTP round trip p50 {:.3} ms, p90 {:.3} ms\n  in process: server time p50 {:.3} ms, p90 {:.3} ms over {} calls; process CPU per call {:.3} ms\n  goals: daemon CPU < {:.3} ms {}, server p50 < {:.3} ms {}",
        daemon.answer_bytes,
        ms(daemon.cpu_per_call),
        daemon.calls,
        daemon.note,
        ms(daemon.p50),
        ms(daemon.p90),
        ms(local.p50),
        ms(local.p90),
        local.calls,
        ms(local.cpu_per_call),
        ms(GOAL_CPU),
        verdict(daemon.cpu_per_call < GOAL_CPU),
        ms(GOAL_P50),
        verdict(local.p50 < GOAL_P50),
    );
    support::figure(
        "status",
        &format!("daemon CPU per `status`, completed {size}-call run"),
        format!("{:.0} µs", daemon.cpu_per_call.as_secs_f64() * 1e6),
        "< 50 µs",
    );
    support::figure(
        "status",
        &format!("server time p50 in process, completed {size}-call run"),
        format!("{:.3} ms", ms(local.p50)),
        "< 0.1 ms",
    );
}
impl Daemon {
    /// The daemon's CPU seconds per wall second while nobody talks to it.
    fn idle_cpu_rate(&self, window: Duration) -> f64 {
        let before = pid_cpu(self.pid);
        let started = Instant::now();
        std::thread::sleep(window);
        pid_cpu(self.pid).saturating_sub(before).as_secs_f64() / started.elapsed().as_secs_f64()
    }

    /// Status calls until the daemon used [`DAEMON_CPU_TARGET`], or a cap is reached.
    fn measure(&self, client: &mut Client, run_id: &str) -> Figure {
        self.measure_with(client, |id| status_request(id, run_id), checked_status)
    }

    /// `ping`s the same way: what the daemon spends on any request, the floor under status.
    fn measure_ping(&self, client: &mut Client) -> Figure {
        let ping = |id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let checked = |response: &Value| {
            assert_eq!(
                response.get("result"),
                Some(&json!({})),
                "not a ping answer: {response}"
            );
        };
        self.measure_with(client, ping, checked)
    }

    fn measure_with(
        &self,
        client: &mut Client,
        request: impl Fn(usize) -> Value,
        checked: impl Fn(&Value),
    ) -> Figure {
        for id in 0..WARM_UP {
            checked(&client.request(&request(id)));
        }
        let mut samples = Vec::new();
        let mut answer_bytes;
        let before = pid_cpu(self.pid);
        let started = Instant::now();
        let note = loop {
            let one = Instant::now();
            let response = client.request(&request(WARM_UP + samples.len()));
            samples.push(one.elapsed());
            checked(&response);
            answer_bytes = response.to_string().len();
            // Reading /proc every call would cost the daemon nothing but us a lot.
            if samples.len() % 25 != 0 {
                continue;
            }
            let used = pid_cpu(self.pid).saturating_sub(before);
            if used >= DAEMON_CPU_TARGET {
                break format!("{:.0} ms of daemon CPU", used.as_secs_f64() * 1e3);
            }
            if samples.len() >= DAEMON_MAX_CALLS {
                break format!("call cap, {:.0} ms of daemon CPU", used.as_secs_f64() * 1e3);
            }
            if started.elapsed() >= BATCH_WALL_LIMIT {
                break format!("wall cap, {:.0} ms of daemon CPU", used.as_secs_f64() * 1e3);
            }
        };
        let cpu = pid_cpu(self.pid).saturating_sub(before);
        figure(samples, cpu, answer_bytes, note)
    }
}

unsafe extern "C" {
    fn getrusage(who: i32, usage: *mut ResourceUsage) -> i32;
}

/// `struct timeval` on 64-bit Linux.
#[repr(C)]
#[derive(Default)]
struct TimeValue {
    seconds: i64,
    microseconds: i64,
}

/// `struct rusage` on 64-bit Linux: the two times, then fourteen `long` counters.
#[repr(C)]
#[derive(Default)]
struct ResourceUsage {
    user: TimeValue,
    system: TimeValue,
    counters: [i64; 14],
}

/// User + system CPU time of this process, all threads.
fn process_cpu() -> Duration {
    let mut usage = ResourceUsage::default();
    // SAFETY: `usage` is a live, writable `struct rusage` (the 64-bit Linux layout, checked
    // at compile time), and getrusage writes only within it.
    if unsafe { getrusage(0, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let time = |value: &TimeValue| {
        Duration::from_secs(value.seconds.max(0) as u64)
            + Duration::from_micros(value.microseconds.max(0) as u64)
    };
    time(&usage.user) + time(&usage.system)
}
