//! Three replicas on one store answer for each other's runs: 30 runs started through
//! different replicas, polled through others, all complete with each call prompted once;
//! ownership across replicas for principals and for stateless callers.

use serde_json::json;

use super::{Kind, StoreUnderTest, as_user, context, prompted, replicas, workflows};
use crate::serve::{Client, wait_until};

const RUNS: usize = 30;

#[test]
fn thirty_runs_through_three_replicas_all_complete_with_each_call_prompted_once_on_sqlite() {
    thirty_runs_through_three_replicas_all_complete_with_each_call_prompted_once(Kind::Sqlite);
}

#[test]
fn thirty_runs_through_three_replicas_all_complete_with_each_call_prompted_once_on_postgres() {
    thirty_runs_through_three_replicas_all_complete_with_each_call_prompted_once(Kind::Postgres);
}

fn thirty_runs_through_three_replicas_all_complete_with_each_call_prompted_once(kind: Kind) {
    let ctx = context();
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx, kind);
    let servers = replicas(&ctx, &folder, &store, 3, &[]);
    let clients: Vec<Client> = servers.iter().map(|s| as_user(s, "alice")).collect();
    // A fixed scramble of the replicas (no two consecutive runs start on the same one in
    // the same order), so every replica starts runs another one polls.
    let starter = |run: usize| (run * 7 + run / 3) % 3;
    let mut started = Vec::new();
    for run in 0..RUNS {
        let tag = format!("run{run:02}");
        let run_id = clients[starter(run)].start("calls", json!({"tag": tag}));
        started.push((run, tag, run_id));
    }
    for (run, tag, run_id) in &started {
        let poller = &clients[(starter(*run) + 1) % 3];
        let done = poller.wait_state(run_id, "completed");
        assert_eq!(
            done["result"]["answers"],
            json!([
                format!("ECHO: {tag} call 1"),
                format!("ECHO: {tag} call 2"),
                format!("ECHO: {tag} call 3")
            ]),
            "{done}"
        );
        // The third replica agrees, and cannot resume a completed run.
        let third = &clients[(starter(*run) + 2) % 3];
        assert_eq!(third.status(run_id)["state"], "completed");
        let resumed = third.send("run/resume", json!({"runId": run_id})).json();
        let message = resumed["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("completed"), "{resumed}");
    }
    for (_, tag, _) in &started {
        for call in 1..=3 {
            let prompt = format!("{tag} call {call}");
            assert_eq!(prompted(&ctx, &prompt), 1, "{prompt} prompted once");
        }
    }
    for served in servers {
        let stopped = served.stop();
        assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
    }
}

#[test]
fn a_principal_owns_its_runs_on_every_replica_and_stateless_callers_share_one_owner_on_sqlite() {
    a_principal_owns_its_runs_on_every_replica_and_stateless_callers_share_one_owner(Kind::Sqlite);
}

#[test]
fn a_principal_owns_its_runs_on_every_replica_and_stateless_callers_share_one_owner_on_postgres() {
    a_principal_owns_its_runs_on_every_replica_and_stateless_callers_share_one_owner(
        Kind::Postgres,
    );
}

fn a_principal_owns_its_runs_on_every_replica_and_stateless_callers_share_one_owner(kind: Kind) {
    let ctx = context();
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx, kind);
    let servers = replicas(&ctx, &folder, &store, 2, &[]);
    let run_id = as_user(&servers[0], "alice").start("calls", json!({"tag": "owned"}));
    let on_other = as_user(&servers[1], "alice").wait_state(&run_id, "completed");
    assert_eq!(on_other["runId"], run_id.as_str());
    let stranger = as_user(&servers[1], "mallory")
        .send("run/status", json!({"runId": run_id}))
        .json();
    assert_eq!(stranger["error"]["message"], "unknown runId", "{stranger}");
    // alice still has it after mallory asked.
    assert_eq!(
        as_user(&servers[0], "alice").status(&run_id)["state"],
        "completed"
    );

    // Stateless servers: no principal, every stateless caller is the one anonymous owner.
    let location = store.location();
    let flags = ["--store", location.as_str()];
    let first = crate::serve::Served::start(&ctx, &folder, &flags);
    let second = crate::serve::Served::start(&ctx, &folder, &flags);
    let anonymous = first
        .stateless()
        .start("calls", json!({"tag": "stateless"}));
    let seen = second.stateless().wait_state(&anonymous, "completed");
    assert_eq!(seen["runId"], anonymous.as_str());
    wait_until("the stateless run's calls", || {
        prompted(&ctx, "stateless call 3") == 1
    });
    assert_eq!(prompted(&ctx, "stateless call 1"), 1);
}
