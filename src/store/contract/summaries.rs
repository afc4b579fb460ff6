//! Contract rules for the narrow reads: the status read (`Store::status_call_tail`), the
//! latest generation's tail of [`Store::call_tail`] / [`Store::call_tail_rows`] with each row
//! narrowed to what status shows, and the timer loop's read of the automatic resumes due.

use super::*;
use crate::model::CallError;
use crate::store::{CallSummary, Fence, ScriptChange, SummaryTail};

/// The narrow tail is the wide one narrowed, for every limit, with and without the count.
pub async fn status_call_tail_is_the_call_tail_narrowed<B: Backend>(backend: &B) {
    let WithRun { store, record, .. } = with_run(backend).await;
    let id = &record.run_id;
    let fence = Fence("token-a");
    assert_eq!(
        store.status_call_tail(id, 5, true).await.expect("empty"),
        SummaryTail {
            total: Some(0),
            ..SummaryTail::default()
        }
    );
    assert_eq!(
        store.status_call_tail(id, 5, false).await.expect("empty"),
        SummaryTail::default()
    );
    let failed = CallRecord {
        outcome: CallOutcome::Error,
        result: None,
        error: Some(CallError {
            form: "agent".to_owned(),
            code: "AGENT_FAILED".to_owned(),
            message: "it broke".to_owned(),
            recoverable: false,
        }),
        phase: Some("Read".to_owned()),
        ..call(2, 3, 4)
    };
    let rows = [
        call(1, 0, 1),
        call(2, 0, 1),
        checkpoint_call(2, 1, 2),
        call(2, 2, 3),
        failed,
    ];
    let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
    store.append_calls(id, &writes, fence).await.expect("rows");
    for limit in [0, 1, 2, 3, 10] {
        let wide = store.call_tail(id, limit).await.expect("tail");
        let narrow = store
            .status_call_tail(id, limit, true)
            .await
            .expect("narrow");
        let expected = SummaryTail {
            generation: wide.generation,
            total: Some(wide.total),
            calls: wide.calls.iter().map(CallSummary::from).collect(),
        };
        assert_eq!(narrow, expected, "limit {limit}, counted");
        let uncounted = store
            .status_call_tail(id, limit, false)
            .await
            .expect("narrow");
        assert_eq!(
            uncounted,
            SummaryTail {
                total: None,
                ..expected
            },
            "limit {limit}, not counted"
        );
    }
    let tail = store.status_call_tail(id, 10, true).await.expect("narrow");
    assert_eq!(tail.generation, Some(2));
    assert_eq!(tail.total, Some(3));
    let indexes: Vec<u32> = tail.calls.iter().map(|call| call.index).collect();
    assert_eq!(indexes, [0, 2, 3]);
    assert_eq!(
        tail.calls[2].error.as_ref().map(|e| e.code.as_str()),
        Some("AGENT_FAILED")
    );
    // An isolated call's outcome is among the shown columns.
    assert_eq!(tail.calls[0].changes, rows[1].changes);
    assert!(tail.calls[0].changes.is_some());
    assert_unknown(
        store
            .status_call_tail(&run_id("lq3k2m3-nope00"), 5, true)
            .await,
        "status_call_tail of an unknown run",
    );
}

/// `resumes_due` lists the paused runs whose automatic resume is due by the given moment,
/// earliest first and bounded; a run no longer paused, or with nothing scheduled, is not
/// listed, and an update that clears the moment takes the run off the list.
pub async fn resumes_due_are_the_paused_runs_whose_moment_came<B: Backend>(backend: &B) {
    use crate::model::{AutoResume, PauseReason, RunStatus};
    let (_data, store) = empty(backend).await;
    let paused = |id: &str, status: RunStatus, due_at: Option<i64>| RunRecord {
        status,
        pause_reason: Some(PauseReason::UsageLimit),
        auto_resume: AutoResume { due_at, count: 1 },
        ..run_record(id, PROJECT, 10)
    };
    let runs = [
        paused("lq3k2m1-due001", RunStatus::Paused, Some(3_000)),
        paused("lq3k2m1-due002", RunStatus::Paused, Some(1_000)),
        paused("lq3k2m1-due003", RunStatus::Paused, Some(9_000)),
        paused("lq3k2m1-due004", RunStatus::Paused, None),
        paused("lq3k2m1-due005", RunStatus::Running, Some(500)),
    ];
    for (n, record) in runs.iter().enumerate() {
        store
            .create_run(record, &lease(&format!("token-{n}")))
            .await
            .expect("create");
    }
    let ids = |due: Vec<(RunId, i64)>| {
        due.into_iter()
            .map(|(id, at)| (id.as_str().to_owned(), at))
            .collect::<Vec<_>>()
    };
    let due = store.resumes_due(3_000, 10).await.expect("due");
    assert_eq!(
        ids(due),
        [
            ("lq3k2m1-due002".to_owned(), 1_000),
            ("lq3k2m1-due001".to_owned(), 3_000)
        ]
    );
    let next = store.resumes_due(i64::MAX, 1).await.expect("next");
    assert_eq!(ids(next), [("lq3k2m1-due002".to_owned(), 1_000)]);
    let cleared = RunRecord {
        auto_resume: AutoResume::default(),
        ..runs[1].clone()
    };
    store
        .update_run(&cleared, ScriptChange::Unchanged, Fence("token-1"))
        .await
        .expect("update");
    let due = store.resumes_due(i64::MAX, 10).await.expect("due");
    assert_eq!(
        ids(due),
        [
            ("lq3k2m1-due001".to_owned(), 3_000),
            ("lq3k2m1-due003".to_owned(), 9_000)
        ]
    );
}
