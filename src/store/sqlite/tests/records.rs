//! The SQLite store's record tests, from before the contract suite: each table's round trip
//! and rules, and the row counts a delete leaves.

use super::*;

#[tokio::test]
async fn full_record_round_trips() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let record = full_run_record();
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    assert_eq!(
        store.lease(&record.run_id).await.expect("lease"),
        Some(lease("token-a"))
    );
    // `Some(null)` is a result (the script returned null), distinct from no result.
    let null_result = RunRecord {
        result: Some(Value::Null),
        ..run_record("lq3k2m1-nul111", PROJECT, 5)
    };
    store
        .create_run(&null_result, &lease("token-b"))
        .await
        .expect("create");
    assert_eq!(
        store.load_run(&null_result.run_id).await.expect("load"),
        null_result
    );
}

#[tokio::test]
async fn update_run_unchanged_keeps_the_script() {
    let (_folder, store, record) = store_with_run().await;
    let updated = RunRecord {
        status: RunStatus::Completed,
        result: Some(json!("done")),
        updated_at: record.updated_at + 10,
        script: "a different script".to_owned(),
        meta: json!({ "name": "changed" }),
        script_revisions: vec![ScriptRevision {
            generation: 2,
            accepted_at: 9,
            sha256: "ff".repeat(32),
        }],
        ..record.clone()
    };
    store
        .update_run(&updated, ScriptChange::Unchanged, Fence("token-a"))
        .await
        .expect("update");
    let loaded = store.load_run(&record.run_id).await.expect("load");
    assert_eq!(
        loaded,
        RunRecord {
            script: record.script.clone(),
            meta: record.meta.clone(),
            script_revisions: record.script_revisions.clone(),
            ..updated.clone()
        }
    );

    store
        .update_run(&updated, ScriptChange::Changed, Fence("token-a"))
        .await
        .expect("update with script");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), updated);
}

#[tokio::test]
async fn fenced_writes_are_refused_after_another_lease_and_write_nothing() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let installed = store
        .acquire_lease(id, Some("token-a"), &lease("token-b"))
        .await
        .expect("take over");
    assert!(installed);

    let stale = Fence("token-a");
    let changed = RunRecord {
        status: RunStatus::Failed,
        script: "changed".to_owned(),
        ..record.clone()
    };
    assert_fenced(
        store
            .update_run(&changed, ScriptChange::Changed, stale)
            .await,
    );
    let first = call(1, 0, 1);
    let events = [log_event(1, "lost")];
    assert_fenced(
        store
            .append_call(id, write(&first, &[], &events), stale)
            .await,
    );
    assert_fenced(
        store
            .append_calls(id, &[write(&first, &[], &events)], stale)
            .await,
    );
    assert_fenced(store.append_events(id, &events, stale).await);

    assert_eq!(store.load_run(id).await.expect("load"), record);
    assert!(store.calls(id).await.expect("calls").is_empty());
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 0);

    // The new holder writes fine; no lease at all fences everyone.
    store
        .append_call(id, write(&first, &[], &events), Fence("token-b"))
        .await
        .expect("current holder writes");
    store.release_lease(id, "token-b").await.expect("release");
    assert_fenced(
        store
            .append_events(id, &[log_event(2, "x")], Fence("token-b"))
            .await,
    );
}

