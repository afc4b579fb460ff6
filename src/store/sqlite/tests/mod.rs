//! The SQLite store's own tests: what only this backend has (files, modes, WAL, pages,
//! migrations and the stores it refuses, several connections) and the behaviour every method had
//! before the contract suite existed. The backend-independent rules run from
//! `contract_tests.rs`, whose fixtures these tests share. This file holds the tests of opening, configuring
//! and migrating a database; `records.rs` the round trips and rules of each table.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::connection::{MIGRATIONS, PAGE_SIZE};
use super::*;
use crate::model::{
    CallOrigin, Limits, PauseReason, Phase, RunStatus, ScriptRevision, ScriptSource, Usage,
};
use crate::store::StoreError;
use crate::store::contract::{
    OTHER_PROJECT, PROJECT, approved_setup, auth_context, call, event, lease, log_event, run_id,
    run_record, waiting_checkpoint, write,
};

mod call_blocks;
mod call_keys;
mod events;
mod records;
mod schema;

/// Several openers of a database that does not exist yet race to create it and switch it
/// to WAL; every one of them must get a working store (SQLite answers the WAL switch
/// with SQLITE_BUSY without waiting, which once failed `agentprism run` started beside
/// `agentprism runs`).
#[test]
fn openers_racing_to_create_the_store_all_succeed() {
    const OPENERS: usize = 8;
    for _ in 0..25 {
        let dir = tempfile::tempdir().unwrap();
        let start = std::sync::Arc::new(std::sync::Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (root, start) = (dir.path().to_path_buf(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&root).map(|store| store.database_path())
                })
            })
            .collect();
        for opener in openers {
            let opened = opener.join().expect("opener thread");
            assert!(opened.is_ok(), "{opened:?}");
        }
    }
}

/// A run with every optional field set, paused at a checkpoint in its second generation.
fn full_run_record() -> RunRecord {
    RunRecord {
        status: RunStatus::Paused,
        pause_reason: Some(PauseReason::CheckpointRequired),
        error_code: Some("CHECKPOINT_REQUIRED".to_owned()),
        error_message: Some("waiting for an answer".to_owned()),
        script_source: ScriptSource::Path,
        script_file: PathBuf::from("/home/dev/shop/flows/review.js"),
        script_revisions: vec![ScriptRevision {
            generation: 2,
            accepted_at: 1_700_000_050_000,
            sha256: "ab".repeat(32),
        }],
        limits: Limits {
            max_agents: 50,
            concurrency: 4,
            agent_retries: 2,
            agent_timeout_ms: None,
            token_budget: None,
            cost_budget_usd: None,
            auto_resume: Some(false),
        },
        phases: vec![
            Phase {
                title: "Read".to_owned(),
                detail: Some("read the code".to_owned()),
                model: Some("fast".to_owned()),
            },
            Phase {
                title: "Write".to_owned(),
                detail: None,
                model: None,
            },
        ],
        current_phase: Some("Write".to_owned()),
        result: Some(json!({ "summary": "ok", "count": 3, "ratio": 0.5 })),
        updated_at: 1_700_000_060_000,
        token_usage: Usage {
            input_tokens: 1200,
            output_tokens: 340,
            total_tokens: 1540,
            cost_usd: Some(0.25),
        },
        generation: 2,
        setup: Some(approved_setup()),
        auth_context: Some(auth_context()),
        checkpoint_context: Some(waiting_checkpoint()),
        reset_hint: Some("resets at 5pm".to_owned()),
        reset_at: Some(1_700_003_600_000),
        auto_resume: crate::model::AutoResume {
            due_at: Some(1_700_003_602_500),
            count: 2,
        },
        ..run_record("lq3k2m1-abc123", PROJECT, 1_700_000_000_000)
    }
}

/// A store in a fresh folder holding one running run under lease `token-a`.
async fn store_with_run() -> (tempfile::TempDir, SqliteStore, RunRecord) {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(&folder.path().join("root")).expect("open store");
    let record = run_record("lq3k2m1-abc123", PROJECT, 1_700_000_000_000);
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create run");
    (folder, store, record)
}

fn assert_fenced<T: std::fmt::Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::Fenced(id)) => assert_eq!(id.as_str(), "lq3k2m1-abc123"),
        other => panic!("expected Fenced, got {other:?}"),
    }
}

fn assert_unknown<T: std::fmt::Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::UnknownRun(_)) => {}
        other => panic!("expected UnknownRun, got {other:?}"),
    }
}

