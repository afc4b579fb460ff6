//! The integer call key (`call_keys.rs`, migration 11): the bounds a row's generation and
//! index must keep, the run ranges deletes and reads stay inside, and a store of schema 10
//! keeping every call row through the migration, or refused unchanged when a row cannot be
//! keyed.

use rusqlite::Connection;

use super::*;
use crate::store::contract::checkpoint_call;
use crate::store::sqlite::call_keys::{MAX_CALL_INDEX, MAX_GENERATION};

/// The `calls` table, index and trigger as migrations 1 to 10 left them.
const SCHEMA_10_CALLS: &str = "
CREATE TABLE calls_v10 (
    run_key            INTEGER NOT NULL REFERENCES runs (run_key) ON DELETE CASCADE,
    generation         INTEGER NOT NULL,
    call_index         INTEGER NOT NULL,
    settlement_ordinal INTEGER NOT NULL,
    kind               TEXT    NOT NULL,
    hash               TEXT    NOT NULL,
    path               TEXT,
    inputs_hash        TEXT,
    label              TEXT,
    phase              TEXT,
    outcome            TEXT    NOT NULL,
    origin             TEXT    NOT NULL,
    aborted            INTEGER NOT NULL,
    attempts           INTEGER NOT NULL,
    model_requested    TEXT,
    model_resolved     TEXT,
    backend_id         TEXT,
    resolved_cwd       TEXT,
    usage              TEXT    NOT NULL,
    error              TEXT,
    replay             TEXT,
    session            TEXT,
    result             TEXT,
    changes            TEXT,
    live_reason        TEXT,
    PRIMARY KEY (run_key, generation, call_index)
);
INSERT INTO calls_v10 SELECT run_key, generation, call_index, settlement_ordinal, kind, hash,
    path, inputs_hash, label, phase, outcome, origin, aborted, attempts, model_requested,
    model_resolved, backend_id, resolved_cwd, usage, error, replay, session, result, changes,
    live_reason FROM calls;
DROP TABLE calls;
ALTER TABLE calls_v10 RENAME TO calls;
CREATE INDEX calls_checkpoints ON calls (run_key, generation, settlement_ordinal, call_index)
    WHERE kind = 'checkpoint';
CREATE TRIGGER calls_version_insert AFTER INSERT ON calls
WHEN (SELECT status FROM runs WHERE run_key = NEW.run_key) IS NOT 'running'
BEGIN
    UPDATE run_version_clock SET value = value + 1;
    UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = NEW.run_key;
END;
DROP TABLE call_blocks;
PRAGMA user_version = 10;
";

/// Two runs side by side, the first with two generations (a superseded row, a checkpoint),
/// the second with one call; returns the store and the two run ids.
async fn two_runs() -> (tempfile::TempDir, SqliteStore, RunId, RunId) {
    let (folder, store, record) = store_with_run().await;
    let first = record.run_id.clone();
    let other = run_record("lq3k2m1-def456", PROJECT, 1_700_000_000_500);
    store
        .create_run(&other, &lease("token-b"))
        .await
        .expect("second run");
    let fence = Fence("token-a");
    let (a, b, asked) = (call(1, 0, 1), call(1, 1, 2), checkpoint_call(1, 2, 3));
    // Apart, so each is a row (neighbours written together are a block, which schema 10
    // does not have).
    store
        .append_call(&first, write(&a, &[], &[]), fence)
        .await
        .expect("generation 1");
    store
        .append_calls(
            &first,
            &[write(&b, &[], &[]), write(&asked, &[], &[])],
            fence,
        )
        .await
        .expect("generation 1");
    let replayed = CallRecord {
        origin: CallOrigin::JournalReplay,
        ..call(2, 0, 1)
    };
    store
        .append_call(&first, write(&replayed, &[(1, 0)], &[]), fence)
        .await
        .expect("generation 2");
    store
        .append_call(
            &other.run_id,
            write(&call(1, 0, 1), &[], &[]),
            Fence("token-b"),
        )
        .await
        .expect("other run");
    (folder, store, first, other.run_id)
}

/// What every call read of the run answers.
async fn reads(store: &SqliteStore, run_id: &RunId) -> Vec<Vec<CallRecord>> {
    vec![
        store.calls(run_id).await.expect("calls"),
        store.replay_pool(run_id).await.expect("replay pool"),
        store.latest_calls(run_id).await.expect("latest"),
        store.checkpoint_calls(run_id).await.expect("checkpoints"),
        store.call_tail(run_id, 2).await.expect("tail").calls,
    ]
}

