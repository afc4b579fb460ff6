//! The `workflow` tool as MCP tasks (docs/tasks.md), driven by `tests/e2e/tasks_client.mjs`
//! against `agentprism serve --http` (the workflow server the daemon mounts) in each era:
//! 2026-07-28 with the `io.modelcontextprotocol/tasks` extension as raw JSON-RPC, 2025-11-25
//! with the TypeScript SDK v1's experimental task client. Each client runs a workflow as a
//! task to completion and reads its result, answers a checkpoint through the task (2026),
//! cancels one, and is refused an unknown task id and (2025) a `ttl` past the limit; the test
//! then restarts the server over the same store and reads every task again, which must say
//! what it said before, since a task id is the runId. Against `agentprism serve <dir>`, a
//! workflow's own tool runs as a task in each era and its checkpoint is answered through it.
//!
//! The same flows run against the real per-user daemon (`agentprism daemon run`, its own
//! HOME and state dir, the mock agent): the tasks survive a SIGTERM and a fresh daemon over
//! the same persistence root.
//!
//! Without Node or the SDK these tests fail and name the install command, as
//! `sdk_clients_ts.rs` does.

use std::path::Path;
use std::process::Command;

use nix::sys::signal::Signal;

use crate::daemon::{World, wait_ready};
use crate::sdk_clients::{
    CLIENT_DEADLINE, HttpServer, Sweeper, check_client, path_from_manifest, run_with_deadline,
};
use crate::support::context::{DEADLINE, TestContext};

#[test]
fn workflow_runs_as_2026_07_28_tasks_and_survives_a_restart() {
    drive("2026");
}

#[test]
fn workflow_runs_as_2025_11_25_tasks_and_survives_a_restart() {
    drive("2025");
}

#[test]
fn workflow_runs_as_2026_07_28_tasks_on_the_daemon_and_survives_its_restart() {
    drive_daemon("2026");
}

#[test]
fn workflow_runs_as_2025_11_25_tasks_on_the_daemon_and_survives_its_restart() {
    drive_daemon("2025");
}

#[test]
fn a_served_workflow_runs_as_a_2026_07_28_task_answering_its_checkpoint() {
    serve("2026");
}

#[test]
fn a_served_workflow_runs_as_a_2025_11_25_task_answering_its_checkpoint() {
    serve("2025");
}

/// `agentprism serve <tests/fixtures/serve copy> --http`, and the client's `--serve` steps.
fn serve(era: &str) {
    let context = TestContext::new();
    let _sweeper = Sweeper {
        home: context.path("home"),
    };
    let folder = context.path("workflows");
    copy_folder(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve"),
        &folder,
    );
    let folder = folder.to_str().expect("utf-8 temp path").to_owned();
    let server = HttpServer::start_with(&context, &["serve", &folder, "--http", "127.0.0.1:0"]);
    let outcome = run_with_deadline(
        client(&context, era, &server.url, &["--serve"]),
        CLIENT_DEADLINE,
    );
    let log = server.stop();
    check_client(&format!("serve tasks client, era {era}"), &outcome, &log)();
}

/// `node tasks_client.mjs --era <era> ...` with the test's environment.
fn client(context: &TestContext, era: &str, url: &str, extra: &[&str]) -> Command {
    let node = path_from_manifest("node", "Node 22 for the TypeScript MCP clients");
    let sdk = path_from_manifest("ts_sdk_v1", "the TypeScript MCP SDK v1");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/tasks_client.mjs");
    let mut command = Command::new(node);
    command
        .arg(script)
        .args(["--era", era, "--http", url])
        .arg("--sdk")
        .arg(sdk)
        .args(extra)
        .env_clear()
        .envs(&context.env)
        .current_dir(context.project());
    command
}

fn drive(era: &str) {
    let context = TestContext::new();
    let _sweeper = Sweeper {
        home: context.path("home"),
    };
    let server = HttpServer::start(&context);
    let tasks = run_the_flows(&context, era, &server.url.clone(), || server.stop());

    // A new server over the same store: the tasks are the runs, so they are still there.
    let server = HttpServer::start(&context);
    read_again(&context, era, &server.url, &tasks);
    server.stop();
}

/// The flows against `agentprism daemon run` (foreground, as `daemon.rs` starts it), then a
/// SIGTERM and a second daemon over the same persistence root, which must read every task
/// as it was.
fn drive_daemon(era: &str) {
    let world = World::new();
    let _sweeper = Sweeper {
        home: world.ctx.path("home"),
    };
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    let tasks = run_the_flows(&world.ctx, era, &record.url, || {
        daemon.signal(Signal::SIGTERM);
        let finished = daemon.finish(DEADLINE);
        assert_eq!(finished.code(), 0, "the daemon's exit\n{}", finished.stderr);
        finished.stderr
    });

    let restarted = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    assert_eq!(
        record.pid,
        restarted.pid(),
        "the pointer names the new daemon"
    );
    read_again(&world.ctx, era, &record.url, &tasks);
    restarted.signal(Signal::SIGTERM);
    let finished = restarted.finish(DEADLINE);
    assert_eq!(
        finished.code(),
        0,
        "the second daemon's exit\n{}",
        finished.stderr
    );
}

/// Runs the client's steps against `url`, stops the server with `stop` (which answers its
/// log), and returns the `TASK <id> <status>` lines: one completed, one cancelled.
fn run_the_flows(
    context: &TestContext,
    era: &str,
    url: &str,
    stop: impl FnOnce() -> String,
) -> Vec<(String, String)> {
    let project = context.project();
    let project = project.to_str().expect("utf-8 project path");
    let outcome = run_with_deadline(
        client(context, era, url, &["--project", project]),
        CLIENT_DEADLINE,
    );
    let log = stop();
    check_client(&format!("tasks client, era {era}"), &outcome, &log)();
    let tasks: Vec<(String, String)> = outcome
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("TASK "))
        .map(|line| {
            let (id, status) = line.split_once(' ').expect("TASK <id> <status>");
            (id.to_owned(), status.to_owned())
        })
        .collect();
    let statuses: Vec<&str> = tasks.iter().map(|(_, status)| status.as_str()).collect();
    assert_eq!(
        statuses,
        ["completed", "cancelled"],
        "one completed and one cancelled task\n{}",
        outcome.stdout
    );
    tasks
}

/// Reads each task again with `--get` from a server started after the one that ran them.
fn read_again(context: &TestContext, era: &str, url: &str, tasks: &[(String, String)]) {
    for (task_id, status) in tasks {
        let read = run_with_deadline(
            client(context, era, url, &["--get", task_id]),
            CLIENT_DEADLINE,
        );
        assert!(
            read.stdout.contains(&format!("TASK {task_id} {status}")),
            "after the restart task {task_id} should still be {status}\nstdout:\n{}\nstderr:\n{}",
            read.stdout,
            read.stderr
        );
    }
}

/// Copies the fixture folder, so the server's own files stay in the test's temp dir.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the folder copy");
    for entry in std::fs::read_dir(from).expect("read the fixture folder") {
        let entry = entry.expect("fixture entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("entry type").is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a fixture file");
        }
    }
}
