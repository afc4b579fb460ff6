//! Contract rules for leases: the compare-and-swap with one winner, fencing after a takeover,
//! expiry that fences nothing by itself, renewal by the holding token only, release.

use std::sync::Arc;

use super::*;
use crate::model::{CheckpointAnswer, OperationReceipt};
use crate::store::{ControlIntent, Fence, IntentAck, IntentAction, ScriptChange};

/// `acquire_lease` installs a lease only over the expected token (`None`: no lease), and
/// `release_lease` clears it only for its holder.
pub async fn acquire_lease_is_a_compare_and_swap<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let cas = |expected: Option<&'static str>, token: &'static str| {
        let store = store.clone();
        let id = id.clone();
        async move { store.acquire_lease(&id, expected, &lease(token)).await }
    };
    assert!(!cas(None, "token-b").await.expect("cas over a held lease"));
    assert!(!cas(Some("token-x"), "token-b").await.expect("cas mismatch"));
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-a"))
    );
    assert!(cas(Some("token-a"), "token-b").await.expect("cas match"));
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
        !cas(Some("token-b"), "token-c")
            .await
            .expect("cas over no lease")
    );
    let full = expiring_lease("token-c", "replica-2", 1_700_000_090_000);
    assert!(store.acquire_lease(id, None, &full).await.expect("cas"));
    assert_eq!(store.lease(id).await.expect("lease"), Some(full));
}

/// Of many handles racing to take the same lease with the same expectation, exactly one
/// wins, and the lease is the winner's.
pub async fn concurrent_acquisitions_have_one_winner<B: Backend>(backend: &B) {
    const RACERS: usize = 8;
    let WithRun {
        data,
        store,
        record,
    } = with_run(backend).await;
    assert!(store.capabilities().cas, "the engine needs `cas`");
    let mut handles = vec![store.clone()];
    handles.push(backend.open(&data).await);
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut racers = Vec::new();
    for racer in 0..RACERS {
        let (store, start) = (handles[racer % handles.len()].clone(), start.clone());
        let id = record.run_id.clone();
        racers.push(tokio::spawn(async move {
            let token = format!("racer-{racer}");
            start.wait().await;
            let won = store
                .acquire_lease(&id, Some("token-a"), &lease(&token))
                .await
                .expect("cas");
            won.then_some(token)
        }));
    }
    let mut winners = Vec::new();
    for racer in racers {
        winners.extend(racer.await.expect("racer task"));
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let held = store.lease(&record.run_id).await.expect("lease");
    assert_eq!(held.map(|lease| lease.token), winners.pop());
}

/// Once another token holds the lease, every fenced write of the old holder is refused and
/// writes nothing; with no lease at all, every fenced write is refused.
pub async fn fenced_writes_after_a_takeover_are_refused_and_write_nothing<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    assert!(store.capabilities().fence, "the engine needs `fence`");
    let id = &record.run_id;
    assert!(
        store
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    let stale = Fence("token-a");
    let changed = RunRecord {
        status: RunStatus::Failed,
        script: "changed".to_owned(),
        ..record.clone()
    };
    let row = call(1, 0, 1);
    let events = [log_event(1, "lost")];
    assert_fenced(
        store
            .update_run(&changed, ScriptChange::Changed, stale)
            .await,
        "update_run",
    );
    assert_fenced(
        store
            .append_call(id, write(&row, &[], &events), stale)
            .await,
        "append_call",
    );
    assert_fenced(
        store
            .append_calls(id, &[write(&row, &[], &events)], stale)
            .await,
        "append_calls",
    );
    assert_fenced(
        store.append_events(id, &events, stale).await,
        "append_events",
    );
    assert_eq!(store.load_run(id).await.expect("load"), record);
    assert!(store.calls(id).await.expect("calls").is_empty());
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 0);

    store
        .append_call(id, write(&row, &[], &events), Fence("token-b"))
        .await
        .expect("the holder writes");
    store.release_lease(id, "token-b").await.expect("release");
    assert_fenced(
        store
            .append_events(id, &[log_event(2, "x")], Fence("token-b"))
            .await,
        "a write after release",
    );
}

