//! The backend-independent contract of [`Store`]: one async function per rule, each taking a
//! [`Backend`] (a factory of `Arc<dyn Store>` handles on one fresh set of data), so every
//! backend passes the same suite. A backend runs it all with one macro line in its tests:
//!
//! ```text
//! agentprism::store_contract_tests!(MyBackend::default());
//! ```
//!
//! which expands to one `#[tokio::test]` per rule. Compiled for this crate's tests and, for a
//! backend built elsewhere, behind the `store-contract` cargo feature.
//!
//! Every trait method is exercised, and every failure rule: unknown run, taken id, fenced
//! write after a takeover, a lapsed holder that can neither renew nor write, CAS mismatch and
//! a single winner among concurrent CAS, first-writer-wins answers, receipts by generation,
//! dense event seqs, the bounded call tail, intents reused while pending and ended by the
//! first acknowledgement, script copies, delete cascading to everything, declared
//! capabilities, corrupt data reported as `Corrupt`, the caller tag's compare-and-set with a
//! single winner, companion files frozen with the script, the summaries of a workflow's newest runs, the journal of open sessions, the queue of starts (order, bound, one claim per entry), and a run version that changes with
//! every write to a run that is not running.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use super::{CallWrite, Store, StoreError, StoreResult};
use crate::model::{
    AuthContext, AutoResume, CallChanges, CallCounts, CallKind, CallOrigin, CallOutcome,
    CallRecord, CheckpointKind, CheckpointWait, EndSummary, EventJson, EventRecord, Lease, Limits,
    ModelUsage, PauseReason, Phase, RoutingSnapshot, RunId, RunRecord, RunStatus, ScriptRevision,
    ScriptSource, SetupKind, SetupRequest, SetupState, SetupWait, ShownBackend, Usage,
    WorkspaceBase,
};

mod callers;
mod calls;
mod control;
mod leases;
mod queue;
mod runs;
mod sessions;
mod summaries;
mod versions;

pub use callers::*;
pub use calls::*;
pub use control::*;
pub use leases::*;
pub use queue::*;
pub use runs::*;
pub use sessions::*;
pub use summaries::*;
pub use versions::*;

/// What the suite needs from a backend.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Whatever keeps one set of data alive (a temporary folder, a scratch schema).
    type Data: Send + Sync;

    /// A fresh, empty set of data.
    async fn create(&self) -> Self::Data;

    /// A handle on `data`. Called again for the same data, it must give an independent
    /// handle, as another process or replica would have.
    async fn open(&self, data: &Self::Data) -> Arc<dyn Store>;

    /// Overwrites the stored `args` of `run_id` with text that does not parse.
    async fn damage_args(&self, data: &Self::Data, run_id: &RunId);
}