#[tokio::test]
async fn open_creates_private_root_and_database() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let root = folder.path().join("nested").join("root");
    let store = SqliteStore::open(&root).expect("open store");
    assert_eq!(store.root(), root);
    let root_mode = std::fs::metadata(&root).expect("root").permissions().mode();
    assert_eq!(root_mode & 0o777, 0o700);
    let database_mode = std::fs::metadata(store.database_path())
        .expect("database")
        .permissions()
        .mode();
    assert_eq!(database_mode & 0o777, 0o600);
    let connection = store.connection();
    let journal_mode: String = connection
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .expect("journal mode");
    assert_eq!(journal_mode, "wal");
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user version");
    assert_eq!(version, MIGRATIONS.len() as i64);
}

#[tokio::test]
async fn new_databases_use_small_pages() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let page_size: i64 = store
        .connection()
        .pragma_query_value(None, "page_size", |row| row.get(0))
        .expect("page size");
    assert_eq!(page_size, PAGE_SIZE);
}

/// The connection's `PRAGMA synchronous` (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA).
fn synchronous_of(store: &SqliteStore) -> i64 {
    store
        .connection()
        .pragma_query_value(None, "synchronous", |row| row.get(0))
        .expect("synchronous")
}

#[tokio::test]
async fn commits_are_synced_to_the_disk_unless_normal_is_chosen() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    assert_eq!(synchronous_of(&store), 2, "the default is FULL");
    drop(store);
    let store = SqliteStore::open_with_sync(folder.path(), StoreSync::Normal).expect("reopen");
    assert_eq!(synchronous_of(&store), 1, "the opt-in mode is NORMAL");
    drop(store);
    // The setting belongs to the connection: a later opener's choice is its own.
    let store = SqliteStore::open_with_sync(folder.path(), StoreSync::Full).expect("reopen");
    assert_eq!(synchronous_of(&store), 2);
}

#[tokio::test]
async fn a_commit_survives_a_process_that_never_closes_the_store() {
    // What kill -9 leaves: the WAL written, no checkpoint, no close. Leaking the
    // connection keeps its file descriptors open, as a killed process's are until exit.
    let folder = tempfile::tempdir().expect("temporary folder");
    let record = run_record("lq3k2m1-abc123", PROJECT, 1);
    let store = SqliteStore::open(folder.path()).expect("open store");
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create");
    std::mem::forget(store);
    let store = SqliteStore::open(folder.path()).expect("reopen store");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
}

#[tokio::test]
async fn closing_keeps_the_wal_and_the_next_opener_reads_it() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let record = run_record("lq3k2m1-abc123", PROJECT, 1);
    {
        let store = SqliteStore::open(folder.path()).expect("open store");
        store
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create");
    }
    let wal = folder.path().join(format!("{DATABASE_FILE}-wal"));
    assert!(wal.exists(), "the WAL is kept across connections");
    let store = SqliteStore::open(folder.path()).expect("reopen store");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
}

#[tokio::test]
async fn reopening_keeps_data_and_skips_applied_migrations() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let record = run_record("lq3k2m1-abc123", PROJECT, 1);
    {
        let store = SqliteStore::open(folder.path()).expect("open store");
        store
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create");
    }
    let store = SqliteStore::open(folder.path()).expect("reopen store");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
}