/// Checkpoint answers, receipts and an executor's acknowledgement of a control intent are
/// fenced like the journal: after a takeover the old holder's are refused and write nothing,
/// the new holder's stand, and an acknowledgement by a process that does not execute the
/// run (no fence) is not a holder's write and is taken.
pub async fn answers_receipts_and_acknowledgements_are_fenced<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let stop = ControlIntent::new(id, IntentAction::Stop, None);
    let cancel = ControlIntent::new(id, IntentAction::CancelAgent, Some(0));
    for intent in [&stop, &cancel] {
        store.put_intent(intent).await.expect("intent");
    }
    assert!(
        store
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over")
    );
    let (stale, holder) = (Fence("token-a"), Fence("token-b"));
    let answer = CheckpointAnswer {
        call_index: 3,
        hash: "h".to_owned(),
        answer: json!("stale"),
        answered_at: 1,
    };
    let receipt = OperationReceipt {
        operation_id: "op-stale".to_owned(),
        generation: 2,
        input_digest: "d".to_owned(),
        response: json!({}),
        created_at: 1,
    };
    let ack = IntentAck::new(json!({ "state": "settled", "by": "stale" }));
    assert_fenced(
        store.put_checkpoint_answer(id, &answer, stale).await,
        "put_checkpoint_answer",
    );
    assert_fenced(store.put_receipt(id, &receipt, stale).await, "put_receipt");
    assert_fenced(
        store
            .acknowledge_intent(id, &stop.op, &ack, Some(stale))
            .await,
        "acknowledge_intent",
    );
    assert!(
        store
            .checkpoint_answers(id)
            .await
            .expect("answers")
            .is_empty()
    );
    assert_eq!(store.receipt(id, "op-stale").await.expect("receipt"), None);
    assert_eq!(store.intent_ack(id, &stop.op).await.expect("ack"), None);

    let answer = CheckpointAnswer {
        answer: json!("holder"),
        ..answer
    };
    assert_eq!(
        store
            .put_checkpoint_answer(id, &answer, holder)
            .await
            .expect("the holder answers"),
        answer
    );
    assert_eq!(
        store
            .put_receipt(id, &receipt, holder)
            .await
            .expect("the holder's receipt"),
        receipt
    );
    let settled = IntentAck::new(json!({ "state": "settled", "by": "holder" }));
    assert_eq!(
        store
            .acknowledge_intent(id, &stop.op, &settled, Some(holder))
            .await
            .expect("the holder acknowledges"),
        settled
    );
    let withdrawn = IntentAck::new(json!({ "state": "refused" }));
    assert_eq!(
        store
            .acknowledge_intent(id, &cancel.op, &withdrawn, None)
            .await
            .expect("a non-executor acknowledges"),
        withdrawn
    );
}

/// An expired lease nobody took over still renews and writes (expiry is the policy's data,
/// not a fence); taking it over is the ordinary CAS, after which the lapsed holder can
/// neither renew nor write.
pub async fn expiry_alone_fences_nothing_but_a_takeover_does<B: Backend>(backend: &B) {
    let (_data, store) = empty(backend).await;
    let record = run_record(RUN, PROJECT, 1);
    let id = &record.run_id;
    let expired = expiring_lease("token-a", "replica-1", 10);
    store.create_run(&record, &expired).await.expect("create");
    store
        .append_events(id, &[log_event(1, "late but held")], Fence("token-a"))
        .await
        .expect("an expired holder writes");
    store
        .renew_lease(id, "token-a", 20)
        .await
        .expect("renew late");
    assert_eq!(
        store
            .lease(id)
            .await
            .expect("lease")
            .and_then(|lease| lease.expires_at),
        Some(20)
    );
    let successor = expiring_lease("token-b", "replica-2", 50_000);
    assert!(
        !store
            .acquire_lease(id, Some("token-x"), &successor)
            .await
            .expect("cas mismatch")
    );
    assert!(
        store
            .acquire_lease(id, Some("token-a"), &successor)
            .await
            .expect("take over")
    );
    assert_fenced(
        store.renew_lease(id, "token-a", 99).await,
        "renewal by the lapsed holder",
    );
    assert_fenced(
        store
            .append_events(id, &[log_event(2, "lost")], Fence("token-a"))
            .await,
        "a write by the lapsed holder",
    );
    assert_eq!(store.lease(id).await.expect("lease"), Some(successor));
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 1);
}

/// Renewal sets the expiry for the holding token and is refused for any other, and for a
/// released lease.
pub async fn renewal_needs_the_token_that_holds_the_lease<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    store
        .renew_lease(id, "token-a", 5_000)
        .await
        .expect("renew");
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(Lease {
            expires_at: Some(5_000),
            ..lease("token-a")
        })
    );
    assert_fenced(
        store.renew_lease(id, "token-x", 6_000).await,
        "renewal by a stranger",
    );
    store.release_lease(id, "token-a").await.expect("release");
    assert_fenced(
        store.renew_lease(id, "token-a", 7_000).await,
        "renewal after release",
    );
    assert_eq!(store.lease(id).await.expect("lease"), None);
}