#[tokio::test]
async fn append_call_supersedes_rows_and_appends_events() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let (first, second) = (call(1, 0, 1), call(1, 1, 2));
    store
        .append_calls(
            id,
            &[
                write(&first, &[], &[event(1, "agentEnd")]),
                write(&second, &[], &[event(2, "agentEnd")]),
            ],
            fence,
        )
        .await
        .expect("generation 1");
    let replayed = CallRecord {
        origin: CallOrigin::JournalReplay,
        ..call(2, 0, 1)
    };
    store
        .append_call(
            id,
            write(&replayed, &[(1, 0)], &[event(3, "agentEnd")]),
            fence,
        )
        .await
        .expect("generation 2");

    let calls = store.calls(id).await.expect("calls");
    assert_eq!(
        calls,
        vec![
            CallRecord {
                superseded_by: Some(2),
                ..first.clone()
            },
            second.clone(),
            replayed.clone(),
        ]
    );
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);

    // Superseding a row that does not exist rolls the whole write back.
    let orphan = call(2, 1, 2);
    let result = store
        .append_call(
            id,
            write(&orphan, &[(1, 7)], &[event(4, "agentEnd")]),
            fence,
        )
        .await;
    assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
    assert_eq!(store.calls(id).await.expect("calls").len(), 3);
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);
}

#[tokio::test]
async fn calls_are_ordered_by_generation_then_settlement() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    // Index 1 settles before index 0 (completion order differs from call order).
    let (early, late) = (call(1, 1, 1), call(1, 0, 2));
    store
        .append_calls(
            id,
            &[write(&early, &[], &[]), write(&late, &[], &[])],
            Fence("token-a"),
        )
        .await
        .expect("append");
    let order: Vec<u32> = store
        .calls(id)
        .await
        .expect("calls")
        .iter()
        .map(|call| call.index)
        .collect();
    assert_eq!(order, vec![1, 0]);
    let pool: Vec<u32> = store
        .replay_pool(id)
        .await
        .expect("pool")
        .iter()
        .map(|call| call.index)
        .collect();
    assert_eq!(pool, vec![0, 1]);
}

#[tokio::test]
async fn replay_pool_excludes_superseded_rows() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let rows = [call(1, 0, 1), call(1, 1, 2), call(1, 2, 3)];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("generation 1");
    let rerun = call(2, 0, 1);
    store
        .append_call(id, write(&rerun, &[(1, 0), (1, 2)], &[]), fence)
        .await
        .expect("generation 2");
    let pool: Vec<(u32, u32)> = store
        .replay_pool(id)
        .await
        .expect("pool")
        .iter()
        .map(|call| (call.generation, call.index))
        .collect();
    assert_eq!(pool, vec![(1, 1), (2, 0)]);
}

#[tokio::test]
async fn latest_calls_returns_only_the_highest_generation() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert!(store.latest_calls(id).await.expect("latest").is_empty());
    let rows = [call(1, 0, 1), call(1, 1, 2), call(2, 1, 1), call(2, 0, 2)];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("append");
    let latest = store.latest_calls(id).await.expect("latest");
    assert_eq!(latest, vec![rows[3].clone(), rows[2].clone()]);
}

#[tokio::test]
async fn events_must_continue_the_stream_densely() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    store
        .append_events(id, &[event(1, "phase")], fence)
        .await
        .expect("first");
    for bad in [
        [event(3, "phase"), event(4, "phase")],
        [event(2, "phase"), event(2, "phase")],
    ] {
        let result = store.append_events(id, &bad, fence).await;
        assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
    }
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 1);
}

#[tokio::test]
async fn log_tail_returns_the_last_lines_and_the_count() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let mut events = Vec::new();
    for seq in 1..=9 {
        events.push(if seq % 3 == 0 {
            event(seq, "agentEnd")
        } else {
            log_event(seq, &format!("line {seq}"))
        });
    }
    store
        .append_events(id, &events, Fence("token-a"))
        .await
        .expect("append");
    let (lines, total) = store.log_tail(id, 3).await.expect("tail");
    assert_eq!(lines, vec!["line 5", "line 7", "line 8"]);
    assert_eq!(total, 6);
    let (lines, total) = store.log_tail(id, 100).await.expect("whole log");
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], "line 1");
    assert_eq!(total, 6);
}