#[tokio::test]
async fn newer_schema_is_refused_naming_both_versions() {
    let folder = tempfile::tempdir().expect("temporary folder");
    drop(SqliteStore::open(folder.path()).expect("open store"));
    let newer = MIGRATIONS.len() + 1;
    let connection = Connection::open(folder.path().join(DATABASE_FILE)).expect("open");
    connection
        .pragma_update(None, "user_version", newer as i64)
        .expect("bump version");
    drop(connection);
    match SqliteStore::open(folder.path()) {
        Err(StoreError::Corrupt(message)) => {
            assert!(
                message.contains(&format!("schema version {newer}")),
                "{message}"
            );
            assert!(
                message.contains(&format!("up to {}", MIGRATIONS.len())),
                "{message}"
            );
        }
        Err(other) => panic!("expected Corrupt, got {other:?}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

/// A cached statement bound with other values keeps its plan: status and the journal reads
/// are never prepared again (the query planner stability guarantee is on).
/// A store of a pre-release build (its own series of 13 migrations, no application id) is
/// refused with a message naming the file and what to do, and left exactly as it was.
#[test]
fn a_pre_release_store_is_refused_and_left_unchanged() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let path = folder.path().join(DATABASE_FILE);
    let connection = Connection::open(&path).expect("open");
    connection
        .execute_batch(
            "CREATE TABLE runs (run_key INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE);
             INSERT INTO runs (run_id) VALUES ('lq3k2m1-abc123');
             PRAGMA user_version = 13;",
        )
        .expect("a pre-release store");
    let before = schema::describe(&connection);
    drop(connection);
    match SqliteStore::open(folder.path()) {
        Err(StoreError::Io(message)) => {
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("pre-release agentprism"), "{message}");
            assert!(message.contains("schema version 13"), "{message}");
            assert!(
                message.contains("Move that persistence root aside"),
                "{message}"
            );
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("a pre-release store was opened"),
    }
    let connection = Connection::open(&path).expect("open");
    assert_eq!(schema::describe(&connection), before);
    let header: (i64, i64, String) = connection
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                 (SELECT application_id FROM pragma_application_id),
                 (SELECT run_id FROM runs)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .expect("read the store");
    assert_eq!(header, (13, 0, "lq3k2m1-abc123".to_owned()));
}

/// A SQLite file of another program (another application id) is not taken for a store.
#[test]
fn another_programs_database_is_refused() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let path = folder.path().join(DATABASE_FILE);
    let connection = Connection::open(&path).expect("open");
    connection
        .execute_batch("PRAGMA application_id = 42; PRAGMA user_version = 1;")
        .expect("another database");
    drop(connection);
    match SqliteStore::open(folder.path()) {
        Err(StoreError::Io(message)) => {
            assert!(
                message.contains("is not an agentprism run store"),
                "{message}"
            );
            assert!(message.contains("application id is 42"), "{message}");
        }
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("another program's database was opened"),
    }
}

#[tokio::test]
async fn cached_statements_are_not_prepared_again_when_bound_anew() {
    let (_folder, store, record) = store_with_run().await;
    for limit in [1, 20, 50, 3] {
        store.call_tail(&record.run_id, limit).await.expect("tail");
        store.load_run(&record.run_id).await.expect("run");
    }
    let connection = store.connection();
    for sql in [super::runs::LOAD, super::calls::TAIL_ROWS] {
        let statement = connection.prepare_cached(sql).expect("cached");
        let reprepared = statement.get_status(rusqlite::StatementStatus::RePrepare);
        assert_eq!(reprepared, 0, "{sql}");
    }
}

/// The queries status and admission make on every call never walk a table or sort: each is
/// answered from an index, so their cost does not grow with the run or the store.
#[tokio::test]
async fn status_admission_and_intent_queries_are_indexed() {
    let (_folder, store, _record) = store_with_run().await;
    let connection = store.connection();
    for sql in [
        super::call_keys::LATEST_GENERATION,
        super::calls::TAIL_COUNT,
        super::calls::TAIL_COUNTED,
        super::calls::TAIL_ROWS,
        super::status_reads::TAIL_SUMMARIES,
        super::call_blocks::LAST_KEY,
        super::call_blocks::COUNT,
        super::call_blocks::NEWEST,
        super::calls::CHECKPOINT_ROWS,
        super::runs::ACTIVE,
        super::control::PENDING_ACROSS_RUNS,
    ] {
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("explain");
        let unbound = std::iter::repeat_n(rusqlite::types::Null, statement.parameter_count());
        let plan: Vec<String> = statement
            .query_map(rusqlite::params_from_iter(unbound), |row| {
                row.get::<_, String>(3)
            })
            .expect("plan")
            .map(|step| step.expect("plan step"))
            .collect();
        assert!(!plan.is_empty(), "{sql}");
        for step in &plan {
            let walks_a_table = step.starts_with("SCAN") && !step.contains("INDEX");
            assert!(
                !walks_a_table && !step.contains("TEMP B-TREE"),
                "{sql}\n{plan:#?}"
            );
        }
    }
}

/// A pack run's record reaches the database only with digests in place of its texts.
#[tokio::test]
async fn a_pack_run_is_stored_only_with_digests() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(&folder.path().join("root")).expect("open store");
    let mut record = run_record("lq3k2m1-pack01", PROJECT, 1_700_000_000_000);
    record.script_source = ScriptSource::Pack;
    record
        .files
        .insert("prompts/a.md".into(), "secret text".into());
    let refused = store.create_run(&record, &lease("token-a")).await;
    assert!(
        matches!(refused, Err(StoreError::Confidential(_))),
        "{refused:?}"
    );
    assert_unknown(store.load_run(&record.run_id).await);
    record.script = crate::model::content_digest(record.script.as_bytes());
    record.files.insert(
        "prompts/a.md".into(),
        crate::model::content_digest(b"secret text"),
    );
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("digests are stored");
    let loaded = store.load_run(&record.run_id).await.expect("load");
    assert_eq!(loaded.script_source, ScriptSource::Pack);
    assert_eq!(loaded.script, record.script);
    assert_eq!(loaded.files, record.files);
    assert!(crate::model::is_content_digest(&loaded.script));
    assert!(!crate::model::is_content_digest("sha256:not-hex"));
    let mut with_text = loaded.clone();
    with_text.script = "export const meta = {};".into();
    let refused = store
        .update_run(&with_text, ScriptChange::Changed, Fence("token-a"))
        .await;
    assert!(
        matches!(refused, Err(StoreError::Confidential(_))),
        "{refused:?}"
    );
}

