//! Contract rules for the journal: call appends and what they supersede, the orders calls are
//! read in, the bounded call tail, the dense event stream and its log tail, and the
//! first-writer-wins checkpoint answers and receipts.

use serde_json::json;

use super::*;
use crate::model::{CheckpointAnswer, OperationReceipt};
use crate::store::{CallTail, Fence};

/// A call supersedes the rows it names and appends its events in the same write; naming a
/// row that does not exist rolls the whole write back.
pub async fn append_call_supersedes_rows_and_appends_events<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert_eq!(store.next_settlement_ordinal(id).await.expect("next"), 0);
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
    let consumed = CallRecord {
        superseded_by: Some(2),
        ..first.clone()
    };
    assert_eq!(
        store.calls(id).await.expect("calls"),
        vec![consumed, second.clone(), replayed.clone()]
    );
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);
    // The replayed row took ordinal 1 again; the highest stays the superseded-free 2.
    assert_eq!(store.next_settlement_ordinal(id).await.expect("next"), 3);

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
    assert_eq!(store.call_tail(id, 10).await.expect("tail").total, 1);
}

/// `calls` is by generation then settlement, `replay_pool` by generation then index without
/// superseded rows, `latest_calls` the highest generation's rows by index.
pub async fn calls_replay_pool_and_latest_calls_are_ordered<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert!(store.latest_calls(id).await.expect("latest").is_empty());
    // Index 1 settles before index 0 (completion order differs from call order).
    let rows = [call(1, 1, 1), call(1, 0, 2), call(1, 2, 3)];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("generation 1");
    let indexes = |calls: Vec<CallRecord>| -> Vec<(u32, u32)> {
        calls
            .iter()
            .map(|call| (call.generation, call.index))
            .collect()
    };
    assert_eq!(
        indexes(store.calls(id).await.expect("calls")),
        vec![(1, 1), (1, 0), (1, 2)]
    );
    assert_eq!(
        indexes(store.replay_pool(id).await.expect("pool")),
        vec![(1, 0), (1, 1), (1, 2)]
    );
    let rerun = [call(2, 1, 1), call(2, 0, 2)];
    store
        .append_calls(
            id,
            &[
                write(&rerun[0], &[(1, 0), (1, 2)], &[]),
                write(&rerun[1], &[], &[]),
            ],
            fence,
        )
        .await
        .expect("generation 2");
    assert_eq!(
        indexes(store.replay_pool(id).await.expect("pool")),
        vec![(1, 1), (2, 0), (2, 1)]
    );
    assert_eq!(
        store.latest_calls(id).await.expect("latest"),
        vec![rerun[1].clone(), rerun[0].clone()]
    );
}

/// Rows a resume reruns are set aside: out of the replay pool, kept in `calls` with the
/// generation that set them aside. The write is fenced and all-or-none, and a row's
/// `live_reason` round-trips.
pub async fn set_aside_calls_leave_the_pool_and_stay_in_history<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let rows = [call(1, 0, 1), call(1, 1, 2), call(1, 2, 3)];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("generation 1");
    let pool = |calls: Vec<CallRecord>| -> Vec<(u32, u32)> {
        calls.iter().map(|c| (c.generation, c.index)).collect()
    };
    let missing = store.set_aside_calls(id, &[(1, 0), (1, 9)], 2, fence).await;
    assert!(matches!(missing, Err(StoreError::Io(_))), "{missing:?}");
    let stale = store
        .set_aside_calls(id, &[(1, 0)], 2, Fence("token-b"))
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    assert_eq!(
        pool(store.replay_pool(id).await.expect("pool")),
        vec![(1, 0), (1, 1), (1, 2)],
        "a refused write sets nothing aside"
    );
    store
        .set_aside_calls(id, &[(1, 0), (1, 2)], 2, fence)
        .await
        .expect("set aside");
    assert_eq!(
        pool(store.replay_pool(id).await.expect("pool")),
        vec![(1, 1)]
    );
    let history = store.calls(id).await.expect("calls");
    assert_eq!(history.len(), 3);
    assert_eq!(history[0].superseded_by, Some(2));
    assert_eq!(history[1].superseded_by, None);
    let rerun = CallRecord {
        live_reason: Some(crate::model::LiveReason::Rerun),
        ..call(2, 0, 4)
    };
    store
        .append_call(id, write(&rerun, &[], &[]), fence)
        .await
        .expect("generation 2");
    let latest = store.latest_calls(id).await.expect("latest");
    assert_eq!(latest, vec![rerun.clone()]);
    let shown = store.status_call_tail(id, 5, true).await.expect("tail");
    assert_eq!(
        shown.calls[0].live_reason,
        Some(crate::model::LiveReason::Rerun)
    );
}

