//! The queue of starts across three replicas on one PostgreSQL reached over `verify-full`
//! (docs/serve.md, "Queue"): a burst of starts beyond every replica's capacity is accepted up
//! to the bound with positions in the order sent, refused past it, and each freed slot goes to
//! the oldest waiting start, whichever replica it was sent to, until every start completed.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::housekeeping::metrics;
use super::{TOKEN, as_user, context, prompted, replica_at, workflows};
use crate::pg_tls::{VerifiedStore, verified_store};
use crate::serve::queue::open_gates;
use crate::serve::{Client, wait_until};

/// Runs sent: three start at once (one slot per replica), six wait (the bound).
const RUNS: usize = 9;
const BOUND: &str = "6";

#[test]
fn a_burst_beyond_capacity_waits_in_order_on_three_replicas_over_tls_and_every_start_completes() {
    let ctx = context();
    let folder = workflows(&ctx);
    let VerifiedStore {
        cluster,
        runtime,
        location,
    } = verified_store(&ctx);
    let flags = ["--max-concurrent-runs", "1", "--max-queued-runs", BOUND];
    let servers: Vec<_> = (0..3)
        .map(|_| replica_at(&ctx, &folder, &location, &flags))
        .collect();
    let clients: Vec<Client> = servers.iter().map(|s| as_user(s, "alice")).collect();
    let gates: Vec<PathBuf> = (0..=RUNS)
        .map(|run| {
            let gates = ctx.path(&format!("gates-{run}"));
            std::fs::create_dir_all(&gates).unwrap();
            gates
        })
        .collect();

    // The burst, round robin over the replicas: the first three take the three slots, the
    // next six wait at positions 1 to 6, the tenth is refused.
    let mut runs = Vec::new();
    for (run, gates) in gates.iter().enumerate().take(RUNS) {
        let view = clients[run % 3].method(
            "run/start",
            json!({"name": "steps", "arguments": {"gates": gates}}),
        );
        if run < 3 {
            assert_eq!(view["state"], "working", "run {run}: {view}");
        } else {
            assert_eq!(view["state"], "queued", "run {run}: {view}");
            assert_eq!(view["position"], run - 2, "run {run}: {view}");
        }
        runs.push(view["runId"].as_str().unwrap().to_owned());
    }
    let refused = clients[0]
        .send(
            "run/start",
            json!({"name": "steps", "arguments": {"gates": gates[RUNS]}}),
        )
        .json();
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("6 starts already wait"), "{refused}");
    let bearer = format!("Bearer {TOKEN}");
    wait_until("/metrics showing the six waiting starts", || {
        let (_, text) = metrics(&servers[2], Some(&bearer));
        text.contains("mhl_serve_queue_length 6")
    });

    // Each run let through frees one slot, which the oldest waiting start takes, whichever
    // replica it was sent to; the ones behind it keep waiting, one place further up.
    for done in 0..RUNS {
        open_gates(&gates[done]);
        clients[(done + 1) % 3].wait_state(&runs[done], "completed");
        let next = done + 3;
        if next < RUNS {
            clients[(next + 2) % 3].poll(&runs[next], "started", |view| view["state"] != "queued");
            for (place, behind) in runs.iter().enumerate().skip(next + 1) {
                let view: Value = clients[place % 3].status(behind);
                assert_eq!(view["state"], "queued", "run {place}: {view}");
                assert_eq!(view["position"], place - next, "run {place}: {view}");
            }
        }
    }
    for (run, gates) in gates.iter().enumerate().take(RUNS) {
        let prompts = prompted(&ctx, &gates.display().to_string());
        assert_eq!(prompts, 3, "run {run}: each step prompted once");
    }
    assert_eq!(prompted(&ctx, &gates[RUNS].display().to_string()), 0);
    let (tls, all) = runtime
        .block_on(cluster.sessions_over_tls("agentprism"))
        .unwrap();
    assert!(all >= 3 && tls == all, "{tls} of {all} sessions over TLS");
    for served in servers {
        let stopped = served.stop();
        assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
    }
}
