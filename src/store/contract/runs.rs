//! Contract rules for run rows: admission, loading, updates, listings, unknown ids, corrupt
//! data, several handles, and deleting a run with everything stored under it.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::model::{CheckpointAnswer, OperationReceipt, RunStatus, RunSummary};
use crate::store::{ControlIntent, Fence, IntentAction, IntentScope, ScriptChange};

/// A run with every field set reads back equal, and so does its lease; `Some(null)` is a
/// result distinct from none.
pub async fn create_and_load_round_trip<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let record = full_run_record(RUN);
    let held = expiring_lease("token-a", "replica-1", 1_700_000_030_000);
    store.create_run(&record, &held).await.expect("create");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    assert_eq!(
        store.lease(&record.run_id).await.expect("lease"),
        Some(held)
    );
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
    assert_eq!(
        store.lease(&null_result.run_id).await.expect("lease"),
        Some(lease("token-b"))
    );
}

/// A run's trace context is kept once: the first `set_run_trace` wins, an update of the run
/// leaves it, and an unknown run has none.
pub async fn the_trace_context_is_kept_once<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_eq!(
        store.run_trace(&record.run_id).await.expect("read"),
        Some(None)
    );
    assert!(
        store
            .set_run_trace(&record.run_id, first)
            .await
            .expect("keep")
    );
    let later = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
    assert!(
        !store
            .set_run_trace(&record.run_id, later)
            .await
            .expect("keep")
    );
    store
        .update_run(&record, ScriptChange::Unchanged, Fence("token-a"))
        .await
        .expect("update");
    assert_eq!(
        store.run_trace(&record.run_id).await.expect("read"),
        Some(Some(first.to_owned()))
    );
    let unknown = RunId::parse("zz-unknown").expect("an id");
    assert_eq!(store.run_trace(&unknown).await.expect("read"), None);
    assert!(!store.set_run_trace(&unknown, first).await.expect("keep"));
}

/// A second admission under a taken id fails with `AlreadyExists` and changes nothing.
pub async fn create_refuses_a_taken_id<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let again = RunRecord {
        workflow_name: "other".to_owned(),
        ..record.clone()
    };
    match store.create_run(&again, &lease("token-z")).await {
        Err(StoreError::AlreadyExists(id)) => assert_eq!(id, record.run_id),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    assert_eq!(
        store.lease(&record.run_id).await.expect("lease"),
        Some(lease("token-a"))
    );
}

/// `ScriptChange::Unchanged` leaves script, meta and revisions as stored; `Changed` writes
/// them.
pub async fn update_run_keeps_or_replaces_the_script<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
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
    assert_eq!(
        store.load_run(&record.run_id).await.expect("load"),
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

/// A run has no summary until one is written with the run row; the row's update and the
/// outcome's write store it, a load and the listing read it back, and a later update
/// replaces it.
pub async fn the_summary_is_written_with_the_run_and_listed<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let listed =
        |runs: Vec<RunSummary>| runs.into_iter().map(|run| run.summary).collect::<Vec<_>>();
    let loaded = store.load_run(&record.run_id).await.expect("load");
    assert_eq!(loaded.summary, None);
    let paused = RunRecord {
        status: RunStatus::Paused,
        pause_reason: Some(PauseReason::Requested),
        summary: Some(run_summary()),
        ..record.clone()
    };
    store
        .update_run(&paused, ScriptChange::Unchanged, Fence("token-a"))
        .await
        .expect("update");
    assert_eq!(store.load_run(&record.run_id).await.expect("load"), paused);
    let runs = store.list_runs(None, 10).await.expect("list");
    assert_eq!(listed(runs), vec![Some(run_summary())]);
    let mut ended = run_summary();
    ended.generation = 3;
    ended.calls.live = 0;
    ended.usage.truncate(1);
    let completed = RunRecord {
        status: RunStatus::Completed,
        pause_reason: None,
        generation: 3,
        summary: Some(ended.clone()),
        ..paused
    };
    store
        .record_outcome(&completed, "token-a")
        .await
        .expect("record the outcome");
    let loaded = store.load_run(&record.run_id).await.expect("load");
    assert_eq!(loaded.summary, Some(ended.clone()));
    let runs = store
        .list_runs(Some(Path::new(PROJECT)), 10)
        .await
        .expect("list the project");
    assert_eq!(listed(runs), vec![Some(ended)]);
}