/// The tail is the latest generation's non-checkpoint count and its last rows by index,
/// ascending, whatever order they settled in; a generation of checkpoints only has none.
pub async fn call_tail_counts_and_bounds_the_latest_generation<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let empty = CallTail {
        generation: None,
        total: 0,
        calls: Vec::new(),
    };
    assert_eq!(store.call_tail(id, 3).await.expect("tail"), empty);
    let first: Vec<CallRecord> = (0..4)
        .map(|index| call(1, index, u64::from(index) + 1))
        .collect();
    let writes: Vec<CallWrite<'_>> = first.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("generation 1");
    // Generation 2 settles out of order, with a checkpoint among its rows, over several writes.
    let second = [
        call(2, 3, 1),
        checkpoint_call(2, 4, 2),
        call(2, 0, 3),
        call(2, 5, 4),
        call(2, 1, 5),
        checkpoint_call(2, 2, 6),
    ];
    for row in &second[..2] {
        store
            .append_call(id, write(row, &[], &[]), fence)
            .await
            .expect("append");
    }
    let rest: Vec<CallWrite<'_>> = second[2..].iter().map(|row| write(row, &[], &[])).collect();
    store.append_calls(id, &rest, fence).await.expect("append");
    let tail = store.call_tail(id, 3).await.expect("tail");
    assert_eq!(
        tail,
        CallTail {
            generation: Some(2),
            total: 4,
            calls: vec![second[4].clone(), second[0].clone(), second[3].clone()],
        }
    );
    let whole = store.call_tail(id, 50).await.expect("whole tail");
    let shown: Vec<u32> = whole.calls.iter().map(|call| call.index).collect();
    assert_eq!(shown, vec![0, 1, 3, 5]);
    assert!(
        store
            .call_tail(id, 0)
            .await
            .expect("no rows")
            .calls
            .is_empty()
    );
    // A latest generation with only a checkpoint: the tail is that generation's, empty.
    let only = checkpoint_call(3, 0, 1);
    store
        .append_call(id, write(&only, &[], &[]), fence)
        .await
        .expect("append");
    assert_eq!(
        store.call_tail(id, 3).await.expect("tail"),
        CallTail {
            generation: Some(3),
            total: 0,
            calls: Vec::new(),
        }
    );
}

/// A generation's recorded count is the tail's count while it stands: it is fenced, it
/// replaces an earlier record, and a row appended to that generation later drops it (the
/// tail counts again). `call_tail_rows` is the tail without a count.
pub async fn recorded_call_totals_stand_until_the_generation_grows<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    let rows = [call(1, 0, 1), checkpoint_call(1, 1, 2), call(1, 2, 3)];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store.append_calls(id, &writes, fence).await.expect("rows");
    assert_eq!(store.call_tail(id, 5).await.expect("counted").total, 2);
    assert_fenced(
        store.record_call_total(id, 1, 2, Fence("token-b")).await,
        "record_call_total",
    );
    // The store reports what was recorded (a count it does not check), so it reads no rows.
    store
        .record_call_total(id, 1, 7, fence)
        .await
        .expect("record");
    store
        .record_call_total(id, 1, 9, fence)
        .await
        .expect("record again");
    let tail = store.call_tail(id, 1).await.expect("recorded");
    assert_eq!((tail.generation, tail.total), (Some(1), 9));
    assert_eq!(
        store.call_tail_rows(id, 1).await.expect("rows"),
        (Some(1), vec![rows[2].clone()])
    );
    // A record for another generation leaves this one's count alone.
    store
        .record_call_total(id, 2, 4, fence)
        .await
        .expect("record");
    assert_eq!(store.call_tail(id, 1).await.expect("tail").total, 9);
    store
        .append_call(id, write(&call(1, 3, 4), &[], &[]), fence)
        .await
        .expect("append");
    assert_eq!(
        store.call_tail(id, 5).await.expect("counted again").total,
        3
    );
    assert_eq!(
        store.call_tail_rows(id, 5).await.expect("rows").1.len(),
        3,
        "rows of the tail"
    );
}

