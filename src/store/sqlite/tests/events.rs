//! The events table's own encoding (migration 7): keys in a run's range of the rowid, texts
//! stored without their frame, and the two limits that keying sets.

use serde_json::json;

use super::super::events::{MAX_RUN_KEY, MAX_SEQ};
use super::*;

fn event_with(seq: u64, event: Value) -> EventRecord {
    EventRecord {
        event,
        ..crate::store::contract::event(seq, "phase")
    }
}

/// Every event reads back as it was written, member order included, whether or not its text
/// could be stored without the frame; the usual event is stored without it.
#[tokio::test]
async fn events_read_back_byte_for_byte_whether_or_not_stored_framed() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let run = id.as_str();
    let texts = [
        json!({"type": "agentStart", "runId": run, "scope": "root", "callIndex": 3}),
        json!({"type": "log", "runId": run, "scope": "root", "message": "a \"quoted\" line é"}),
        // Not framed: another run's id, another order, no members after the frame, a type
        // that is not a string, no type at all, a type that needs escaping.
        json!({"type": "agentEnd", "runId": "other-run", "scope": "root"}),
        json!({"runId": run, "type": "agentEnd", "scope": "root"}),
        json!({"type": "complete", "runId": run}),
        json!({"type": 7, "runId": run, "scope": "root"}),
        json!({"scope": "root"}),
        json!({"type": "we\"ird\n", "runId": run, "scope": "root"}),
    ];
    let events: Vec<EventRecord> = (1..)
        .zip(&texts)
        .map(|(seq, text)| event_with(seq, text.clone()))
        .collect();
    store
        .append_events(id, &events, Fence("token-a"))
        .await
        .expect("append");
    let read = store.events(id, 0, 100).await.expect("read");
    assert_eq!(read, events);
    for (read, written) in read.iter().zip(&texts) {
        assert_eq!(read.event.to_string(), written.to_string());
    }
    let stored: Vec<(bool, String)> = store
        .connection()
        .prepare("SELECT framed, event FROM events ORDER BY event_key")
        .expect("prepare")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .map(|row| row.expect("row"))
        .collect();
    let framed: Vec<bool> = stored.iter().map(|(framed, _)| *framed).collect();
    assert_eq!(
        framed,
        [true, true, false, false, false, false, false, true]
    );
    assert_eq!(stored[0].1, r#"{"scope":"root","callIndex":3}"#);
    assert_eq!(
        store.log_tail(id, 10).await.expect("log"),
        (vec!["a \"quoted\" line é".to_owned()], 1)
    );
}

/// A run's stream ends at seq 2^32 - 1: the last seq is written and read, the next refused.
#[tokio::test]
async fn a_run_holds_events_up_to_the_last_seq_and_no_further() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    // One row just below the end, as if the run had written that many events.
    let below = i64::try_from(MAX_SEQ - 1).expect("fits");
    store
        .connection()
        .execute(
            "INSERT INTO events (event_key, event_type, timestamp, redacted, truncated, event)
             VALUES (4294967296 + ?1, 'phase', 0, 0, 0, '{}')",
            [below],
        )
        .expect("seed the row below the end");
    assert_eq!(store.last_event_seq(id).await.expect("seq"), MAX_SEQ - 1);
    store
        .append_events(id, &[event(MAX_SEQ, "phase")], Fence("token-a"))
        .await
        .expect("the last seq is written");
    match store
        .append_events(id, &[event(MAX_SEQ + 1, "phase")], Fence("token-a"))
        .await
    {
        Err(StoreError::Io(message)) => {
            assert!(message.contains("4294967296"), "{message}");
            assert!(
                message.contains("beyond the 4294967295 events"),
                "{message}"
            );
        }
        other => panic!("expected Io, got {other:?}"),
    }
    let tail = store.events(id, MAX_SEQ - 2, 10).await.expect("read");
    let seqs: Vec<u64> = tail.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [MAX_SEQ - 1, MAX_SEQ]);
    assert!(
        store
            .events(id, MAX_SEQ, 10)
            .await
            .expect("read")
            .is_empty()
    );
    assert!(
        store
            .events(id, u64::MAX, 10)
            .await
            .expect("read")
            .is_empty()
    );
}

/// Moves the only run to `run_key` (no foreign key checks while it moves).
fn move_run(store: &SqliteStore, run_key: i64) {
    let connection = store.connection();
    connection
        .execute_batch("PRAGMA foreign_keys = OFF")
        .expect("foreign keys off");
    for table in ["runs", "run_scripts"] {
        connection
            .execute(&format!("UPDATE {table} SET run_key = ?1"), [run_key])
            .expect("move the run");
    }
    connection
        .execute_batch("PRAGMA foreign_keys = ON")
        .expect("foreign keys on");
}

