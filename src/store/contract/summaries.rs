//! Contract rules for the narrow reads: the status read (`Store::status_call_tail`), the
//! latest generation's tail of [`Store::call_tail`] / [`Store::call_tail_rows`] with each row
//! narrowed to what status shows, the timer loop's read of the automatic resumes due, and
//! the summaries of a workflow's newest runs that admission's estimate reads.

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

/// `past_summaries` reads one workflow's newest runs: a script file's, or a project's runs of
/// one name among its newest `within`; `limit` counts the runs looked at, and those without
/// a summary give none.
pub async fn past_summaries_are_one_workflow_s_newest<B: Backend>(backend: &B) {
    use crate::store::PastRunsOf;
    use std::path::Path;
    let (_data, store) = empty(backend).await;
    let shared = PathBuf::from("/work/flows/shared.js");
    let spent = |tokens: u64| {
        let mut summary = run_summary();
        summary.total.total_tokens = tokens;
        summary
    };
    let runs = [
        RunRecord {
            script_file: shared.clone(),
            summary: Some(spent(1)),
            ..run_record("lq3k2m1-past01", PROJECT, 100)
        },
        run_record("lq3k2m1-past02", PROJECT, 200),
        RunRecord {
            workflow_name: "other".to_owned(),
            summary: Some(spent(3)),
            ..run_record("lq3k2m1-past03", PROJECT, 300)
        },
        RunRecord {
            summary: Some(spent(4)),
            ..run_record("lq3k2m1-past04", OTHER_PROJECT, 400)
        },
        RunRecord {
            script_file: shared.clone(),
            summary: Some(spent(5)),
            ..run_record("lq3k2m1-past05", PROJECT, 500)
        },
    ];
    for (n, record) in runs.iter().enumerate() {
        store
            .create_run(record, &lease(&format!("token-{n}")))
            .await
            .expect("create");
    }
    let tokens = |summaries: Vec<EndSummary>| -> Vec<u64> {
        summaries
            .iter()
            .map(|summary| summary.total.total_tokens)
            .collect()
    };
    let named = |within| PastRunsOf::Named {
        project_dir: Path::new(PROJECT),
        name: "review",
        within,
    };
    let read = |of, limit| {
        let store = store.clone();
        async move { tokens(store.past_summaries(of, limit).await.expect("read")) }
    };
    assert_eq!(read(named(10), 10).await, [5, 1]);
    // The newest two of the name are 5 and 2, and 2 has no summary.
    assert_eq!(read(named(10), 2).await, [5]);
    // The project's newest two are 5 and 3, and 3 is another workflow.
    assert_eq!(read(named(2), 10).await, [5]);
    assert_eq!(read(PastRunsOf::Script(&shared), 10).await, [5, 1]);
    assert_eq!(read(PastRunsOf::Script(&shared), 1).await, [5]);
    let nowhere = Path::new("/work/flows/none.js");
    assert_eq!(
        read(PastRunsOf::Script(nowhere), 10).await,
        Vec::<u64>::new()
    );
}