/// The checkpoint rows of every generation that no later row superseded, by generation and
/// settlement order; agent rows never appear.
pub async fn checkpoint_calls_are_the_standing_checkpoint_rows<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert!(store.checkpoint_calls(id).await.expect("none").is_empty());
    let first = [
        call(1, 0, 1),
        checkpoint_call(1, 1, 2),
        checkpoint_call(1, 2, 3),
    ];
    let writes: Vec<CallWrite<'_>> = first.iter().map(|row| write(row, &[], &[])).collect();
    store
        .append_calls(id, &writes, fence)
        .await
        .expect("generation 1");
    // Generation 2 re-asks checkpoint 1 (superseding it), settling it after a later one.
    let second = [
        checkpoint_call(2, 3, 1),
        checkpoint_call(2, 1, 2),
        call(2, 4, 3),
    ];
    store
        .append_call(id, write(&second[0], &[], &[]), fence)
        .await
        .expect("append");
    store
        .append_call(id, write(&second[1], &[(1, 1)], &[]), fence)
        .await
        .expect("append");
    store
        .append_call(id, write(&second[2], &[], &[]), fence)
        .await
        .expect("append");
    assert_eq!(
        store.checkpoint_calls(id).await.expect("checkpoints"),
        vec![first[2].clone(), second[0].clone(), second[1].clone()]
    );
}

/// Events page by cursor and limit; an append that does not continue the stream densely is
/// refused whole.
pub async fn events_page_by_cursor_and_stay_dense<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 0);
    assert!(store.events(id, 0, 10).await.expect("events").is_empty());
    let events: Vec<EventRecord> = (1..=7).map(|seq| event(seq, "phase")).collect();
    store
        .append_events(id, &events[..3], fence)
        .await
        .expect("first");
    store
        .append_events(id, &events[3..], fence)
        .await
        .expect("second");
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 7);
    assert_eq!(store.events(id, 0, 100).await.expect("all"), events);
    assert_eq!(
        store.events(id, 2, 3).await.expect("page"),
        events[2..5].to_vec()
    );
    assert_eq!(
        store.events(id, 5, 100).await.expect("tail"),
        events[5..].to_vec()
    );
    assert!(store.events(id, 7, 100).await.expect("end").is_empty());
    assert!(
        store
            .events(id, u64::MAX, 100)
            .await
            .expect("beyond")
            .is_empty()
    );
    for bad in [
        [event(9, "phase"), event(10, "phase")],
        [event(8, "phase"), event(8, "phase")],
        [event(7, "phase"), event(8, "phase")],
    ] {
        let result = store.append_events(id, &bad, fence).await;
        assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
    }
    assert_eq!(store.last_event_seq(id).await.expect("seq"), 7);
}

/// The log tail is the last log lines, oldest first, and the count of all of them.
pub async fn log_tail_returns_the_last_lines_and_the_count<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let events: Vec<EventRecord> = (1..=9)
        .map(|seq| match seq % 3 {
            0 => event(seq, "agentEnd"),
            _ => log_event(seq, &format!("line {seq}")),
        })
        .collect();
    store
        .append_events(id, &events, Fence("token-a"))
        .await
        .expect("append");
    let (lines, total) = store.log_tail(id, 3).await.expect("tail");
    assert_eq!(lines, vec!["line 5", "line 7", "line 8"]);
    assert_eq!(total, 6);
    let (lines, total) = store.log_tail(id, 100).await.expect("whole log");
    assert_eq!((lines.len(), lines[0].as_str(), total), (6, "line 1", 6));
}

/// The first answer to a checkpoint stands; answers list by call index.
pub async fn checkpoint_answers_are_first_writer_wins<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
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
    assert!(store.checkpoint_answers(id).await.expect("none").is_empty());
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
            .expect("again"),
        first
    );
    assert_eq!(
        store
            .put_checkpoint_answer(id, &other, Fence("token-a"))
            .await
            .expect("other"),
        other
    );
    assert_eq!(
        store.checkpoint_answers(id).await.expect("answers"),
        vec![other, first]
    );
}

/// A receipt stands against retries of its generation and older ones; a newer generation's
/// replaces it.
pub async fn receipts_are_first_writer_wins_per_generation<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
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
    assert_eq!(
        store
            .put_receipt(id, &retry, Fence("token-a"))
            .await
            .expect("retry"),
        receipt
    );
    assert_eq!(
        store.receipt(id, "op-1").await.expect("read"),
        Some(receipt.clone())
    );
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
    assert_eq!(store.receipt(id, "op-2").await.expect("other op"), None);
}