/// The schema's triggers keep what status caches rely on: a running run's calls,
/// supersessions, call counts, event blocks and event rows leave its version where it was;
/// once it is not running, each such write moves it to a value it never had.
#[tokio::test]
async fn call_and_event_writes_move_the_version_only_when_the_run_is_not_running() {
    let (_folder, store, mut record) = store_with_run().await;
    let triggers: Vec<String> = store
        .connection()
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    assert_eq!(
        triggers,
        [
            "call_blocks_version_insert",
            "call_supersessions_version_insert",
            "call_supersessions_version_update",
            "call_tallies_version_delete",
            "call_tallies_version_insert",
            "call_tallies_version_update",
            "calls_version_insert",
            "checkpoint_answers_version_insert",
            "event_blocks_version_insert",
            "events_version_insert",
            "run_scripts_version_update",
            "runs_version_insert",
            "runs_version_update",
        ]
    );
    let id = record.run_id.clone();
    let fence = Fence("token-a");
    let version = |store: &SqliteStore| {
        let connection = store.connection();
        super::versions::run_version(&connection, &id).expect("version")
    };
    let running = version(&store);
    let (first, second) = (call(1, 0, 1), call(1, 1, 2));
    let events = [
        event(1, "agentStart"),
        event(2, "agentEnd"),
        log_event(3, "x"),
    ];
    store
        .append_calls(&id, &[write(&first, &[], &events)], fence)
        .await
        .expect("call while running");
    store
        .append_calls(&id, &[write(&second, &[(1, 0)], &[])], fence)
        .await
        .expect("superseding call while running");
    store
        .append_events(&id, &[event(4, "phase"), event(5, "phase")], fence)
        .await
        .expect("a block while running");
    store
        .record_call_total(&id, 1, 2, fence)
        .await
        .expect("total while running");
    assert_eq!(version(&store), running, "writes of a running run");

    record.status = RunStatus::Completed;
    store
        .update_run(&record, ScriptChange::Unchanged, fence)
        .await
        .expect("complete");
    let completed = version(&store);
    assert!(completed.version > running.version);
    let scalar = |store: &SqliteStore, sql: &str| -> i64 {
        store
            .connection()
            .query_row(sql, [], |row| row.get(0))
            .expect(sql)
    };
    let clock = |store: &SqliteStore| scalar(store, "SELECT value FROM run_version_clock");
    let blocks = |store: &SqliteStore| scalar(store, "SELECT count(*) FROM event_blocks");
    let before = clock(&store);
    let (third, fourth) = (call(1, 2, 3), call(1, 3, 4));
    let blocks_before = blocks(&store);
    let more = [event(6, "agentStart"), event(7, "agentEnd")];
    let most = [event(8, "agentStart"), event(9, "agentEnd")];
    store
        .append_calls(
            &id,
            &[write(&third, &[], &more), write(&fourth, &[(1, 1)], &most)],
            fence,
        )
        .await
        .expect("two calls of a completed run");
    let after_calls = version(&store);
    assert!(clock(&store) > before, "the clock moved");
    assert_eq!(
        after_calls.version,
        clock(&store) as u64,
        "the run took the clock's latest value"
    );
    assert_eq!(
        blocks(&store),
        blocks_before + 1,
        "one block for the commit"
    );
    store
        .append_calls(&id, &[write(&call(1, 5, 5), &[], &[])], fence)
        .await
        .expect("a lone call of a completed run");
    let after_row = version(&store);
    assert!(after_row.version > after_calls.version, "a call row");
    let read = store.events(&id, 5, 100).await.expect("events");
    assert_eq!(read, [more, most].concat());
    store
        .append_events(&id, &[event(10, "phase"), event(11, "phase")], fence)
        .await
        .expect("a block of a completed run");
    let after_block = version(&store);
    assert!(after_block.version > after_calls.version, "event block");
    assert_eq!(after_block.status, RunStatus::Completed);
}