/// Expands to one `#[tokio::test]` per contract rule, run against `$backend`.
#[macro_export]
macro_rules! store_contract_tests {
    ($backend:expr) => {
        $crate::store_contract_tests!(@cases $backend;
            create_and_load_round_trip,
            the_trace_context_is_kept_once,
            create_refuses_a_taken_id,
            update_run_keeps_or_replaces_the_script,
            the_summary_is_written_with_the_run_and_listed,
            unknown_runs_are_reported_by_every_method,
            listings_are_ordered_and_per_project,
            corrupt_data_is_reported_as_corrupt,
            a_second_handle_sees_the_first_ones_writes,
            delete_cascades_to_everything_stored_with_the_run,
            append_call_supersedes_rows_and_appends_events,
            calls_replay_pool_and_latest_calls_are_ordered,
            set_aside_calls_leave_the_pool_and_stay_in_history,
            call_tail_counts_and_bounds_the_latest_generation,
            recorded_call_totals_stand_until_the_generation_grows,
            checkpoint_calls_are_the_standing_checkpoint_rows,
            events_page_by_cursor_and_stay_dense,
            log_tail_returns_the_last_lines_and_the_count,
            checkpoint_answers_are_first_writer_wins,
            receipts_are_first_writer_wins_per_generation,
            acquire_lease_is_a_compare_and_swap,
            concurrent_acquisitions_have_one_winner,
            fenced_writes_after_a_takeover_are_refused_and_write_nothing,
            answers_receipts_and_acknowledgements_are_fenced,
            expiry_alone_fences_nothing_but_a_takeover_does,
            renewal_needs_the_token_that_holds_the_lease,
            a_generation_ends_with_two_fenced_writes,
            end_generation_writes_the_whole_end_or_nothing,
            intents_are_reused_while_pending_and_end_at_the_first_ack,
            pending_intents_by_run_holder_and_all,
            script_copies_are_created_and_deleted,
            capabilities_are_kept,
            caller_is_read_narrowly_and_set_by_compare_and_set,
            update_run_leaves_the_caller_alone,
            concurrent_reclaims_have_one_winner,
            companion_files_travel_with_the_script,
            run_version_changes_with_every_write_while_not_running,
            status_call_tail_is_the_call_tail_narrowed,
            resumes_due_are_the_paused_runs_whose_moment_came,
            past_summaries_are_one_workflow_s_newest,
            open_sessions_are_journaled_per_call_and_generation,
            open_sessions_are_fenced_and_deleted_with_the_run,
            a_group_commit_journals_sessions_and_appends_calls_fenced,
            the_queue_keeps_order_and_its_bound,
            claims_take_the_head_once_each,
        );
    };
    (@cases $backend:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::store::contract::$case(&$backend).await;
            }
        )*
    };
}

/// The project most fixtures belong to.
pub const PROJECT: &str = "/home/dev/shop";
/// Another project, for per-project listings.
pub const OTHER_PROJECT: &str = "/home/dev/blog";
/// The run [`with_run`] creates.
pub const RUN: &str = "lq3k2m1-abc123";

/// A fresh store holding one running run ([`RUN`]) under lease `token-a`.
pub struct WithRun<D> {
    pub data: D,
    pub store: Arc<dyn Store>,
    pub record: RunRecord,
}

pub async fn with_run<B: Backend>(backend: &B) -> WithRun<B::Data> {
    let data = backend.create().await;
    let store = backend.open(&data).await;
    let record = run_record(RUN, PROJECT, 1_700_000_000_000);
    store
        .create_run(&record, &lease("token-a"))
        .await
        .expect("create the run");
    WithRun {
        data,
        store,
        record,
    }
}

/// A fresh, empty store.
pub async fn empty<B: Backend>(backend: &B) -> (B::Data, Arc<dyn Store>) {
    let data = backend.create().await;
    let store = backend.open(&data).await;
    (data, store)
}

pub fn run_id(text: &str) -> RunId {
    RunId::parse(text).expect("test run ids are valid")
}

/// A run as admission creates it: optional fields unset.
pub fn run_record(id: &str, project_dir: &str, started_at: i64) -> RunRecord {
    RunRecord {
        run_id: run_id(id),
        project_dir: PathBuf::from(project_dir),
        workflow_name: "review".to_owned(),
        status: RunStatus::Running,
        pause_reason: None,
        error_code: None,
        error_message: None,
        script: "export const meta = { name: \"review\" };\nawait agent(\"look\");\n".to_owned(),
        script_file: PathBuf::from(format!("/store/runs/{id}.script.js")),
        script_source: ScriptSource::Inline,
        script_revisions: Vec::new(),
        meta: json!({ "name": "review" }),
        args: json!({ "target": "src" }),
        cwd: PathBuf::from(project_dir),
        limits: Limits::default(),
        phases: Vec::new(),
        current_phase: None,
        result: None,
        started_at,
        updated_at: started_at,
        token_usage: Usage::default(),
        stream_id: "0123456789abcdef0123456789abcdef".to_owned(),
        generation: 1,
        setup: None,
        auth_context: None,
        checkpoint_context: None,
        reset_hint: None,
        reset_at: None,
        auto_resume: Default::default(),
        routing: RoutingSnapshot {
            integrity: "abc".to_owned(),
            ..RoutingSnapshot::default()
        },
        files: Default::default(),
        caller: None,
        workspace: None,
        summary: None,
    }
}

