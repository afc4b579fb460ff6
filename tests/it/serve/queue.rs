//! The queue of starts (docs/serve.md, "Queue") in one `serve` process: starts beyond
//! `--max-concurrent-runs` wait in order with their positions, up to `--max-queued-runs` and
//! refused past it; a queued start canceled before it started never runs and cannot be
//! resumed; `/metrics` shows the queue; a queued start outlives its process over
//! `--state-dir` and starts in the next one.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Client, Served, copy_folder, extra_fixtures, wait_until};
use crate::replicas::housekeeping::metrics;
use crate::support::context::{TestContext, prompts_in_log};

/// A context whose mock agents log every message, and the `steps` workflow's folder.
fn setup() -> (TestContext, PathBuf) {
    let ctx = TestContext::new();
    let log = ctx.path("acp.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let folder = copy_folder(&ctx, &extra_fixtures("durable"), "workflows");
    (ctx, folder)
}

/// A fresh gate folder for one run of `steps`.
fn gates(ctx: &TestContext, name: &str) -> PathBuf {
    let gates = ctx.path(name);
    std::fs::create_dir_all(&gates).unwrap();
    gates
}

/// Lets every step of a `steps` run through.
pub(crate) fn open_gates(gates: &Path) {
    for title in ["Gather", "Analyze", "Publish"] {
        std::fs::write(gates.join(title), "").unwrap();
    }
}

/// How many prompts named a gate under `gates`.
fn prompted(ctx: &TestContext, gates: &Path) -> usize {
    let needle = gates.display().to_string();
    prompts_in_log(ctx, "acp.log")
        .iter()
        .filter(|prompt| prompt.contains(&needle))
        .count()
}

fn start(client: &Client, gates: &Path) -> Value {
    client.method(
        "run/start",
        json!({"name": "steps", "arguments": {"gates": gates}}),
    )
}

fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn starts_beyond_capacity_wait_in_order_up_to_the_bound_and_a_canceled_one_never_runs() {
    let (ctx, folder) = setup();
    let served = Served::start(
        &ctx,
        &folder,
        &["--max-concurrent-runs", "1", "--max-queued-runs", "3"],
    );
    let client = served.session(&[]);
    let [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(|name| gates(&ctx, name));

    let first = start(&client, &a);
    assert_eq!(first["state"], "working", "{first}");
    let first = first["runId"].as_str().unwrap().to_owned();
    let mut queued = Vec::new();
    for (place, gates) in [&b, &c, &d].into_iter().enumerate() {
        let view = start(&client, gates);
        assert_eq!(view["state"], "queued", "{view}");
        assert_eq!(view["position"], place + 1, "{view}");
        assert_eq!(view["name"], "steps", "{view}");
        queued.push(view["runId"].as_str().unwrap().to_owned());
    }
    let [second, third, fourth] = [&queued[0], &queued[1], &queued[2]];
    // The bound: a fourth waiting start is refused, saying why, and stores nothing.
    let refused = client
        .send(
            "run/start",
            json!({"name": "steps", "arguments": {"gates": e}}),
        )
        .json();
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("3 starts already wait in the queue")
            && message.contains("--max-queued-runs"),
        "{refused}"
    );
    assert_eq!(
        client.method("run/list", json!({}))["runs"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    wait_until("/metrics showing three queued starts", || {
        gauge(&metrics(&served, None).1, "mhl_serve_queue_length") == Some(3.0)
    });

    // Canceled before it started: it ends in the queue, and the ones behind move up.
    let canceled = client.method("run/cancel", json!({"runId": third}));
    assert_eq!(canceled["state"], "canceled", "{canceled}");
    assert_eq!(canceled["resumable"], false, "{canceled}");
    assert_eq!(
        canceled["error"], "canceled before it started",
        "{canceled}"
    );
    assert_eq!(client.status(fourth)["position"], 2);
    let resumed = client.send("run/resume", json!({"runId": third})).json();
    let message = resumed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("has not run"), "{resumed}");

    // A slot frees: the oldest waiting start takes it, and the next one keeps waiting.
    open_gates(&a);
    client.wait_state(&first, "completed");
    client.wait_state(second, "working");
    let waiting = client.status(fourth);
    assert_eq!(waiting["state"], "queued", "{waiting}");
    assert_eq!(waiting["position"], 1, "{waiting}");
    open_gates(&b);
    client.wait_state(second, "completed");
    client.wait_state(fourth, "working");
    open_gates(&d);
    let done = client.wait_state(fourth, "completed");
    assert_eq!(done["generation"], 1, "{done}");
    assert_eq!(prompted(&ctx, &c), 0, "the canceled start never ran");
    for gates in [&a, &b, &d] {
        assert_eq!(prompted(&ctx, gates), 3, "{}", gates.display());
    }
    assert_eq!(client.status(third)["state"], "canceled");
    wait_until("/metrics showing an empty queue", || {
        gauge(&metrics(&served, None).1, "mhl_serve_queue_length") == Some(0.0)
    });
    let stopped = served.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}

#[test]
fn a_queued_start_outlives_its_process_and_starts_in_the_next_one() {
    let (ctx, folder) = setup();
    let state = ctx.path("serve-state");
    let flags = [
        "--state-dir",
        state.to_str().unwrap(),
        "--max-concurrent-runs",
        "1",
    ];
    let [a, b] = ["a", "b"].map(|name| gates(&ctx, name));
    let first = Served::start(&ctx, &folder, &flags);
    // Stateless callers share one owner, which a later process knows too.
    let client = first.stateless();
    let held = start(&client, &a)["runId"].as_str().unwrap().to_owned();
    let view = start(&client, &b);
    assert_eq!(view["state"], "queued", "{view}");
    let waiting = view["runId"].as_str().unwrap().to_owned();
    let stopped = first.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);

    let second = Served::start(&ctx, &folder, &flags);
    let client = second.stateless();
    // The held run was interrupted by the shutdown, so the slot is free for the queued one.
    client.wait_state(&waiting, "working");
    assert_eq!(client.status(&held)["state"], "canceled");
    open_gates(&b);
    let done = client.wait_state(&waiting, "completed");
    assert_eq!(
        done["result"]["steps"].as_array().map(Vec::len),
        Some(3),
        "{done}"
    );
    assert_eq!(prompted(&ctx, &b), 3);
    let stopped = second.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}
