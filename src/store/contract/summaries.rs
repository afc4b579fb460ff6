//! Contract rule for the narrow status read (`Store::status_call_tail`): the latest
//! generation's tail of [`Store::call_tail`] / [`Store::call_tail_rows`], each row narrowed to
//! what status shows.

use super::*;
use crate::model::CallError;
use crate::store::{CallSummary, Fence, SummaryTail};

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
