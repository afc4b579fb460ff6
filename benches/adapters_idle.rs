//! What a `config` call leaves running (area `adapters_idle` of `docs/performance.md`): the
//! daemon's RSS plus that of every process below it (the adapters `config` started to probe),
//! right after the call and then every 15 s for two minutes. The four built-in backends run
//! their real adapters, pinned and installed by `scripts/install-test-deps` (run it first),
//! pointed at by the same `AGENTPRISM_*_ACP_CMD` variables a user sets; nothing reaches the
//! network (the probes' sessions fail or succeed offline, which is what a user without
//! credentials sees). Goal: under 50 MB two minutes after the call. Run with `cargo bench
//! --bench adapters_idle` (release build) or `scripts/measure adapters_idle`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::http::{Client, Daemon};
use support::{TestDeps, World, figure};

/// How long the bench watches after the call.
const WATCH: Duration = Duration::from_secs(120);
const SAMPLE_EVERY: Duration = Duration::from_secs(15);
const GOAL_MIB: f64 = 50.0;

fn main() {
    let deps = TestDeps::find();
    let field = |name: &str| deps.get(name);
    let temp = tempfile::tempdir().expect("temp dir");
    let mut world = World::new(temp.path(), "adapters");
    let node = field("node");
    let node_dir = Path::new(&node)
        .parent()
        .expect("node's folder")
        .display()
        .to_string();
    let path = format!(
        "{node_dir}:{}:{}",
        field("pi_bin_dir"),
        std::env::var("PATH").unwrap_or_default()
    );
    world.env.retain(|(key, _)| key != "PATH");
    world.env.extend([
        ("PATH".to_owned(), path),
        ("AGENTPRISM_CLAUDE_ACP_CMD".to_owned(), node.clone()),
        (
            "AGENTPRISM_CLAUDE_ACP_ARGS".to_owned(),
            field("claude_acp_entry"),
        ),
        (
            "AGENTPRISM_CODEX_ACP_CMD".to_owned(),
            field("codex_acp_bin"),
        ),
        (
            "AGENTPRISM_OPENCODE_ACP_CMD".to_owned(),
            field("opencode_bin"),
        ),
        ("AGENTPRISM_OPENCODE_ACP_ARGS".to_owned(), "acp".to_owned()),
        ("AGENTPRISM_PI_ACP_CMD".to_owned(), node),
        ("AGENTPRISM_PI_ACP_ARGS".to_owned(), field("pi_acp_entry")),
    ]);
    let daemon = Daemon::start(&world);
    let mut client = Client::connect(daemon.port);
    let before = tree_rss_mib(daemon.pid);
    println!("daemon and children before config: {before:.1} MiB");
    figure(
        "adapters_idle",
        "daemon and its children before `config`",
        format!("{before:.1} MiB"),
        "-",
    );
    let started = Instant::now();
    let answer = client.request(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "workflow", "arguments": {
            "action": "config", "projectDir": world.project.display().to_string()}}}));
    let harnesses = answer
        .pointer("/result/structuredContent/harnesses")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    println!(
        "config answered in {:.1} s ({harnesses} harnesses)",
        started.elapsed().as_secs_f64()
    );
    let answered = Instant::now();
    let last = loop {
        let (mib, processes) = (tree_rss_mib(daemon.pid), tree(daemon.pid).len());
        println!(
            "{:>5.0} s after config: {mib:.1} MiB in {processes} processes",
            answered.elapsed().as_secs_f64()
        );
        if answered.elapsed() >= WATCH {
            break mib;
        }
        std::thread::sleep(SAMPLE_EVERY);
    };
    println!(
        "idle two minutes after config: {last:.1} MiB (goal < {GOAL_MIB} MiB: {})",
        if last < GOAL_MIB { "met" } else { "not met" }
    );
    figure(
        "adapters_idle",
        "daemon and its children two minutes after `config` of the four backends",
        format!("{last:.1} MiB"),
        "< 50 MB",
    );
}

/// `pid` and every process below it.
fn tree(pid: i32) -> Vec<i32> {
    let mut found = vec![pid];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        found.extend(
            children
                .split_whitespace()
                .filter_map(|child| child.parse::<i32>().ok()),
        );
        index += 1;
    }
    found
}

/// The resident memory of `pid` and every process below it.
fn tree_rss_mib(pid: i32) -> f64 {
    let kib: u64 = tree(pid)
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .sum();
    kib as f64 / 1024.0
}