#[tokio::test]
async fn a_generation_or_index_beyond_the_key_is_refused_naming_it() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    for (generation, index, named) in [
        (MAX_GENERATION + 1, 0, "generation 4096"),
        (1, MAX_CALL_INDEX + 1, "call index 1048576"),
    ] {
        let refused = store
            .append_call(id, write(&call(generation, index, 1), &[], &[]), fence)
            .await;
        match refused {
            Err(StoreError::Io(message)) => assert!(message.contains(named), "{message}"),
            other => panic!("expected a refusal naming {named}, got {other:?}"),
        }
    }
    assert!(store.calls(id).await.expect("calls").is_empty());
    let (last, highest) = (
        call(MAX_GENERATION, MAX_CALL_INDEX, 1),
        call(MAX_GENERATION, 0, 2),
    );
    store
        .append_calls(
            id,
            &[write(&last, &[], &[]), write(&highest, &[], &[])],
            fence,
        )
        .await
        .expect("the highest generation and index are kept");
    assert_eq!(
        store.calls(id).await.expect("calls"),
        vec![last.clone(), highest.clone()]
    );
    assert_eq!(
        store.latest_calls(id).await.expect("latest"),
        vec![highest, last]
    );
}

#[tokio::test]
async fn reads_and_deletes_stay_inside_the_run_s_range() {
    let (_folder, store, first, other) = two_runs().await;
    let calls = store.calls(&first).await.expect("calls");
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].superseded_by, Some(2));
    assert_eq!(store.latest_calls(&first).await.expect("latest").len(), 1);
    assert_eq!(
        store
            .checkpoint_calls(&first)
            .await
            .expect("checkpoints")
            .len(),
        1
    );
    let tail = store.call_tail(&first, 20).await.expect("tail");
    assert_eq!((tail.generation, tail.total), (Some(2), 1));
    let kept = reads(&store, &other).await;
    assert_eq!(kept[0].len(), 1);

    store.delete_run(&first).await.expect("delete");
    let count: i64 = store
        .connection()
        .query_row("SELECT COUNT(*) FROM calls", [], |row| row.get(0))
        .expect("count");
    assert_eq!(count, 1, "only the other run's row is left");
    assert_eq!(reads(&store, &other).await, kept);
}

#[tokio::test]
async fn a_schema_10_store_keeps_every_call_through_the_migration() {
    let (folder, store, first, other) = two_runs().await;
    let before = (reads(&store, &first).await, reads(&store, &other).await);
    drop(store);
    let path = folder.path().join("root").join(DATABASE_FILE);
    let connection = Connection::open(&path).expect("open");
    connection
        .execute_batch(SCHEMA_10_CALLS)
        .expect("back to schema 10");
    assert_eq!(
        super::schema::describe(&connection),
        schema_10(),
        "the test's schema 10 is the one migrations 1 to 10 build"
    );
    drop(connection);

    let store = SqliteStore::open(&folder.path().join("root")).expect("migrate");
    let after = (reads(&store, &first).await, reads(&store, &other).await);
    assert_eq!(after, before);
    let described = super::schema::describe(&store.connection());
    assert_eq!(described, include_str!("schema.expected.txt"));
}

#[tokio::test]
async fn a_row_the_key_cannot_hold_refuses_the_migration_and_changes_nothing() {
    let (folder, store, first, _other) = two_runs().await;
    drop(store);
    let path = folder.path().join("root").join(DATABASE_FILE);
    let connection = Connection::open(&path).expect("open");
    connection
        .execute_batch(SCHEMA_10_CALLS)
        .expect("back to schema 10");
    connection
        .execute(
            "UPDATE calls SET generation = 4096 WHERE generation = 2",
            [],
        )
        .expect("a generation beyond the key");
    let described = super::schema::describe(&connection);
    drop(connection);

    match SqliteStore::open(&folder.path().join("root")) {
        Err(StoreError::Corrupt(message)) => {
            assert!(
                message.contains("1 call rows have a generation above 4095"),
                "{message}"
            );
            assert!(message.contains("nothing was changed"), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("a store with a row beyond the key was migrated"),
    }
    let connection = Connection::open(&path).expect("open");
    assert_eq!(super::schema::describe(&connection), described);
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version");
    assert_eq!(version, 10);
    let rows: i64 = connection
        .query_row(
            "SELECT COUNT(*) FROM calls WHERE run_key = (SELECT run_key FROM runs WHERE run_id = ?1)",
            [first.as_str()],
            |row| row.get(0),
        )
        .expect("rows");
    assert_eq!(rows, 4);
}

/// The schema a new database has after migrations 1 to 10.
fn schema_10() -> String {
    let connection = Connection::open_in_memory().expect("memory database");
    for sql in &MIGRATIONS[..10] {
        connection.execute_batch(sql).expect("migration");
    }
    super::schema::describe(&connection)
}