#[tokio::test]
async fn checkpoint_answers_and_receipts_are_first_writer_wins_per_generation() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let first = CheckpointAnswer {
        call_index: 2,
        hash: "cafe".to_owned(),
        answer: json!(true),
        answered_at: 10,
    };
    let conflicting = CheckpointAnswer {
        answer: json!(false),
        answered_at: 11,
        ..first.clone()
    };
    let other = CheckpointAnswer {
        call_index: 1,
        ..conflicting.clone()
    };
    assert_eq!(
        store
            .put_checkpoint_answer(id, &first, Fence("token-a"))
            .await
            .expect("put"),
        first
    );
    assert_eq!(
        store
            .put_checkpoint_answer(id, &conflicting, Fence("token-a"))
            .await
            .expect("put again"),
        first
    );
    assert_eq!(
        store
            .put_checkpoint_answer(id, &other, Fence("token-a"))
            .await
            .expect("put other"),
        other
    );
    assert_eq!(
        store.checkpoint_answers(id).await.expect("answers"),
        vec![other.clone(), first.clone()]
    );

    let receipt = OperationReceipt {
        operation_id: "op-1".to_owned(),
        generation: 2,
        input_digest: "digest".to_owned(),
        response: json!({ "status": "running" }),
        created_at: 20,
    };
    let retry = OperationReceipt {
        response: json!({ "status": "other" }),
        ..receipt.clone()
    };
    assert_eq!(store.receipt(id, "op-1").await.expect("none yet"), None);
    assert_eq!(
        store
            .put_receipt(id, &receipt, Fence("token-a"))
            .await
            .expect("put"),
        receipt
    );
    // The same generation: the first writer wins.
    assert_eq!(
        store
            .put_receipt(id, &retry, Fence("token-a"))
            .await
            .expect("put again"),
        receipt
    );
    assert_eq!(
        store.receipt(id, "op-1").await.expect("read"),
        Some(receipt.clone())
    );
    // The same operation resumed the run again (its receipt had gone stale): the newer
    // generation's receipt replaces it, and an older one never comes back.
    let newer = OperationReceipt {
        generation: 3,
        response: json!({ "status": "running", "generation": 3 }),
        created_at: 30,
        ..receipt.clone()
    };
    assert_eq!(
        store
            .put_receipt(id, &newer, Fence("token-a"))
            .await
            .expect("newer"),
        newer
    );
    assert_eq!(
        store
            .put_receipt(id, &receipt, Fence("token-a"))
            .await
            .expect("older"),
        newer
    );
}

#[tokio::test]
async fn acquire_lease_is_a_compare_and_swap() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    assert!(
        !store
            .acquire_lease(id, None, &lease("token-b"))
            .await
            .expect("cas")
    );
    assert!(
        !store
            .acquire_lease(id, Some("token-x"), &lease("token-b"))
            .await
            .expect("cas")
    );
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-a"))
    );

    assert!(
        store
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("cas")
    );
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-b"))
    );

    store
        .release_lease(id, "token-a")
        .await
        .expect("stale release");
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-b"))
    );
    store.release_lease(id, "token-b").await.expect("release");
    assert_eq!(store.lease(id).await.expect("lease"), None);

    assert!(
        !store
            .acquire_lease(id, Some("token-b"), &lease("token-c"))
            .await
            .expect("cas")
    );
    assert!(
        store
            .acquire_lease(id, None, &lease("token-c"))
            .await
            .expect("cas")
    );
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-c"))
    );
}

