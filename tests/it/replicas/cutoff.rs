//! A replica cut off from its store: its renewals keep failing, so it cancels its run's
//! agents before the lease expires (by the store's own record of the expiry), and a start
//! through it fails with "could not acquire run execution lease" instead of running
//! uncoordinated.
//!
//! On SQLite the cut is the database's write lock, held by the test: every write of the
//! replica waits, then fails (reads still answer). On PostgreSQL it is the proxy's blackhole
//! between the replica and the server.

use std::time::Duration;

use serde_json::json;

use super::{StoreUnderTest, as_user, cancels, context, prompted, replicas, workflows};
use crate::serve::wait_until;

/// The store's write lock, held until dropped.
struct Cut {
    connection: rusqlite::Connection,
}

impl Cut {
    fn new(store: &StoreUnderTest) -> Cut {
        let StoreUnderTest::Sqlite(root) = store;
        let connection = rusqlite::Connection::open(root.join("store.db")).expect("open");
        connection
            .busy_timeout(Duration::from_secs(30))
            .expect("busy timeout");
        connection
            .execute_batch("BEGIN EXCLUSIVE")
            .expect("the write lock");
        Cut { connection }
    }

    /// The lease expiry the store holds for `run_id` (Unix ms).
    fn lease_expiry(&self, run_id: &str) -> i64 {
        self.connection
            .query_row(
                "SELECT lease_expires_at FROM runs WHERE run_id = ?1",
                [run_id],
                |row| row.get::<_, Option<i64>>(0),
            )
            .expect("the run's lease")
            .expect("an expiry under a TTL")
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = self.connection.execute_batch("ROLLBACK");
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_replica_cut_off_from_its_store_cancels_its_runs_before_the_lease_expires_and_starts_none() {
    let mut ctx = context();
    // Every store call must end within a third of the TTL: SQLite's calls wait up to its
    // busy timeout (5 s) for the lock, so the TTL here is above three of those.
    ctx.env
        .insert("MHL_SERVE_RUN_LOCK_TTL".to_owned(), "18s".to_owned());
    let folder = workflows(&ctx);
    let store = StoreUnderTest::new(&ctx);
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let servers = replicas(&ctx, &folder, &store, 1, &[]);
    let client = as_user(&servers[0], "alice");
    let run_id = client.start("steps", json!({"gates": gates}));
    let gather = gates.join("Gather").display().to_string();
    wait_until("the Gather step's prompt", || prompted(&ctx, &gather) == 1);
    let before = cancels(&ctx);

    let cut = Cut::new(&store);
    let expiry = cut.lease_expiry(&run_id);
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
    drop(cut);

    // Reconnected: the run is not lost, only stopped; it resumes.
    let stopped = client.poll(&run_id, "stopped", |view| view["state"] != "working");
    assert_eq!(stopped["resumable"], true, "{stopped}");
    client.method("run/resume", json!({"runId": run_id}));
    std::fs::write(gates.join("Gather"), "").unwrap();
    std::fs::write(gates.join("Analyze"), "").unwrap();
    std::fs::write(gates.join("Publish"), "").unwrap();
    client.wait_state(&run_id, "completed");
}
