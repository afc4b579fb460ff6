//! A replica cut off from its store: its renewals keep failing, so it cancels its run's
//! agents before the lease expires (by the store's own record of the expiry), and a start
//! through it fails with "could not acquire run execution lease" instead of running
//! uncoordinated.
//!
//! On SQLite the cut is the database's write lock, held by the test: every write of the
//! replica waits, then fails (reads still answer). On PostgreSQL it is the proxy's blackhole
//! between the replica and the server.

use std::time::Duration;

use agentprism::model::RunId;
use agentprism::testing::{ProxyMode, TcpProxy};
use serde_json::json;

use super::{
    Backend, Kind, StoreUnderTest, as_user, cancels, context, prompted, replica_at, replicas,
    workflows,
};
use crate::serve::wait_until;

/// How a test cuts the replica off: SQLite's write lock held by the test, or the replica's
/// proxy to the database switched to a blackhole.
enum Cut {
    Lock(rusqlite::Connection),
    Proxy(TcpProxy),
}

impl Cut {
    fn lock(root: &std::path::Path) -> Cut {
        let connection = rusqlite::Connection::open(root.join("store.db")).expect("open");
        connection
            .busy_timeout(Duration::from_secs(30))
            .expect("busy timeout");
        connection
            .execute_batch("BEGIN EXCLUSIVE")
            .expect("the write lock");
        Cut::Lock(connection)
    }

    fn mend(self) {
        match self {
            Cut::Lock(connection) => connection.execute_batch("ROLLBACK").expect("unlock"),
            Cut::Proxy(proxy) => {
                proxy.set_mode(ProxyMode::Pass);
                // The proxy lives on until the test ends: the replica still talks through it.
                std::mem::forget(proxy);
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none_on_sqlite()
 {
    a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none(
        Kind::Sqlite,
    );
}

#[test]
fn a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none_on_postgres()
 {
    a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none(
        Kind::Postgres,
    );
}

fn a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none(
    kind: Kind,
) {
    let mut ctx = context();
    // Every store call must end within a third of the TTL: SQLite's calls wait up to its
    // busy timeout (5 s) for the lock, so its TTL here is above three of those; a
    // PostgreSQL call's deadline is a quarter of the TTL.
    let ttl = match kind {
        Kind::Sqlite => "18s",
        Kind::Postgres => "3s",
    };
    ctx.env
        .insert("MHL_SERVE_RUN_LOCK_TTL".to_owned(), ttl.to_owned());
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx, kind);
    let direct = store.open();
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    // On PostgreSQL the cut replica reaches the database through a proxy of its own, and a
    // bystander replica directly: the cut leaves it alone.
    let proxied = store.proxied();
    let (cut_off, bystander) = match &proxied {
        Some((url, _)) => (
            replica_at(&ctx, &folder, url, &[]),
            Some(replicas(&ctx, &folder, &store, 1, &[]).remove(0)),
        ),
        None => (replicas(&ctx, &folder, &store, 1, &[]).remove(0), None),
    };
    let client = as_user(&cut_off, "alice");
    let run_id = client.start("steps", json!({"gates": gates}));
    let gather = gates.join("Gather").display().to_string();
    wait_until("the Gather step's prompt", || prompted(&ctx, &gather) == 1);
    let before = cancels(&ctx);

    let cut = match (proxied, &store.backend) {
        (Some((_, proxy)), _) => {
            proxy.set_mode(ProxyMode::Blackhole);
            Cut::Proxy(proxy)
        }
        (None, Backend::Sqlite(root)) => Cut::lock(root),
        (None, Backend::Postgres(_)) => unreachable!("a PostgreSQL store is proxied"),
    };
    let parsed = RunId::parse(&run_id).expect("a run id");
    let lease = store
        .block_on(direct.lease(&parsed))
        .expect("the lease")
        .expect("held");
    let expiry = lease.expires_at.expect("an expiry under a TTL");
    wait_until("the replica cancelling its agent", || {
        cancels(&ctx) > before
    });
    let cancelled_at = now_ms();
    assert!(
        cancelled_at < expiry,
        "cancelled {} ms after the lease expired",
        cancelled_at - expiry
    );
    let refused = client
        .send(
            "run/start",
            json!({"name": "calls", "arguments": {"tag": "cut"}}),
        )
        .json();
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("could not acquire run execution lease"),
        "{refused}"
    );
    assert_eq!(prompted(&ctx, "cut call"), 0, "nothing ran uncoordinated");
    if let Some(bystander) = &bystander {
        let other = as_user(bystander, "bob");
        let run = other.start("calls", json!({"tag": "bystander"}));
        other.wait_state(&run, "completed");
    }
    cut.mend();

    // Reconnected: the run is not lost, only stopped; it resumes.
    let resumer = as_user(bystander.as_ref().unwrap_or(&cut_off), "alice");
    let stopped = resumer.poll(&run_id, "stopped", |view| view["state"] != "working");
    assert_eq!(stopped["resumable"], true, "{stopped}");
    // Its lease may still be on record (the release was cut off too) until it lapses.
    wait_until("the resume accepted", || {
        resumer
            .send("run/resume", json!({"runId": run_id}))
            .json()
            .get("error")
            .is_none()
    });
    std::fs::write(gates.join("Gather"), "").unwrap();
    std::fs::write(gates.join("Analyze"), "").unwrap();
    std::fs::write(gates.join("Publish"), "").unwrap();
    resumer.wait_state(&run_id, "completed");
}