#[tokio::test]
async fn list_runs_newest_first_and_per_project() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let runs = [
        run_record("a-aaaaaa", PROJECT, 300),
        run_record("b-bbbbbb", OTHER_PROJECT, 200),
        RunRecord {
            status: RunStatus::Completed,
            result: Some(json!(1)),
            ..run_record("c-cccccc", PROJECT, 100)
        },
        run_record("d-dddddd", PROJECT, 400),
    ];
    for run in &runs {
        store
            .create_run(run, &lease("token"))
            .await
            .expect("create");
    }
    let ids = |summaries: Vec<RunSummary>| -> Vec<String> {
        summaries
            .into_iter()
            .map(|summary| summary.run_id.as_str().to_owned())
            .collect()
    };
    assert_eq!(
        ids(store.list_runs(None, 10).await.expect("all")),
        vec!["d-dddddd", "a-aaaaaa", "b-bbbbbb", "c-cccccc"]
    );
    assert_eq!(
        ids(store.list_runs(None, 2).await.expect("limited")),
        vec!["d-dddddd", "a-aaaaaa"]
    );
    let project = store
        .list_runs(Some(Path::new(PROJECT)), 10)
        .await
        .expect("project");
    assert_eq!(
        project.last(),
        Some(&RunSummary {
            run_id: run_id("c-cccccc"),
            project_dir: PathBuf::from(PROJECT),
            workflow_name: "review".to_owned(),
            status: RunStatus::Completed,
            pause_reason: None,
            started_at: 100,
            updated_at: 100,
            has_result: true,
            summary: None,
        })
    );
    assert_eq!(ids(project), vec!["d-dddddd", "a-aaaaaa", "c-cccccc"]);
    assert!(
        store
            .list_runs(Some(Path::new("/nowhere")), 10)
            .await
            .expect("empty")
            .is_empty()
    );
}

#[tokio::test]
async fn active_runs_are_pending_or_running_runs_of_the_project() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let runs = [
        run_record("a-aaaaaa", PROJECT, 1),
        RunRecord {
            status: RunStatus::Pending,
            ..run_record("b-bbbbbb", PROJECT, 2)
        },
        RunRecord {
            status: RunStatus::Paused,
            ..run_record("c-cccccc", PROJECT, 3)
        },
        run_record("d-dddddd", OTHER_PROJECT, 4),
    ];
    for run in &runs {
        store
            .create_run(run, &lease("token"))
            .await
            .expect("create");
    }
    assert_eq!(
        store.active_runs(Path::new(PROJECT)).await.expect("active"),
        vec![run_id("a-aaaaaa"), run_id("b-bbbbbb")]
    );
    let finished = RunRecord {
        status: RunStatus::Completed,
        ..runs[0].clone()
    };
    store
        .update_run(&finished, ScriptChange::Unchanged, Fence("token"))
        .await
        .expect("finish");
    assert_eq!(
        store.active_runs(Path::new(PROJECT)).await.expect("active"),
        vec![run_id("b-bbbbbb")]
    );
}

#[tokio::test]
async fn delete_run_removes_everything() {
    let (_folder, store, record) = store_with_run().await;
    let id = &record.run_id;
    let keep = run_record("k-kkkkkk", PROJECT, 5);
    store
        .create_run(&keep, &lease("token-k"))
        .await
        .expect("create");
    let row = call(1, 0, 1);
    store
        .append_call(
            id,
            write(&row, &[], &[log_event(1, "hello")]),
            Fence("token-a"),
        )
        .await
        .expect("append");
    store
        .append_call(
            &keep.run_id,
            write(&row, &[], &[log_event(1, "kept")]),
            Fence("token-k"),
        )
        .await
        .expect("append");
    let answer = CheckpointAnswer {
        call_index: 0,
        hash: "h".to_owned(),
        answer: json!("yes"),
        answered_at: 1,
    };
    store
        .put_checkpoint_answer(id, &answer, Fence("token-a"))
        .await
        .expect("answer");
    let receipt = OperationReceipt {
        operation_id: "op".to_owned(),
        generation: 1,
        input_digest: "d".to_owned(),
        response: json!({}),
        created_at: 1,
    };
    store
        .put_receipt(id, &receipt, Fence("token-a"))
        .await
        .expect("receipt");

    store.delete_run(id).await.expect("delete");
    assert_unknown(store.load_run(id).await);
    assert_unknown(store.calls(id).await);
    assert_unknown(store.delete_run(id).await);
    {
        let connection = store.connection();
        for table in [
            "runs",
            "run_scripts",
            "calls",
            "events",
            "checkpoint_answers",
            "receipts",
        ] {
            let rows: i64 = connection
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                    row.get(0)
                })
                .expect("count");
            let expected = if matches!(table, "checkpoint_answers" | "receipts") {
                0
            } else {
                1
            };
            assert_eq!(rows, expected, "rows left in {table}");
        }
    }
    assert_eq!(store.load_run(&keep.run_id).await.expect("kept"), keep);
    assert_eq!(store.log_tail(&keep.run_id, 5).await.expect("log").1, 1);
}

