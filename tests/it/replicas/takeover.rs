//! A replica that dies (`kill -9`) or stalls (SIGSTOP) past its lease TTL: its run reads as
//! failed and resumable on another replica, an explicit `run/resume` there finishes it
//! without prompting completed calls again, and a stalled replica that wakes up has its
//! late writes refused by the fence and cancels its own work.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use agentprism::model::{CallKind, RunId};

use super::{
    Kind, StoreUnderTest, as_user, cancels, context, prompted, replicas, wait_lapsed, workflows,
};
use crate::serve::{Client, wait_until};

/// The prompt of `title`'s step of the `steps` workflow (its gate file's path is unique).
fn gate(gates: &Path, title: &str) -> String {
    gates.join(title).display().to_string()
}

/// Starts `steps` through `client`, lets Gather complete, and waits until Analyze was
/// prompted (so Gather's row is journaled).
fn run_until_analyze(
    ctx: &crate::support::context::TestContext,
    client: &Client,
    gates: &Path,
) -> String {
    let run_id = client.start("steps", json!({"gates": gates}));
    wait_until("the Gather step's prompt", || {
        prompted(ctx, &gate(gates, "Gather")) == 1
    });
    std::fs::write(gates.join("Gather"), "").unwrap();
    wait_until("the Analyze step's prompt", || {
        prompted(ctx, &gate(gates, "Analyze")) == 1
    });
    run_id
}

/// Every journaled agent row of `run_id`, as (generation, index) pairs.
fn journal(store: &StoreUnderTest, run_id: &str) -> Vec<(u32, u32)> {
    let opened = store.open();
    let run_id = RunId::parse(run_id).expect("a run id");
    let calls = store
        .block_on(opened.calls(&run_id))
        .expect("the run's calls");
    calls
        .iter()
        .filter(|call| call.kind == CallKind::Agent)
        .map(|call| (call.generation, call.index))
        .collect()
}

fn finish(
    ctx: &crate::support::context::TestContext,
    client: &Client,
    run_id: &str,
    gates: &Path,
) -> Value {
    std::fs::write(gates.join("Analyze"), "").unwrap();
    std::fs::write(gates.join("Publish"), "").unwrap();
    let done = client.wait_state(run_id, "completed");
    assert_eq!(
        done["result"],
        json!({"steps": ["ECHO: Gather", "ECHO: Analyze", "ECHO: Publish"]}),
        "{done}"
    );
    assert_eq!(
        prompted(ctx, &gate(gates, "Gather")),
        1,
        "the call completed before the takeover is replayed, not prompted again"
    );
    done
}

#[test]
fn a_killed_replicas_run_lapses_to_failed_and_resumes_on_another_without_prompting_done_calls_on_sqlite()
 {
    a_killed_replicas_run_lapses_to_failed_and_resumes_on_another_without_prompting_done_calls(
        Kind::Sqlite,
    );
}

#[test]
fn a_killed_replicas_run_lapses_to_failed_and_resumes_on_another_without_prompting_done_calls_on_postgres()
 {
    a_killed_replicas_run_lapses_to_failed_and_resumes_on_another_without_prompting_done_calls(
        Kind::Postgres,
    );
}

fn a_killed_replicas_run_lapses_to_failed_and_resumes_on_another_without_prompting_done_calls(
    kind: Kind,
) {
    let ctx = context();
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx, kind);
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let mut servers = replicas(&ctx, &folder, &store, 2, &[]);
    let run_id = run_until_analyze(&ctx, &as_user(&servers[0], "alice"), &gates);
    let other = as_user(&servers[1], "alice");
    // Held by the live replica: the other one reports it working, and refuses to resume it.
    assert_eq!(other.status(&run_id)["state"], "working");
    let refused = other.send("run/resume", json!({"runId": run_id})).json();
    assert!(refused["error"]["message"].as_str().is_some(), "{refused}");

    let killed = servers[0].kill();
    assert_eq!(killed.status.signal(), Some(9), "{}", killed.stderr);
    let lapsed = wait_lapsed(&other, &run_id);
    assert_eq!(lapsed["resumable"], true, "{lapsed}");
    let error = lapsed["error"].as_str().unwrap_or_default();
    assert!(error.contains("stopped renewing its lease"), "{lapsed}");

    let resumed = other.method("run/resume", json!({"runId": run_id}));
    assert_eq!(resumed["generation"], 2, "{resumed}");
    finish(&ctx, &other, &run_id, &gates);
    assert_eq!(
        prompted(&ctx, &gate(&gates, "Analyze")),
        2,
        "the interrupted call runs again"
    );
    assert_eq!(prompted(&ctx, &gate(&gates, "Publish")), 1);
}

#[test]
fn a_stalled_replica_that_wakes_after_a_takeover_is_fenced_and_cancels_its_own_work_on_sqlite() {
    a_stalled_replica_that_wakes_after_a_takeover_is_fenced_and_cancels_its_own_work(Kind::Sqlite);
}

#[test]
fn a_stalled_replica_that_wakes_after_a_takeover_is_fenced_and_cancels_its_own_work_on_postgres() {
    a_stalled_replica_that_wakes_after_a_takeover_is_fenced_and_cancels_its_own_work(
        Kind::Postgres,
    );
}

fn a_stalled_replica_that_wakes_after_a_takeover_is_fenced_and_cancels_its_own_work(kind: Kind) {
    let ctx = context();
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx, kind);
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let servers = replicas(&ctx, &folder, &store, 2, &[]);
    let run_id = run_until_analyze(&ctx, &as_user(&servers[0], "alice"), &gates);
    let stalled = Pid::from_raw(servers[0].pid() as i32);
    // Only the server process stops: its agent (Analyze, waiting on its gate) lives on.
    kill(stalled, Signal::SIGSTOP).unwrap();
    let other = as_user(&servers[1], "alice");
    wait_lapsed(&other, &run_id);
    let resumed = other.method("run/resume", json!({"runId": run_id}));
    assert_eq!(resumed["generation"], 2, "{resumed}");
    wait_until("the new generation's Analyze prompt", || {
        prompted(&ctx, &gate(&gates, "Analyze")) == 2
    });
    let cancels_before = cancels(&ctx);
    kill(stalled, Signal::SIGCONT).unwrap();
    // Its first renewal is refused: it cancels the Analyze call it still runs.
    wait_until("the stalled replica cancelling its agent", || {
        cancels(&ctx) > cancels_before
    });
    finish(&ctx, &other, &run_id, &gates);
    // One result per call: generation 1 journaled Gather only (its late Analyze was never
    // written), generation 2 replayed Gather and ran the rest.
    let rows = journal(&store, &run_id);
    assert_eq!(rows, vec![(1, 0), (2, 0), (2, 1), (2, 2)], "{rows:?}");
    let mut servers = servers;
    let woken = servers.remove(0).stop();
    assert!(
        woken.stderr.contains("lost the run's lease"),
        "the woken replica says it lost the run:\n{}",
        woken.stderr
    );
}