/// Every method that names a run answers `UnknownRun` for one that does not exist.
pub async fn unknown_runs_are_reported_by_every_method<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let id = run_id("z-zzzzzz");
    let fence = Fence("token");
    let record = run_record("z-zzzzzz", PROJECT, 1);
    let row = call(1, 0, 1);
    let answer = CheckpointAnswer {
        call_index: 0,
        hash: "h".to_owned(),
        answer: json!(true),
        answered_at: 1,
    };
    let receipt = OperationReceipt {
        operation_id: "op".to_owned(),
        generation: 1,
        input_digest: "d".to_owned(),
        response: json!({}),
        created_at: 1,
    };
    let intent = ControlIntent::new(&id, IntentAction::Stop, None);
    let ack = crate::store::IntentAck::new(json!({}));
    let s = &store;
    assert_unknown(s.load_run(&id).await, "load_run");
    assert_unknown(
        s.update_run(&record, ScriptChange::Unchanged, fence).await,
        "update_run",
    );
    assert_unknown(
        s.append_call(&id, write(&row, &[], &[]), fence).await,
        "append_call",
    );
    assert_unknown(
        s.append_calls(&id, &[write(&row, &[], &[])], fence).await,
        "append_calls",
    );
    assert_unknown(
        s.append_events(&id, &[event(1, "log")], fence).await,
        "append_events",
    );
    assert_unknown(s.calls(&id).await, "calls");
    assert_unknown(s.replay_pool(&id).await, "replay_pool");
    assert_unknown(s.latest_calls(&id).await, "latest_calls");
    assert_unknown(s.call_tail(&id, 5).await, "call_tail");
    assert_unknown(s.call_tail_rows(&id, 5).await, "call_tail_rows");
    assert_unknown(
        s.record_call_total(&id, 1, 1, fence).await,
        "record_call_total",
    );
    assert_unknown(s.checkpoint_calls(&id).await, "checkpoint_calls");
    assert_unknown(s.events(&id, 0, 1).await, "events");
    assert_unknown(s.last_event_seq(&id).await, "last_event_seq");
    assert_unknown(s.log_tail(&id, 1).await, "log_tail");
    assert_unknown(
        s.put_checkpoint_answer(&id, &answer, Fence("t")).await,
        "put_checkpoint_answer",
    );
    assert_unknown(s.checkpoint_answers(&id).await, "checkpoint_answers");
    assert_unknown(
        s.put_receipt(&id, &receipt, Fence("t")).await,
        "put_receipt",
    );
    assert_unknown(s.receipt(&id, "op").await, "receipt");
    assert_unknown(s.lease(&id).await, "lease");
    assert_unknown(
        s.acquire_lease(&id, None, &lease("t")).await,
        "acquire_lease",
    );
    assert_unknown(s.renew_lease(&id, "t", 5).await, "renew_lease");
    assert_unknown(s.release_lease(&id, "t").await, "release_lease");
    assert_unknown(s.delete_run(&id).await, "delete_run");
    assert_unknown(s.put_intent(&intent).await, "put_intent");
    assert_unknown(s.intent(&id, &intent.op).await, "intent");
    assert_unknown(
        s.pending_intents(IntentScope::Run(&id)).await,
        "pending_intents",
    );
    assert_unknown(
        s.acknowledge_intent(&id, &intent.op, &ack, Some(Fence("t")))
            .await,
        "acknowledge_intent",
    );
    assert_unknown(s.intent_ack(&id, &intent.op).await, "intent_ack");
}

