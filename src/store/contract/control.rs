//! Contract rules for durable control state: intents and their first acknowledgement, the
//! pending lists by run, by lease holder and across runs, inline script copies, and the
//! capabilities a backend declares.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::store::{ControlIntent, IntentAck, IntentAction, IntentScope};

/// A retried request reuses the pending intent for the same action and call (same operation
/// id); the first acknowledgement stands; after it a new request is a new operation.
pub async fn intents_are_reused_while_pending_and_end_at_the_first_ack<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let stop = ControlIntent::new(id, IntentAction::Stop, None);
    assert_eq!(store.put_intent(&stop).await.expect("put"), stop);
    let retry = ControlIntent::new(id, IntentAction::Stop, None);
    assert_eq!(store.put_intent(&retry).await.expect("retry"), stop);
    // Another action, or the same action on another call, is another intent.
    let cancel_one = ControlIntent::new(id, IntentAction::CancelAgent, Some(1));
    let cancel_two = ControlIntent::new(id, IntentAction::CancelAgent, Some(2));
    assert_eq!(
        store.put_intent(&cancel_one).await.expect("cancel 1"),
        cancel_one
    );
    assert_eq!(
        store.put_intent(&cancel_two).await.expect("cancel 2"),
        cancel_two
    );
    assert_eq!(
        store.intent(id, &stop.op).await.expect("read"),
        Some(stop.clone())
    );
    assert_eq!(
        store.intent(id, &retry.op).await.expect("never stored"),
        None
    );
    assert_eq!(store.intent_ack(id, &stop.op).await.expect("pending"), None);

    let first = IntentAck {
        acked_at: 100,
        acked_by: 7,
        outcome: json!({ "state": "settled", "stopped": true }),
    };
    let second = IntentAck {
        acked_at: 101,
        acked_by: 8,
        outcome: json!({ "state": "settled", "stopped": false }),
    };
    assert_eq!(
        store
            .acknowledge_intent(id, &stop.op, &first, None)
            .await
            .expect("ack"),
        first
    );
    assert_eq!(
        store
            .acknowledge_intent(id, &stop.op, &second, None)
            .await
            .expect("second ack"),
        first
    );
    assert_eq!(
        store.intent_ack(id, &stop.op).await.expect("acked"),
        Some(first.clone())
    );
    // An acknowledged intent stays readable, and a put of its own op returns it.
    assert_eq!(
        store.intent(id, &stop.op).await.expect("read"),
        Some(stop.clone())
    );
    assert_eq!(store.put_intent(&stop).await.expect("same op"), stop);
    let next = ControlIntent::new(id, IntentAction::Stop, None);
    assert_eq!(store.put_intent(&next).await.expect("new stop"), next);
    assert_ne!(next.op, stop.op);

    match store
        .acknowledge_intent(id, "no-such-op", &first, None)
        .await
    {
        Err(StoreError::UnknownIntent { run_id, op }) => {
            assert_eq!((run_id.as_str(), op.as_str()), (RUN, "no-such-op"));
        }
        other => panic!("expected UnknownIntent, got {other:?}"),
    }
    assert_eq!(
        store.intent_ack(id, "no-such-op").await.expect("none"),
        None
    );
}

