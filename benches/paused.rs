//! Many runs waiting at checkpoints in one daemon (area `paused` of `docs/performance.md`): a
//! real `agentprism daemon run` (own HOME, persistence root and port) is given 1,000 runs
//! through its MCP endpoint, as a host starts them, each of which pauses at a checkpoint. Then:
//!
//! - **the daemon's RSS** with all of them paused (`VmRSS`, and its peak `VmHWM`);
//! - **`status` of any of them**: the round trip of the `status` tool call over one keep-alive
//!   connection, for every run in a shuffled order (p50 and p99), and the daemon's CPU per call
//!   (`/proc/<pid>/stat` over the batch);
//! - **a restart to ready**: the daemon stopped (SIGTERM, waited for), a new one started on the
//!   same store, timed from its spawn to its pointer (it listens) and to the first `status` of
//!   a paused run it answers; its RSS once it answered every run's status.
//!
//! Goals (issue "scale on the user's path"): RSS < 100 MiB, restart to ready < 2 s, `status`
//! < 1 ms. Run with `cargo bench --bench paused` or `scripts/measure paused`. With
//! `AGENTPRISM_BENCH_HOOK=<program>` the program runs as `<program> on <pid>` before the
//! shuffled `status` batch and `<program> off <pid>` after it (`pid` the daemon's), so a
//! profiler attached to the daemon covers those reads and nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::http::{Client, Daemon, pid_cpu};
use support::{World, figure};

const AREA: &str = "paused";
const RUNS: usize = 1_000;
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);
const SCRIPT: &str = "export const meta = { name: 'gate', description: 'waits for a person' };\n\
                      const answer = await checkpoint('Ship it?');\n\
                      return { answer };\n";

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let runs = if quick { RUNS / 10 } else { RUNS };
    let temp = tempfile::tempdir().expect("temp dir");
    let world = World::new(temp.path(), "paused");
    let project = world.project.display().to_string();

    let daemon = Daemon::start(&world);
    let mut client = Client::connect(daemon.port);
    let started = Instant::now();
    let ids: Vec<String> = (0..runs).map(|_| start(&mut client, &project)).collect();
    let admitted = started.elapsed();
    wait_all_paused(&mut client, &ids);
    println!(
        "{runs} runs admitted in {:.2} s, all paused after {:.2} s",
        admitted.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let (rss, peak) = (kib(daemon.pid, "VmRSS:"), kib(daemon.pid, "VmHWM:"));
    figure(
        AREA,
        &format!("daemon RSS with {runs} runs paused at checkpoints (peak)"),
        format!("{:.1} MiB ({:.1} MiB)", mib(rss), mib(peak)),
        "< 100 MiB",
    );

    let order = shuffled(&ids);
    let hook = std::env::var_os("AGENTPRISM_BENCH_HOOK");
    if let Some(hook) = &hook {
        support::run_hook(hook, "on", daemon.pid).expect("the hook before the batch");
    }
    let cpu_before = pid_cpu(daemon.pid);
    let mut latencies: Vec<Duration> = order
        .iter()
        .map(|run_id| {
            let asked = Instant::now();
            let status = status_of(&mut client, run_id);
            let took = asked.elapsed();
            assert_eq!(status["status"], "paused", "{status}");
            took
        })
        .collect();
    let cpu = pid_cpu(daemon.pid).saturating_sub(cpu_before);
    if let Some(hook) = &hook {
        support::run_hook(hook, "off", daemon.pid).expect("the hook after the batch");
    }
    latencies.sort_unstable();
    let (p50, p99) = (percentile(&latencies, 50), percentile(&latencies, 99));
    figure(
        AREA,
        &format!(
            "`status` of one of {runs} paused runs: p50 / p99 round trip (daemon CPU per call)"
        ),
        format!(
            "{:.3} ms / {:.3} ms ({:.0} µs)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            cpu.as_secs_f64() * 1e6 / runs as f64
        ),
        "< 1 ms",
    );

    drop(client);
    stop(daemon);
    let spawned = Instant::now();
    let daemon = Daemon::start(&world);
    let listening = spawned.elapsed();
    let mut client = Client::connect(daemon.port);
    let first = status_of(&mut client, &ids[runs / 2]);
    let ready = spawned.elapsed();
    assert_eq!(first["status"], "paused", "{first}");
    for run_id in &order {
        assert_eq!(status_of(&mut client, run_id)["status"], "paused");
    }
    let rss_after = kib(daemon.pid, "VmRSS:");
    figure(
        AREA,
        &format!("restart with {runs} paused runs: to listening / to the first `status` answered"),
        format!(
            "{:.2} s / {:.2} s",
            listening.as_secs_f64(),
            ready.as_secs_f64()
        ),
        "< 2 s",
    );
    figure(
        AREA,
        "daemon RSS after the restart, every run's status read",
        format!("{:.1} MiB", mib(rss_after)),
        "< 100 MiB",
    );
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn tool_call(client: &mut Client, arguments: Value) -> Value {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    client.request(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "workflow", "arguments": arguments}}))
}

fn start(client: &mut Client, project: &str) -> String {
    let answer = tool_call(
        client,
        json!({"action": "run", "projectDir": project, "script": SCRIPT}),
    );
    answer["result"]["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("the run was not admitted: {answer}"))
        .to_owned()
}

fn status_of(client: &mut Client, run_id: &str) -> Value {
    let answer = tool_call(client, json!({"action": "status", "runId": run_id}));
    answer["result"]["structuredContent"].clone()
}

/// Polls every run until each one paused.
fn wait_all_paused(client: &mut Client, ids: &[String]) {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    let mut waiting: Vec<&String> = ids.iter().collect();
    while !waiting.is_empty() {
        waiting.retain(|run_id| {
            let status = status_of(client, run_id);
            match status["status"].as_str() {
                Some("paused") => false,
                Some("running" | "pending") => true,
                _ => panic!("run {run_id} did not pause: {status}"),
            }
        });
        assert!(
            Instant::now() < deadline,
            "{} runs did not pause in time",
            waiting.len()
        );
        if !waiting.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Stops the daemon as its service manager would and waits for it to exit.
fn stop(mut daemon: Daemon) {
    let pid = nix::unistd::Pid::from_raw(daemon.pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the daemon");
    daemon.child.wait().expect("wait for the daemon");
}

/// `ids` in an order that is not the order of admission (a fixed stride through them).
fn shuffled(ids: &[String]) -> Vec<String> {
    let stride = 389 % ids.len().max(1);
    let stride = if stride == 0 { 1 } else { stride };
    let mut order = Vec::with_capacity(ids.len());
    let mut at = 0;
    let mut seen = vec![false; ids.len()];
    for _ in 0..ids.len() {
        while seen[at] {
            at = (at + 1) % ids.len();
        }
        seen[at] = true;
        order.push(ids[at].clone());
        at = (at + stride) % ids.len();
    }
    order
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    sorted[(sorted.len() * percent / 100).min(sorted.len() - 1)]
}

fn kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