/// `list_runs` is newest first, across projects or within one; `active_runs` is the pending
/// and running runs of a project, oldest first; `runs_with_script` finds runs by their
/// recorded script file, newest first.
pub async fn listings_are_ordered_and_per_project<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let scan = store.capabilities().scan;
    let shared = PathBuf::from("/work/flows/shared.js");
    let runs = [
        RunRecord {
            script_file: shared.clone(),
            ..run_record("a-aaaaaa", PROJECT, 300)
        },
        RunRecord {
            status: RunStatus::Pending,
            ..run_record("b-bbbbbb", OTHER_PROJECT, 200)
        },
        RunRecord {
            status: RunStatus::Completed,
            result: Some(json!(1)),
            script_file: shared.clone(),
            ..run_record("c-cccccc", PROJECT, 100)
        },
        RunRecord {
            status: RunStatus::Pending,
            ..run_record("d-dddddd", PROJECT, 400)
        },
        RunRecord {
            status: RunStatus::Paused,
            ..run_record("e-eeeeee", PROJECT, 50)
        },
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
    if let Some(all) = scanned(scan, store.list_runs(None, 10).await, "list_runs(None)") {
        assert_eq!(
            ids(all),
            vec!["d-dddddd", "a-aaaaaa", "b-bbbbbb", "c-cccccc", "e-eeeeee"]
        );
    }
    if let Some(limited) = scanned(scan, store.list_runs(None, 2).await, "list_runs limited") {
        assert_eq!(ids(limited), vec!["d-dddddd", "a-aaaaaa"]);
    }
    let project = store
        .list_runs(Some(Path::new(PROJECT)), 10)
        .await
        .expect("list one project");
    assert_eq!(
        project
            .iter()
            .find(|summary| summary.run_id.as_str() == "c-cccccc"),
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
    assert_eq!(
        ids(project),
        vec!["d-dddddd", "a-aaaaaa", "c-cccccc", "e-eeeeee"]
    );
    let nowhere = store.list_runs(Some(Path::new("/nowhere")), 10).await;
    assert!(nowhere.expect("empty project").is_empty());
    active_and_by_script(&*store, &runs[0], &shared).await;
}

/// The `active_runs` and `runs_with_script` half of the listing rule, over the runs
/// [`listings_are_ordered_and_per_project`] created; `first` is the running run `a-aaaaaa`.
async fn active_and_by_script(store: &dyn Store, first: &RunRecord, shared: &Path) {
    let scan = store.capabilities().scan;
    let active = store.active_runs(Path::new(PROJECT)).await;
    assert_eq!(
        active.expect("active"),
        vec![run_id("a-aaaaaa"), run_id("d-dddddd")]
    );
    let finished = RunRecord {
        status: RunStatus::Completed,
        ..first.clone()
    };
    store
        .update_run(&finished, ScriptChange::Unchanged, Fence("token"))
        .await
        .expect("finish");
    let active = store.active_runs(Path::new(PROJECT)).await;
    assert_eq!(active.expect("active"), vec![run_id("d-dddddd")]);
    if let Some(found) = scanned(
        scan,
        store.runs_with_script(shared).await,
        "runs_with_script",
    ) {
        assert_eq!(found, vec![run_id("a-aaaaaa"), run_id("c-cccccc")]);
        let none = store.runs_with_script(Path::new("/nowhere.js")).await;
        assert!(none.expect("no runs").is_empty());
    }
}

/// Stored data that does not parse is `Corrupt`, naming the run and the field.
pub async fn corrupt_data_is_reported_as_corrupt<B: Backend>(backend: &B) {
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    backend.damage_args(&data, &record.run_id).await;
    match store.load_run(&record.run_id).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains(RUN), "{message}");
            assert!(message.contains("args"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// Two handles on the same data see each other's writes, and a lease taken through one
/// fences writes through the other.
pub async fn a_second_handle_sees_the_first_ones_writes<B: Backend>(backend: &B) {
    let WithRun {
        data,
        store: first,
        record,
    } = with_run(backend).await;
    let second = backend.open(&data).await;
    let id = &record.run_id;
    assert_eq!(second.load_run(id).await.expect("load"), record);
    assert!(
        second
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    assert_fenced(
        first
            .append_events(id, &[event(1, "log")], Fence("token-a"))
            .await,
        "a write through the first handle",
    );
    second
        .append_events(id, &[log_event(1, "from second")], Fence("token-b"))
        .await
        .expect("append");
    assert_eq!(
        first.log_tail(id, 5).await.expect("log"),
        (vec!["from second".to_owned()], 1)
    );
}

/// Deleting a run deletes its calls, events, answers, receipts, intents and inline script
/// copy, and nothing of another run.
pub async fn delete_cascades_to_everything_stored_with_the_run<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let (gone, kept) = (run_id(RUN), run_id("k-kkkkkk"));
    let mut copies = Vec::new();
    for (id, token) in [(&gone, "token-a"), (&kept, "token-k")] {
        let copy = store
            .create_script_copy(Path::new(PROJECT), id, "export const meta = {};\n")
            .await
            .expect("script copy");
        let record = RunRecord {
            script_file: copy.clone(),
            ..run_record(id.as_str(), PROJECT, 5)
        };
        store
            .create_run(&record, &lease(token))
            .await
            .expect("create");
        fill(&*store, id, token).await;
        copies.push(copy);
    }
    store.delete_run(&gone).await.expect("delete");
    assert_unknown(store.load_run(&gone).await, "load after delete");
    assert_unknown(store.calls(&gone).await, "calls after delete");
    assert_unknown(store.delete_run(&gone).await, "delete again");
    assert!(!copies[0].exists(), "the deleted run's script copy is gone");
    let scan = store.capabilities().scan;
    let all = store.pending_intents(IntentScope::All).await;
    if let Some(all) = scanned(scan, all, "pending_intents(All)") {
        let runs: Vec<&RunId> = all.iter().map(|intent| &intent.run_id).collect();
        assert_eq!(runs, vec![&kept], "no intent of the deleted run is left");
    }
    // A new run under the same id starts empty.
    let again = run_record(RUN, PROJECT, 9);
    store
        .create_run(&again, &lease("token-n"))
        .await
        .expect("re-create");
    assert!(store.calls(&gone).await.expect("calls").is_empty());
    assert_eq!(store.last_event_seq(&gone).await.expect("seq"), 0);
    assert!(
        store
            .checkpoint_answers(&gone)
            .await
            .expect("answers")
            .is_empty()
    );
    assert_eq!(store.receipt(&gone, "op").await.expect("receipt"), None);
    let pending = store.pending_intents(IntentScope::Run(&gone)).await;
    assert!(pending.expect("intents").is_empty());
    assert_eq!(store.call_tail(&gone, 5).await.expect("tail").total, 0);
    // The other run keeps everything.
    assert!(copies[1].exists(), "the other run's copy stays");
    assert_eq!(store.calls(&kept).await.expect("calls").len(), 1);
    assert_eq!(store.log_tail(&kept, 5).await.expect("log").1, 1);
    assert_eq!(
        store
            .checkpoint_answers(&kept)
            .await
            .expect("answers")
            .len(),
        1
    );
    assert!(store.receipt(&kept, "op").await.expect("receipt").is_some());
    let pending = store.pending_intents(IntentScope::Run(&kept)).await;
    assert_eq!(pending.expect("intents").len(), 1);
}

/// One of everything a run can have stored with it.
async fn fill(store: &dyn Store, id: &RunId, token: &str) {
    let row = call(1, 0, 1);
    store
        .append_call(id, write(&row, &[], &[log_event(1, "hello")]), Fence(token))
        .await
        .expect("append");
    let answer = CheckpointAnswer {
        call_index: 0,
        hash: "h".to_owned(),
        answer: json!("yes"),
        answered_at: 1,
    };
    store
        .put_checkpoint_answer(id, &answer, Fence(token))
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
        .put_receipt(id, &receipt, Fence(token))
        .await
        .expect("receipt");
    let intent = ControlIntent::new(id, IntentAction::Stop, None);
    store.put_intent(&intent).await.expect("intent");
}