/// Pending intents list oldest first, per run, for the runs one owner's leases hold, and
/// across all runs; acknowledged ones drop out.
pub async fn pending_intents_by_run_holder_and_all<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let scan = store.capabilities().scan;
    let (mine, theirs) = (run_id("a-aaaaaa"), run_id("b-bbbbbb"));
    let daemon = lease("token-a");
    let other = Lease {
        owner_id: "other-owner".to_owned(),
        ..lease("token-b")
    };
    for (id, holder) in [(&mine, &daemon), (&theirs, &other)] {
        let record = run_record(id.as_str(), PROJECT, 1);
        store.create_run(&record, holder).await.expect("create");
    }
    let intent = |id: &RunId, action, call_index, requested_at| ControlIntent {
        requested_at,
        ..ControlIntent::new(id, action, call_index)
    };
    let intents = [
        intent(&theirs, IntentAction::Stop, None, 30),
        intent(&mine, IntentAction::CancelAgent, Some(4), 20),
        intent(&mine, IntentAction::Stop, None, 10),
        intent(&theirs, IntentAction::CancelAgent, Some(1), 40),
    ];
    for each in &intents {
        store.put_intent(each).await.expect("put");
    }
    let pending = store.pending_intents(IntentScope::Run(&mine)).await;
    assert_eq!(
        pending.expect("mine"),
        vec![intents[2].clone(), intents[1].clone()]
    );
    let held = store
        .pending_intents(IntentScope::HeldBy(&daemon.owner_id))
        .await;
    if let Some(held) = scanned(scan, held, "pending_intents(HeldBy)") {
        assert_eq!(held, vec![intents[2].clone(), intents[1].clone()]);
    }
    let all = store.pending_intents(IntentScope::All).await;
    if let Some(all) = scanned(scan, all, "pending_intents(All)") {
        let expected = [&intents[2], &intents[1], &intents[0], &intents[3]];
        assert_eq!(all.iter().collect::<Vec<_>>(), expected);
    }
    let ack = IntentAck::new(json!({ "state": "settled" }));
    store
        .acknowledge_intent(&mine, &intents[2].op, &ack, None)
        .await
        .expect("ack");
    let pending = store.pending_intents(IntentScope::Run(&mine)).await;
    assert_eq!(pending.expect("mine"), vec![intents[1].clone()]);
    // A released lease is held by nobody: its intents are no owner's, but still pending.
    store
        .release_lease(&mine, "token-a")
        .await
        .expect("release");
    let held = store
        .pending_intents(IntentScope::HeldBy(&daemon.owner_id))
        .await;
    if let Some(held) = scanned(scan, held, "pending_intents(HeldBy) after release") {
        assert!(held.is_empty(), "{held:?}");
    }
    let all = store.pending_intents(IntentScope::All).await;
    if let Some(all) = scanned(scan, all, "pending_intents(All) after release") {
        assert_eq!(all.len(), 3);
    }
}

/// A script copy's place is named before it is written (with no file there yet), and the
/// copy holds the text at that location, is rewritten by a second create, and is gone after
/// a delete (deleting twice is fine).
pub async fn script_copies_are_created_and_deleted<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let id = run_id(RUN);
    let project = Path::new(PROJECT);
    let place = store.script_copy_place(project, &id).await.expect("place");
    assert!(!place.exists(), "naming the place writes no copy");
    assert!(
        place.parent().is_some_and(Path::is_dir),
        "the folders are made"
    );
    let path = store
        .create_script_copy(project, &id, "first")
        .await
        .expect("create");
    assert_eq!(path, place, "the copy is written where its place was named");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read the copy"),
        "first"
    );
    assert!(
        path.to_string_lossy()
            .ends_with(&format!("{RUN}.script.js")),
        "{}",
        path.display()
    );
    let again = store
        .create_script_copy(project, &id, "second")
        .await
        .expect("rewrite");
    assert_eq!(again, path);
    assert_eq!(
        std::fs::read_to_string(&path).expect("read the copy"),
        "second"
    );
    let other = store
        .create_script_copy(Path::new(OTHER_PROJECT), &id, "other")
        .await
        .expect("another project");
    assert_ne!(other, path, "copies are per project");
    store
        .delete_script_copy(project, &id)
        .await
        .expect("delete");
    assert!(!path.exists(), "the copy is gone");
    store
        .delete_script_copy(project, &id)
        .await
        .expect("delete again");
    assert!(other.exists(), "another project's copy stays");
}

/// The engine needs `cas` and `fence`; whatever `scan` says is kept by the listing rules.
pub async fn capabilities_are_kept<B: Backend>(backend: &B) {
    let (data, store) = empty(backend).await;
    let declared = store.capabilities();
    assert!(declared.cas && declared.fence, "{declared:?}");
    assert_eq!(backend.open(&data).await.capabilities(), declared);
    let listed = store.list_runs(None, 1).await;
    scanned(declared.scan, listed, "list_runs(None)");
    let all = store.pending_intents(IntentScope::All).await;
    scanned(declared.scan, all, "pending_intents(All)");
}