/// A run with every optional field set, paused at a checkpoint in its second generation.
pub fn full_run_record(id: &str) -> RunRecord {
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
            token_budget: Some(50_000),
            cost_budget_usd: Some(2.5),
            auto_resume: Some(false),
        },
        phases: vec![Phase {
            title: "Read".to_owned(),
            detail: Some("read the code".to_owned()),
            model: Some("fast".to_owned()),
        }],
        current_phase: Some("Read".to_owned()),
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
        auto_resume: AutoResume {
            due_at: Some(1_700_003_602_500),
            count: 2,
        },
        files: [(
            "prompts/review.md".to_owned(),
            "Review the diff.".to_owned(),
        )]
        .into(),
        caller: Some("session:0f5e".to_owned()),
        workspace: Some(WorkspaceBase {
            repository: "/home/dev".to_owned(),
            commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".to_owned(),
            subfolder: "shop".to_owned(),
            dirty: true,
        }),
        summary: Some(run_summary()),
        ..run_record(id, PROJECT, 1_700_000_000_000)
    }
}

/// A run's summary with two backends, one of which reported cost.
pub fn run_summary() -> EndSummary {
    let usage = |tokens: u64, cost_usd: Option<f64>| Usage {
        input_tokens: tokens - 40,
        output_tokens: 40,
        total_tokens: tokens,
        cost_usd,
    };
    EndSummary {
        duration_ms: 60_000,
        generation: 2,
        calls: CallCounts {
            total: 5,
            live: 2,
            replayed: 3,
            failed: 1,
            retried: 1,
        },
        usage: vec![
            ModelUsage {
                backend: "claude".to_owned(),
                model: Some("sonnet".to_owned()),
                calls: 3,
                usage: usage(1_000, Some(0.25)),
            },
            ModelUsage {
                backend: "codex".to_owned(),
                model: None,
                calls: 1,
                usage: usage(540, None),
            },
        ],
        total: Usage {
            input_tokens: 1_460,
            output_tokens: 80,
            total_tokens: 1_540,
            cost_usd: Some(0.25),
        },
    }
}

/// A backend-approval setup answered with an approval, as the engine stores it.
pub fn approved_setup() -> SetupWait {
    SetupWait {
        state: SetupState::Approved,
        request: SetupRequest {
            id: "setup-1".to_owned(),
            kind: SetupKind::BackendApproval,
            title: "Approve the script's agent backends".to_owned(),
            message: "mine: /opt/mine-acp".to_owned(),
            backends: vec![ShownBackend {
                name: "mine".to_owned(),
                command: "/opt/mine-acp".to_owned(),
                args: Vec::new(),
                env: [("OPENAI_API_KEY".to_owned(), "<masked>".to_owned())].into(),
                command_line: "env OPENAI_API_KEY=<masked> /opt/mine-acp".to_owned(),
            }],
            requested_schema: json!({ "type": "object" }),
        },
        answer: Some(json!({ "action": "accept", "content": { "approve": true } })),
    }
}

/// The sign-in a backend without advertised methods asks for.
pub fn auth_context() -> AuthContext {
    AuthContext {
        backend_id: "claude".to_owned(),
        methods: Vec::new(),
    }
}

/// The `confirm` checkpoint 2 a run waits on.
pub fn waiting_checkpoint() -> CheckpointWait {
    CheckpointWait {
        call_index: 2,
        hash: "cafe".to_owned(),
        prompt: "Ship it?".to_owned(),
        kind: CheckpointKind::Confirm,
        choices: None,
    }
}

/// A lease without expiry, boot id or host, as an older daemon wrote it.
pub fn lease(token: &str) -> Lease {
    Lease {
        owner_id: "daemon-1".to_owned(),
        pid: 4242,
        proc_start: 987_654_321,
        boot_id: None,
        host: None,
        token: token.to_owned(),
        acquired_at: 1_700_000_000_000,
        expires_at: None,
    }
}