/// The highest run key whose events fit a key is used; one beyond it is refused by name.
#[tokio::test]
async fn events_are_keyed_up_to_the_last_run_key_and_no_further() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    move_run(&store, MAX_RUN_KEY);
    store
        .append_events(
            id,
            &[event(1, "phase"), log_event(2, "hi")],
            Fence("token-a"),
        )
        .await
        .expect("the last run key holds events");
    assert_eq!(store.events(id, 0, 10).await.expect("read").len(), 2);
    assert_eq!(store.log_tail(id, 10).await.expect("log").1, 1);
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 2);
    store.delete_run(id).await.expect("delete");
    let left: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM events", [], |row| row.get(0))
        .expect("count");
    assert_eq!(left, 0);

    let (_folder, store, record) = store_with_run().await;
    move_run(&store, MAX_RUN_KEY + 1);
    match store
        .append_events(&record.run_id, &[event(1, "phase")], Fence("token-a"))
        .await
    {
        Err(StoreError::Io(message)) => {
            assert!(
                message.contains(&format!("run key {}", MAX_RUN_KEY + 1)),
                "{message}"
            );
            assert!(message.contains("lq3k2m1-abc123"), "{message}");
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

/// Deleting a run removes its events and only its: the neighbouring runs' ranges stay whole.
#[tokio::test]
async fn deleting_a_run_removes_only_its_range_of_events() {
    let (_folder, store, record) = store_with_run().await;
    let other = run_record("lq3k2m1-zzz999", PROJECT, 1_700_000_000_001);
    store
        .create_run(&other, &lease("token-b"))
        .await
        .expect("create the other run");
    let third = run_record("lq3k2m1-yyy888", PROJECT, 1_700_000_000_002);
    store
        .create_run(&third, &lease("token-c"))
        .await
        .expect("create the third run");
    for (run, token) in [
        (&record, "token-a"),
        (&other, "token-b"),
        (&third, "token-c"),
    ] {
        store
            .append_events(
                &run.run_id,
                &[event(1, "phase"), event(2, "phase")],
                Fence(token),
            )
            .await
            .expect("append");
    }
    store.delete_run(&other.run_id).await.expect("delete");
    for run in [&record, &third] {
        assert_eq!(
            store.events(&run.run_id, 0, 10).await.expect("read").len(),
            2
        );
    }
    let left: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM events", [], |row| row.get(0))
        .expect("count");
    assert_eq!(left, 4);
}

/// After migrations 7 and 8, a sample written by schema version 1 keeps its events (and takes
/// new ones after them) and its supersession from the old column; a later supersession of
/// the same row wins over the column, and a superseded row leaves the replay pool.
#[tokio::test]
async fn migrated_events_and_supersessions_continue() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let connection = Connection::open(folder.path().join(DATABASE_FILE)).expect("open");
    connection.execute_batch(MIGRATIONS[0]).expect("schema 1");
    connection
        .pragma_update(None, "user_version", 1)
        .expect("version 1");
    connection
        .execute_batch(include_str!("../../testdata/v1_sample.sql"))
        .expect("load sample");
    drop(connection);
    let store = SqliteStore::open(folder.path()).expect("open sample");
    let id = run_id("lq3k2m1-abc123");
    assert_eq!(store.last_event_seq(&id).await.expect("seq"), 5);
    let framed: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM events WHERE framed = 1", [], |row| {
            row.get(0)
        })
        .expect("count");
    assert_eq!(framed, 0, "copied rows keep their text whole");
    let pool_before = store.replay_pool(&id).await.expect("pool").len();
    let rerun = call(3, 0, 1);
    store
        .append_call(
            &id,
            write(&rerun, &[(1, 0), (1, 1)], &[event(6, "agentEnd")]),
            Fence("token-a"),
        )
        .await
        .expect("generation 3");
    let calls = store.calls(&id).await.expect("calls");
    let superseded: Vec<(u32, u32, Option<u32>)> = calls
        .iter()
        .map(|call| (call.generation, call.index, call.superseded_by))
        .collect();
    assert_eq!(&superseded[..2], [(1, 0, Some(3)), (1, 1, Some(3))]);
    // (1, 1) left the pool; (1, 0) had left it already; generation 3's row joined it.
    assert_eq!(
        store.replay_pool(&id).await.expect("pool").len(),
        pool_before
    );
    let events = store.events(&id, 4, 10).await.expect("events");
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, [5, 6]);
    assert_eq!(events[1], event(6, "agentEnd"));
}