#[tokio::test]
async fn unknown_runs_are_reported_as_such() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let id = run_id("z-zzzzzz");
    let fence = Fence("token");
    assert_unknown(store.load_run(&id).await);
    let record = run_record("z-zzzzzz", PROJECT, 1);
    assert_unknown(
        store
            .update_run(&record, ScriptChange::Unchanged, fence)
            .await,
    );
    assert_unknown(store.append_events(&id, &[event(1, "log")], fence).await);
    assert_unknown(store.events(&id, 0, 1).await);
    assert_unknown(store.last_event_seq(&id).await);
    assert_unknown(store.log_tail(&id, 1).await);
    assert_unknown(store.replay_pool(&id).await);
    assert_unknown(store.latest_calls(&id).await);
    assert_unknown(store.lease(&id).await);
    assert_unknown(store.acquire_lease(&id, None, &lease("t")).await);
    assert_unknown(store.release_lease(&id, "t").await);
    assert_unknown(store.receipt(&id, "op").await);
    assert_unknown(store.checkpoint_answers(&id).await);
}

#[tokio::test]
async fn corrupt_json_names_the_run_and_column() {
    let (_folder, store, record) = store_with_run().await;
    store
        .connection()
        .execute("UPDATE runs SET args = '{not json'", [])
        .expect("damage the row");
    match store.load_run(&record.run_id).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("lq3k2m1-abc123"), "{message}");
            assert!(message.contains("runs.args"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn a_second_open_sees_the_first_ones_writes() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let first = SqliteStore::open(folder.path()).expect("open first");
    let second = SqliteStore::open(folder.path()).expect("open second");
    let record = run_record("lq3k2m1-abc123", PROJECT, 1);
    first
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create");
    assert_eq!(second.load_run(&record.run_id).await.expect("load"), record);

    // A lease taken through one connection fences writes through the other.
    assert!(
        second
            .acquire_lease(&record.run_id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    assert_fenced(
        first
            .append_events(&record.run_id, &[event(1, "log")], Fence("token-a"))
            .await,
    );
    second
        .append_events(
            &record.run_id,
            &[log_event(1, "from second")],
            Fence("token-b"),
        )
        .await
        .expect("append");
    assert_eq!(
        first.log_tail(&record.run_id, 5).await.expect("log"),
        (vec!["from second".to_owned()], 1)
    );
}

#[tokio::test]
async fn runs_are_found_by_their_script_file() {
    let folder = tempfile::tempdir().expect("temporary folder");
    let store = SqliteStore::open(folder.path()).expect("open store");
    let shared = PathBuf::from("/work/flows/shared.js");
    let first = RunRecord {
        script_file: shared.clone(),
        ..run_record("a-aaaaaa", PROJECT, 1)
    };
    let second = RunRecord {
        script_file: shared.clone(),
        ..run_record("b-bbbbbb", PROJECT, 2)
    };
    let other = run_record("c-cccccc", PROJECT, 3);
    for run in [&first, &second, &other] {
        store
            .create_run(run, &lease("token"))
            .await
            .expect("create");
    }
    assert_eq!(
        store.runs_with_script(&shared).await.expect("lookup"),
        vec![run_id("b-bbbbbb"), run_id("a-aaaaaa")]
    );
    assert!(
        store
            .runs_with_script(Path::new("/nowhere.js"))
            .await
            .expect("lookup")
            .is_empty()
    );
}
