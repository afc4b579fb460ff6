//! What a replicated deployment refuses and tidies: a store without `cas` needs
//! `--single-replica`; the housekeeping sweep deletes the shared store's runs that finished
//! longer than the terminal TTL ago, whichever replica ran them, and leaves the others;
//! `/metrics` (behind the token) reports what the store holds.

use serde_json::json;

use super::{Kind, StoreUnderTest, TOKEN, as_user, context, replicas, workflows};
use crate::serve::{Served, http, serve_refused, wait_until};

#[test]
fn a_store_without_cas_is_refused_unless_single_replica_is_acknowledged() {
    let ctx = context();
    let folder = workflows(&ctx);
    let location = format!("test-nocas:{}", ctx.path("nocas-store").display());
    let (code, stderr) = serve_refused(
        &ctx,
        &folder,
        &["--http", "127.0.0.1:0", "--store", &location],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("does not offer atomic compare-and-swap (cas)")
            && stderr.contains("--single-replica"),
        "{stderr}"
    );
    let served = Served::start(&ctx, &folder, &["--store", &location, "--single-replica"]);
    let run_id = served.stateless().start("calls", json!({"tag": "single"}));
    served.stateless().wait_state(&run_id, "completed");
    let stopped = served.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);

    // A plain --state-dir is not a replicated store: nothing to acknowledge.
    let state = ctx.path("plain-state");
    let plain = Served::start(&ctx, &folder, &["--state-dir", state.to_str().unwrap()]);
    drop(plain);
    // --store and --state-dir name two different stores: refused together.
    let (code, stderr) = serve_refused(
        &ctx,
        &folder,
        &["--store", &location, "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{stderr}");
    // A database that cannot be reached: nothing is served, and the password never shows.
    let (code, stderr) = serve_refused(
        &ctx,
        &folder,
        &[
            "--http",
            "127.0.0.1:0",
            "--store",
            "postgres://agentprism:hunter2@127.0.0.1:1/agentprism",
        ],
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("opening the run store at postgres://"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn the_sweep_deletes_old_finished_runs_of_every_replica_and_metrics_report_the_store_on_sqlite() {
    the_sweep_deletes_old_finished_runs_of_every_replica_and_metrics_report_the_store(Kind::Sqlite);
}

#[test]
fn the_sweep_deletes_old_finished_runs_of_every_replica_and_metrics_report_the_store_on_postgres() {
    the_sweep_deletes_old_finished_runs_of_every_replica_and_metrics_report_the_store(
        Kind::Postgres,
    );
}

fn the_sweep_deletes_old_finished_runs_of_every_replica_and_metrics_report_the_store(kind: Kind) {
    let mut ctx = context();
    ctx.env
        .insert("MHL_SERVE_SWEEP_INTERVAL".to_owned(), "100ms".to_owned());
    // The replicas name themselves in the log at `info`.
    ctx.env
        .insert("AGENTPRISM_LOG".to_owned(), "info".to_owned());
    let folder = workflows(&ctx);
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let store = StoreUnderTest::new(&ctx, kind);
    // The sweeping replica keeps finished runs 2 s; the other one an hour.
    let sweeper = replicas(&ctx, &folder, &store, 1, &["--terminal-run-ttl", "2s"]).remove(0);
    let keeper = replicas(&ctx, &folder, &store, 1, &[]).remove(0);
    let client = as_user(&keeper, "alice");
    let old = client.start("calls", json!({"tag": "old"}));
    client.wait_state(&old, "completed");
    // Never finished, so never swept: a run held at its first gate.
    let held = client.start("steps", json!({"gates": gates}));
    wait_until("the other replica's sweep deleting the old run", || {
        client.send("run/status", json!({"runId": old})).json()["error"]["message"]
            == "unknown runId"
    });
    let young = client.start("calls", json!({"tag": "young"}));
    client.wait_state(&young, "completed");
    assert_eq!(
        client.status(&young)["state"],
        "completed",
        "younger than the TTL: kept"
    );
    assert_eq!(
        client.status(&held)["state"],
        "working",
        "not finished: kept"
    );

    let (status, body) = metrics(&sweeper, None);
    assert_eq!(status, 401, "{body}");
    let line = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    // The gauges come from the sweep's one query of the store: the held run is the one
    // pending or running, whichever replica executes it.
    wait_until("the sweeper's gauges showing the held run", || {
        let (_, text) = metrics(&sweeper, Some(&bearer()));
        line(&text, "mhl_serve_runs_pending") == Some(1.0)
            && line(&text, "mhl_serve_runs{state=\"running\"}") == Some(1.0)
    });
    wait_until("the keeper's counters", || {
        let (status, text) = metrics(&keeper, Some(&bearer()));
        status == 200
            && line(&text, "mhl_agent_calls_total") == Some(6.0)
            && line(&text, "mhl_lease_renewals_total").is_some_and(|n| n >= 1.0)
            && line(
                &text,
                "mhl_serve_request_seconds_count{method=\"run/start\"}",
            ) == Some(3.0)
    });

    // Which replica executes the held run: its status names the keeper on either replica
    // (from the stored lease on the sweeper, from memory on the keeper), and the keeper's
    // `/metrics` carries the same identity.
    let from_sweeper = as_user(&sweeper, "alice").status(&held);
    let holder = from_sweeper["holder"].clone();
    assert_eq!(holder["pid"], keeper.pid(), "{from_sweeper}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(holder["host"], host.trim(), "{from_sweeper}");
    assert_eq!(client.status(&held)["holder"], holder);
    let instance = holder["instance"].as_str().expect("an instance id");
    let (_, text) = metrics(&keeper, Some(&bearer()));
    assert!(
        text.lines()
            .any(|line| line.starts_with("mhl_serve_replica{")
                && line.contains(&format!("instance=\"{instance}\""))
                && line.contains(&format!("pid=\"{}\"", keeper.pid()))
                && line.ends_with(" 1")),
        "{text}"
    );
    assert_eq!(
        as_user(&keeper, "alice").status(&young)["holder"],
        serde_json::Value::Null,
        "a finished run has no holder"
    );
    let stopped = keeper.stop();
    assert!(
        stopped
            .stderr
            .lines()
            .any(|line| line.contains("serving as this replica") && line.contains(instance)),
        "{}",
        stopped.stderr
    );
}

/// `GET /metrics` of `served`, with `authorization` when given: status and body.
pub fn metrics(served: &Served, authorization: Option<&str>) -> (u16, String) {
    let mut headers = Vec::new();
    if let Some(value) = authorization {
        headers.push(("Authorization", value));
    }
    let reply = http(served.address, "GET", "/metrics", &headers, b"");
    (reply.status, reply.body)
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

#[test]
fn the_daemon_serves_metrics_behind_its_same_user_guard() {
    use crate::daemon::{World, http as daemon_http};
    let world = World::with(|ctx| ctx.set("AGENTPRISM_TEST_NO_PEER_LOOKUP", "1"));
    let record = world.start();
    // Without the kernel lookup only the token proves the same user: refused without it.
    let bare = daemon_http(record.port, "GET", "/metrics", &[], "");
    assert_eq!(bare.status, 401);
    let token_file = world.ctx.state().join("daemons/http-token.json");
    let key = agentprism::discovery::RunControlKey::load(&token_file).expect("a 0600 token file");
    let bearer = format!("Bearer {}", key.to_bearer());
    let served = daemon_http(
        record.port,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(served.status, 200);
    let text = String::from_utf8_lossy(&served.body).into_owned();
    assert!(text.contains("mhl_lease_renewals_total 0"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}