/// A lease with every field set, as a serve replica writes it.
pub fn expiring_lease(token: &str, owner_id: &str, expires_at: i64) -> Lease {
    Lease {
        owner_id: owner_id.to_owned(),
        boot_id: Some("0f5e6c1a-boot".to_owned()),
        host: Some("replica-host-1".to_owned()),
        expires_at: Some(expires_at),
        ..lease(token)
    }
}

pub fn call(generation: u32, index: u32, settlement_ordinal: u64) -> CallRecord {
    CallRecord {
        generation,
        index,
        kind: CallKind::Agent,
        hash: format!("hash-{index}"),
        path: Some("3:7<1:1".to_owned()),
        inputs_hash: Some(format!("inputs-{index}")),
        label: Some(format!("call {index}")),
        phase: None,
        outcome: CallOutcome::Result,
        origin: CallOrigin::Runner,
        result: Some(json!({ "answer": index })),
        error: None,
        aborted: false,
        attempts: 1,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            cost_usd: None,
        },
        model_requested: Some("fast".to_owned()),
        model_resolved: Some("claude-haiku".to_owned()),
        backend_id: Some("claude".to_owned()),
        resolved_cwd: Some(PROJECT.to_owned()),
        replay: None,
        session: Some(json!({ "sessionId": "s-1" })),
        settlement_ordinal,
        superseded_by: None,
        live_reason: None,
        changes: Some(CallChanges {
            branch: Some(format!("agentprism/{RUN}/{index}-call-{index}")),
            base_commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".to_owned(),
            head_commit: "9d1f0c2a7b3e4d5f60718293a4b5c6d7e8f90123".to_owned(),
            files_changed: 2,
            insertions: 10,
            deletions: 1,
        }),
    }
}

pub fn checkpoint_call(generation: u32, index: u32, settlement_ordinal: u64) -> CallRecord {
    CallRecord {
        kind: CallKind::Checkpoint,
        model_requested: None,
        model_resolved: None,
        backend_id: None,
        session: None,
        ..call(generation, index, settlement_ordinal)
    }
}

pub fn event(seq: u64, event_type: &str) -> EventRecord {
    EventRecord {
        seq,
        timestamp: 1_700_000_000_000 + seq as i64,
        event: EventJson::from_value(&json!({ "type": event_type, "runId": RUN, "scope": "root" })),
        redacted: false,
        truncated: false,
    }
}

pub fn log_event(seq: u64, message: &str) -> EventRecord {
    EventRecord {
        event: EventJson::from_value(
            &json!({ "type": "log", "runId": RUN, "scope": "root", "message": message }),
        ),
        ..event(seq, "log")
    }
}

pub fn write<'a>(
    record: &'a CallRecord,
    supersedes: &'a [(u32, u32)],
    events: &'a [EventRecord],
) -> CallWrite<'a> {
    CallWrite {
        record,
        supersedes,
        events,
    }
}

pub fn assert_fenced<T: std::fmt::Debug>(result: StoreResult<T>, what: &str) {
    match result {
        Err(StoreError::Fenced(id)) => assert_eq!(id.as_str(), RUN, "{what}"),
        other => panic!("{what}: expected Fenced, got {other:?}"),
    }
}

pub fn assert_unknown<T: std::fmt::Debug>(result: StoreResult<T>, what: &str) {
    match result {
        Err(StoreError::UnknownRun(_)) => {}
        other => panic!("{what}: expected UnknownRun, got {other:?}"),
    }
}

/// A cross-run query: the result if the backend declares `scan`, else the refusal checked.
pub fn scanned<T: std::fmt::Debug>(scan: bool, result: StoreResult<T>, what: &str) -> Option<T> {
    if scan {
        return Some(result.unwrap_or_else(|error| panic!("{what}: {error}")));
    }
    match result {
        Err(StoreError::Unsupported(_)) => None,
        other => panic!("{what}: without `scan` expected Unsupported, got {other:?}"),
    }
}
