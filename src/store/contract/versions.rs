//! Contract rule for the run version (`Store::run_version`): what an answer cache of a run
//! that is not running relies on. A backend that keeps no version answers `None` for every
//! run, before and after any write.

use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::model::CheckpointAnswer;
use crate::store::{Fence, RunVersion, ScriptChange};

/// Every kind of write to a run that is not running gives it a version it never had, no
/// other run ever has one it had, a run deleted and created again starts on a new one, and
/// an unknown run is `UnknownRun`.
pub async fn run_version_changes_with_every_write_while_not_running<B: Backend>(backend: &B) {
    let WithRun {
        store, mut record, ..
    } = with_run(backend).await;
    let id = record.run_id.clone();
    let fence = Fence("token-a");
    let Some(first) = store.run_version(&id).await.expect("version") else {
        record.status = RunStatus::Completed;
        store
            .update_run(&record, ScriptChange::Unchanged, fence)
            .await
            .expect("update");
        assert_eq!(store.run_version(&id).await.expect("version"), None);
        return;
    };
    assert_eq!(first.status, RunStatus::Running);
    let mut seen = HashSet::from([first.version]);
    record_updates(store.as_ref(), &mut record, &mut seen).await;
    call_and_event_writes(store.as_ref(), &id, &mut seen).await;
    answer_and_release(store.as_ref(), &id, &mut seen).await;
    other_runs_and_recreation(store.as_ref(), &id, &mut seen).await;
}

/// Updates of a run that is not running: completing it, renaming it, a new script.
async fn record_updates(store: &dyn Store, record: &mut RunRecord, seen: &mut HashSet<u64>) {
    let id = record.run_id.clone();
    let fence = Fence("token-a");
    record.status = RunStatus::Completed;
    record.result = Some(json!("done"));
    store
        .update_run(record, ScriptChange::Unchanged, fence)
        .await
        .expect("complete");
    expect_new(
        store,
        &id,
        seen,
        "update_run to completed",
        RunStatus::Completed,
    )
    .await;
    record.workflow_name = "renamed".to_owned();
    store
        .update_run(record, ScriptChange::Unchanged, fence)
        .await
        .expect("update");
    expect_new(
        store,
        &id,
        seen,
        "update_run of a completed run",
        RunStatus::Completed,
    )
    .await;
    record.script = "export const meta = { name: \"review\" };\nreturn 2;\n".to_owned();
    store
        .update_run(record, ScriptChange::Changed, fence)
        .await
        .expect("new script");
    expect_new(
        store,
        &id,
        seen,
        "update_run with a new script",
        RunStatus::Completed,
    )
    .await;
}

/// Rows, supersessions, events and call totals written to a run that is not running.
async fn call_and_event_writes(store: &dyn Store, id: &RunId, seen: &mut HashSet<u64>) {
    let fence = Fence("token-a");
    store
        .append_call(id, write(&call(1, 0, 1), &[], &[]), fence)
        .await
        .expect("call");
    expect_new(store, id, seen, "append_call", RunStatus::Completed).await;
    let replayed = call(1, 1, 2);
    store
        .append_call(id, write(&replayed, &[(1, 0)], &[]), fence)
        .await
        .expect("superseding call");
    expect_new(
        store,
        id,
        seen,
        "append_call superseding a row",
        RunStatus::Completed,
    )
    .await;
    store
        .append_events(id, &[log_event(1, "a line")], fence)
        .await
        .expect("events");
    expect_new(store, id, seen, "append_events", RunStatus::Completed).await;
    store
        .record_call_total(id, 1, 2, fence)
        .await
        .expect("total");
    expect_new(store, id, seen, "record_call_total", RunStatus::Completed).await;
    store
        .record_call_total(id, 1, 3, fence)
        .await
        .expect("total again");
    expect_new(
        store,
        id,
        seen,
        "record_call_total again",
        RunStatus::Completed,
    )
    .await;
    store
        .close_generation(id, &[log_event(2, "the last line")], Some((1, 3)), fence)
        .await
        .expect("close");
    expect_new(store, id, seen, "close_generation", RunStatus::Completed).await;
}

/// A checkpoint answer and the lease's release.
async fn answer_and_release(store: &dyn Store, id: &RunId, seen: &mut HashSet<u64>) {
    let answer = CheckpointAnswer {
        call_index: 2,
        hash: "cafe".to_owned(),
        answer: json!(true),
        answered_at: 10,
    };
    store
        .put_checkpoint_answer(id, &answer, Fence("token-a"))
        .await
        .expect("answer");
    expect_new(
        store,
        id,
        seen,
        "put_checkpoint_answer",
        RunStatus::Completed,
    )
    .await;
    store.release_lease(id, "token-a").await.expect("release");
    expect_new(store, id, seen, "release_lease", RunStatus::Completed).await;
    // Held again, for the write that ends a generation: the row and the release together.
    assert!(
        store
            .acquire_lease(id, None, &lease("token-c"))
            .await
            .expect("acquire")
    );
    let held = store.run_version(id).await.expect("version").expect("kept");
    seen.insert(held.version);
    let mut record = store.load_run(id).await.expect("run");
    record.error_message = Some("noted".to_owned());
    store
        .record_outcome(&record, "token-c")
        .await
        .expect("outcome and release");
    expect_new(store, id, seen, "record_outcome", RunStatus::Completed).await;
}

/// Another run never shares a version; a run deleted and created again starts on a new one;
/// an unknown run is `UnknownRun`.
async fn other_runs_and_recreation(store: &dyn Store, id: &RunId, seen: &mut HashSet<u64>) {
    let other = run_record("lq3k2m2-def456", PROJECT, 1_700_000_000_001);
    store
        .create_run(&other, &lease("token-o"))
        .await
        .expect("another run");
    let version = store
        .run_version(&other.run_id)
        .await
        .expect("version")
        .expect("kept");
    assert!(seen.insert(version.version), "another run's version");
    store.delete_run(id).await.expect("delete");
    assert_unknown(store.run_version(id).await, "run_version of a deleted run");
    store
        .create_run(
            &run_record(RUN, PROJECT, 1_700_000_000_000),
            &lease("token-a"),
        )
        .await
        .expect("created again");
    expect_new(store, id, seen, "a run created again", RunStatus::Running).await;
    assert_unknown(
        store.run_version(&run_id("lq3k2m3-nope00")).await,
        "run_version of an unknown run",
    );
}

/// Asserts that `run_id` now has `status` and a version not in `seen`, and adds it there.
async fn expect_new(
    store: &dyn Store,
    run_id: &RunId,
    seen: &mut HashSet<u64>,
    what: &str,
    status: RunStatus,
) {
    let now: RunVersion = store
        .run_version(run_id)
        .await
        .expect("version")
        .expect("a backend that keeps versions keeps them for every run");
    assert_eq!(now.status, status, "{what}");
    assert!(
        seen.insert(now.version),
        "{what}: version {} again",
        now.version
    );
}