/// The two halves of a generation's end are fenced writes: `close_generation` appends its
/// last events and records its call count, `record_outcome` rewrites the run row and
/// releases the lease. A token that does not hold the lease writes nothing of either, and
/// once the lease is released its token fences what follows.
pub async fn a_generation_ends_with_two_fenced_writes<B: Backend>(backend: &B) {
    let (WithRun { store, record, .. }, last, done) = ending(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    // A count the rows do not give (7 for one row), so that a recorded count shows.
    assert_fenced(
        store
            .close_generation(id, &last, Some((1, 7)), Fence("token-b"))
            .await,
        "close_generation",
    );
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 1, "no event");
    assert_eq!(
        store.call_tail(id, 5).await.expect("tail").total,
        1,
        "no count"
    );
    store
        .close_generation(id, &last, Some((1, 7)), fence)
        .await
        .expect("close the generation");
    assert_eq!(
        event_types(store.as_ref(), id).await,
        ["agentStart", "agentEnd", "complete"]
    );
    assert_eq!(store.call_tail(id, 5).await.expect("tail").total, 7);
    store
        .close_generation(id, &[], None, fence)
        .await
        .expect("nothing to write");

    assert_fenced(
        store.record_outcome(&done, "token-b").await,
        "record_outcome",
    );
    assert_still_held(store.as_ref(), id).await;
    store
        .record_outcome(&done, "token-a")
        .await
        .expect("record the outcome");
    let stored = store.load_run(id).await.expect("run");
    assert_eq!(
        (stored.status, stored.result),
        (RunStatus::Completed, done.result)
    );
    assert_eq!(store.lease(id).await.expect("lease"), None, "released");
    assert_fenced(
        store
            .close_generation(id, &[event(4, "log")], None, fence)
            .await,
        "a write after the release",
    );
}

/// `end_generation` writes a generation's last events, its count, its outcome and the
/// lease's release at once: refused by another fence it writes none of them, and once it
/// has ended the generation its released lease fences a second end.
pub async fn end_generation_writes_the_whole_end_or_nothing<B: Backend>(backend: &B) {
    let (WithRun { store, record, .. }, last, done) = ending(backend).await;
    let id = &record.run_id;
    assert_fenced(
        store
            .end_generation(&done, "token-b", &last, Some((1, 7)))
            .await,
        "end_generation",
    );
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 1, "no event");
    assert_eq!(
        store.call_tail(id, 5).await.expect("tail").total,
        1,
        "no count"
    );
    assert_still_held(store.as_ref(), id).await;
    store
        .end_generation(&done, "token-a", &last, Some((1, 7)))
        .await
        .expect("end the generation");
    assert_eq!(
        event_types(store.as_ref(), id).await,
        ["agentStart", "agentEnd", "complete"]
    );
    assert_eq!(store.call_tail(id, 5).await.expect("tail").total, 7);
    let stored = store.load_run(id).await.expect("run");
    assert_eq!(
        (stored.status, stored.result),
        (RunStatus::Completed, done.result.clone())
    );
    assert_eq!(store.lease(id).await.expect("lease"), None, "released");
    assert_fenced(
        store
            .end_generation(&done, "token-a", &[event(4, "log")], None)
            .await,
        "end_generation after the release",
    );
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);
}

/// The run of [`ending`] as a refused end leaves it: still running, its lease `token-a`'s.
async fn assert_still_held(store: &dyn Store, id: &RunId) {
    assert_eq!(
        store.load_run(id).await.expect("run").status,
        RunStatus::Running
    );
    assert_eq!(
        store.lease(id).await.expect("lease"),
        Some(lease("token-a"))
    );
}

/// What both ending rules start from: a run whose generation wrote one row (and its event)
/// under `token-a`, that generation's last two events, and the run completed.
async fn ending<B: Backend>(backend: &B) -> (WithRun<B::Data>, [EventRecord; 2], RunRecord) {
    let with = with_run(backend).await;
    with.store
        .append_call(
            &with.record.run_id,
            write(&call(1, 0, 1), &[], &[event(1, "agentStart")]),
            Fence("token-a"),
        )
        .await
        .expect("the generation's row");
    let done = RunRecord {
        status: RunStatus::Completed,
        result: Some(serde_json::json!({"answer": 42})),
        updated_at: with.record.updated_at + 1,
        ..with.record.clone()
    };
    (with, [event(2, "agentEnd"), event(3, "complete")], done)
}

/// The types of the run's stored events, in order.
async fn event_types(store: &dyn Store, id: &RunId) -> Vec<serde_json::Value> {
    store
        .events(id, 0, 10)
        .await
        .expect("events")
        .iter()
        .map(|event| event.event.value()["type"].clone())
        .collect()
}
