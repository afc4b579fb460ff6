//! The events table's own encoding: keys in a run's range of the rowid, texts
//! stored without their frame, and the two limits that keying sets.

use serde_json::json;

use super::super::events::{MAX_RUN_KEY, MAX_SEQ};
use super::*;

fn event_with(seq: u64, event: Value) -> EventRecord {
    EventRecord {
        event: crate::model::EventJson::from_value(&event),
        ..crate::store::contract::event(seq, "phase")
    }
}

/// Event texts of every shape: framed ones, a log line, and (not framed) another run's id,
/// another order, no members after the frame, a type that is not a string, no type at all,
/// a type that needs escaping.
fn varied_texts(run: &str) -> Vec<Value> {
    vec![
        json!({"type": "agentStart", "runId": run, "scope": "root", "callIndex": 3}),
        json!({"type": "log", "runId": run, "scope": "root", "message": "a \"quoted\" line é"}),
        json!({"type": "agentEnd", "runId": "other-run", "scope": "root"}),
        json!({"runId": run, "type": "agentEnd", "scope": "root"}),
        json!({"type": "complete", "runId": run}),
        json!({"type": 7, "runId": run, "scope": "root"}),
        json!({"scope": "root"}),
        json!({"type": "we\"ird\n", "runId": run, "scope": "root"}),
    ]
}

/// Every event reads back as it was written, member order included, whether or not its text
/// could be stored without the frame; the usual event is stored without it.
#[tokio::test]
async fn events_read_back_byte_for_byte_whether_or_not_stored_framed() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let texts = varied_texts(id.as_str());
    let events: Vec<EventRecord> = (1..)
        .zip(&texts)
        .map(|(seq, text)| event_with(seq, text.clone()))
        .collect();
    // One at a time, so that each is a row of `events` (appended together, most would be a
    // block: `events_appended_together_are_one_block_and_read_back_the_same`).
    for event in &events {
        store
            .append_events(id, std::slice::from_ref(event), Fence("token-a"))
            .await
            .expect("append");
    }
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

/// Writes the row of seq `seq` of the first run directly, as if the run had written that many.
fn seed_row(store: &SqliteStore, seq: u64) {
    store
        .connection()
        .execute(
            "INSERT INTO events (event_key, event_type, timestamp, redacted, truncated, framed,
                 event)
             VALUES (4294967296 + ?1, 'phase', 0, 0, 0, 0, '{}')",
            [i64::try_from(seq).expect("fits")],
        )
        .expect("seed the row below the end");
}

/// A run's stream ends at seq 2^32 - 1: the last seq is written and read, the next refused.
#[tokio::test]
async fn a_run_holds_events_up_to_the_last_seq_and_no_further() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    // One row just below the end, as if the run had written that many events.
    seed_row(&store, MAX_SEQ - 1);
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
        // Two rows of `events`, then a block.
        for seq in [1, 2] {
            store
                .append_events(&run.run_id, &[event(seq, "phase")], Fence(token))
                .await
                .expect("append");
        }
        store
            .append_events(
                &run.run_id,
                &[event(3, "phase"), event(4, "phase")],
                Fence(token),
            )
            .await
            .expect("append a block");
    }
    store.delete_run(&other.run_id).await.expect("delete");
    for run in [&record, &third] {
        assert_eq!(
            store.events(&run.run_id, 0, 10).await.expect("read").len(),
            4
        );
    }
    let left: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM events", [], |row| row.get(0))
        .expect("count");
    assert_eq!(left, 4);
    let blocks: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM event_blocks", [], |row| row.get(0))
        .expect("count");
    assert_eq!(blocks, 2);
}

fn count(store: &SqliteStore, table: &str) -> i64 {
    store
        .connection()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .expect("count")
}

/// Events appended together are one `event_blocks` row for each run of two or more that are
/// not `log` lines (a log line or a lone event stays a row); every page, from every cursor
/// and at every limit, reads what the rows would have read, and the stream continues after.
#[tokio::test]
async fn events_appended_together_are_one_block_and_read_back_the_same() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let run = id.as_str();
    let mut texts = varied_texts(run);
    texts.extend([
        json!({"type": "log", "runId": run, "scope": "root", "message": "between"}),
        json!({"type": "agentStart", "runId": run, "scope": "root", "callIndex": 4}),
        json!({"type": "agentEnd", "runId": run, "scope": "root", "callIndex": 4}),
    ]);
    let mut events: Vec<EventRecord> = (1..)
        .zip(&texts)
        .map(|(seq, text)| event_with(seq, text.clone()))
        .collect();
    events[4].redacted = true;
    events[5].truncated = true;
    store
        .append_events(id, &events, Fence("token-a"))
        .await
        .expect("append");
    // Rows: seqs 1, 2 and 9; blocks: 3 to 8 and 10 to 11.
    assert_eq!(
        (count(&store, "events"), count(&store, "event_blocks")),
        (3, 2)
    );
    let read = store.events(id, 0, 100).await.expect("read");
    assert_eq!(read, events);
    for (read, written) in read.iter().zip(&texts) {
        assert_eq!(read.event.to_string(), written.to_string());
    }
    for after in 0..=12u64 {
        for limit in 1..=4u32 {
            let page = store.events(id, after, limit).await.expect("page");
            let expected: Vec<&EventRecord> = events
                .iter()
                .filter(|event| event.seq > after)
                .take(limit as usize)
                .collect();
            assert_eq!(page.iter().collect::<Vec<_>>(), expected, "{after} {limit}");
        }
    }
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 11);
    let tail = store.log_tail(id, 10).await.expect("log");
    assert_eq!(tail.1, 2);
    // The stream continues after the last block's last seq, densely.
    match store
        .append_events(id, &[event(11, "phase")], Fence("token-a"))
        .await
    {
        Err(StoreError::Io(message)) => assert!(message.contains("expected 12"), "{message}"),
        other => panic!("expected Io, got {other:?}"),
    }
    let more = [event(12, "phase"), event(13, "phase")];
    store
        .append_events(id, &more, Fence("token-a"))
        .await
        .expect("append after the blocks");
    assert_eq!(store.events(id, 11, 10).await.expect("read"), more);
}

/// A block may end at the last seq a run may hold, and a block past it is refused by name.
#[tokio::test]
async fn a_block_ends_at_the_last_seq_and_no_further() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    seed_row(&store, MAX_SEQ - 2);
    let last = [event(MAX_SEQ - 1, "phase"), event(MAX_SEQ, "phase")];
    store
        .append_events(id, &last, Fence("token-a"))
        .await
        .expect("a block up to the last seq");
    assert_eq!(store.last_event_seq(id).await.expect("seq"), MAX_SEQ);
    assert_eq!(store.events(id, MAX_SEQ - 2, 10).await.expect("read"), last);
    match store
        .append_events(
            id,
            &[event(MAX_SEQ + 1, "phase"), event(MAX_SEQ + 2, "phase")],
            Fence("token-a"),
        )
        .await
    {
        Err(StoreError::Io(message)) => {
            assert!(
                message.contains("beyond the 4294967295 events"),
                "{message}"
            )
        }
        other => panic!("expected Io, got {other:?}"),
    }
}
