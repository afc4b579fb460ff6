//! Tests of the driver on its own: the durability rule against a real store whose writes are
//! accepted or refused by the lease fence, the lease heartbeat under a TTL policy, and whole
//! generations on the instant runner (and on a runner whose calls wait until cancelled).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::engine::instant::{HeldRunner, InstantRunner};
use crate::engine::routing::NamedBackends;
use crate::model::{CallOrigin, Lease, RunRecord, ScriptSource, Usage};
use crate::store::sqlite::DATABASE_FILE;
use crate::store::{CallReads, EventReads, LeaseReads, LeaseState, Leases, Runs, SqliteStore};
use crate::util::sync::Lock;

const LEASE: &str = "the-lease";

/// A store holding one running run under lease [`LEASE`].
struct World {
    _folder: tempfile::TempDir,
    store: Arc<SqliteStore>,
    run_id: RunId,
}

async fn world() -> World {
    let folder = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteStore::open(&folder.path().join("root")).expect("open store"));
    let run_id = RunId::parse("durable-1").expect("valid id");
    let record = RunRecord {
        run_id: run_id.clone(),
        project_dir: folder.path().to_path_buf(),
        workflow_name: "durable".into(),
        status: RunStatus::Running,
        pause_reason: None,
        error_code: None,
        error_message: None,
        script: String::new(),
        script_file: folder.path().join("durable.js"),
        script_source: ScriptSource::Path,
        script_revisions: Vec::new(),
        meta: json!({"name": "durable"}),
        args: json!({}),
        cwd: folder.path().to_path_buf(),
        limits: Limits::default(),
        phases: Vec::new(),
        current_phase: None,
        result: None,
        started_at: 1,
        updated_at: 1,
        token_usage: Usage::default(),
        stream_id: "0123456789abcdef0123456789abcdef".into(),
        generation: 1,
        setup: None,
        auth_context: None,
        checkpoint_context: None,
        reset_hint: None,
        reset_at: None,
        auto_resume: Default::default(),
        routing: RoutingSnapshot::default(),
        files: Default::default(),
        caller: None,
        workspace: None,
        summary: None,
    };
    let lease = Lease {
        owner_id: "test".into(),
        pid: std::process::id(),
        proc_start: 0,
        boot_id: None,
        host: None,
        token: LEASE.into(),
        acquired_at: 1,
        expires_at: None,
    };
    store.create_run(&record, &lease).await.expect("create run");
    World {
        _folder: folder,
        store,
        run_id,
    }
}

impl World {
    /// A generation writing under `lease_token` (`None`: the dry run), whose lease never
    /// expires.
    fn setup(&self, body: &str, lease_token: Option<&str>) -> DriverSetup {
        self.setup_under(body, lease_token, LeasePolicy::HolderLiveness)
    }

    /// [`World::setup`] under `lease_policy`.
    fn setup_under(
        &self,
        body: &str,
        lease_token: Option<&str>,
        lease_policy: LeasePolicy,
    ) -> DriverSetup {
        let persistence = match lease_token {
            Some(token) => Persistence::Store {
                store: self.store.clone(),
                lease_token: token.into(),
                lease_policy,
            },
            None => Persistence::DryRun,
        };
        DriverSetup {
            mock_answers: None,
            run_id: self.run_id.clone(),
            generation: 1,
            body: body.into(),
            args: json!({}),
            cwd: PathBuf::from("/"),
            phases: Vec::new(),
            meta_model: Some("mine".into()),
            limits: Limits::default(),
            routing: RoutingSnapshot::default(),
            backends: Arc::new(NamedBackends::new(["mine"])),
            runner: InstantRunner::new(),
            persistence,
            pool: ReplayPool::new(Vec::new(), false),
            answers: Vec::new(),
            last_event_seq: 0,
            next_settlement: 0,
            agent_timeout: Duration::from_secs(60),
            prompt_cache_hold: crate::prompt_cache::DEFAULT_HOLD,
            vm_limits: VmLimits::default(),
            broker: PermissionBroker::new(None),
            notices: None,
            usage: Usage::default(),
            current_phase: None,
            nested: None,
            files: Arc::default(),
            live: Arc::new(Mutex::new(LiveView::default())),
            isolation: Default::default(),
            trace: crate::engine::driver::TraceSetup::off(),
        }
    }

    /// A driver with no script, for calling its write path directly.
    fn driver(&self, lease_token: Option<&str>) -> Driver {
        Driver::new(self.setup("", lease_token), None)
    }

    /// The one recorded call count, as (generation, calls), read beside the store.
    fn recorded_count(&self) -> Option<(u32, i64)> {
        let database = self._folder.path().join("root").join(DATABASE_FILE);
        let connection = rusqlite::Connection::open(database).expect("open the database");
        rusqlite::OptionalExtension::optional(connection.query_row(
            "SELECT generation, calls FROM call_tallies",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        ))
        .expect("read call_tallies")
    }

    async fn rows(&self) -> Vec<CallRecord> {
        self.store.calls(&self.run_id).await.expect("read calls")
    }

    async fn event_kinds(&self) -> Vec<String> {
        let events = self
            .store
            .events(&self.run_id, 0, 100)
            .await
            .expect("read events");
        events
            .into_iter()
            .map(|e| e.event.event_type().unwrap_or_default().into_owned())
            .collect()
    }
}

fn row(index: u32, origin: CallOrigin, settlement: u64) -> CallRecord {
    CallRecord {
        label: Some(format!("agent {index}")),
        origin,
        result: Some(json!(index)),
        settlement_ordinal: settlement,
        ..CallRecord::agent_row(1, index, &format!("hash-{index}"))
    }
}

#[tokio::test]
async fn a_settled_call_is_written_with_the_events_buffered_before_it() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    driver
        .events
        .push("log", "root", json!({"message": "before"}));
    let written = driver
        .record_call(&row(0, CallOrigin::Runner, 0), &[])
        .await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!(world.rows().await.len(), 1);
    assert_eq!(world.event_kinds().await, ["log"]);
    assert!(!driver.events.has_pending());
    assert!(driver.halt.is_none() && driver.store_error.is_none());
}

#[tokio::test]
async fn buffered_replays_reach_the_store_before_the_next_live_row() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    let replayed = driver
        .buffer_replay(row(0, CallOrigin::JournalReplay, 0), Vec::new())
        .await;
    assert!(replayed.is_ok(), "{replayed:?}");
    assert!(world.rows().await.is_empty(), "one replay is not a batch");
    let written = driver
        .record_call(&row(1, CallOrigin::Runner, 1), &[])
        .await;
    assert!(written.is_ok(), "{written:?}");
    let rows = world.rows().await;
    let order: Vec<(u32, CallOrigin)> = rows.iter().map(|r| (r.index, r.origin)).collect();
    assert_eq!(
        order,
        [(0, CallOrigin::JournalReplay), (1, CallOrigin::Runner)]
    );
}

#[tokio::test]
async fn a_refused_write_is_an_error_and_halts_the_generation_as_interrupted() {
    let world = world().await;
    let mut driver = world.driver(Some("a-lapsed-lease"));
    let lost = driver
        .record_call(&row(0, CallOrigin::Runner, 0), &[])
        .await
        .expect_err("the fence refuses a write under another lease");
    assert!(world.rows().await.is_empty());
    let message = lost.to_string();
    driver.on_lost_write(lost);
    assert!(matches!(
        driver.halt,
        Some(Halt::Pause {
            reason: PauseReason::Interrupted,
            ..
        })
    ));
    assert_eq!(driver.store_error.as_deref(), Some(message.as_str()));
    // A later failure neither replaces the first nor changes how the run halts.
    driver
        .events
        .push("log", "root", json!({"message": "later"}));
    let again = driver.flush_events().await.expect_err("still refused");
    driver.on_lost_write(again);
    assert_eq!(driver.store_error.as_deref(), Some(message.as_str()));
}

#[tokio::test]
async fn events_a_refused_flush_did_not_store_stay_buffered() {
    let world = world().await;
    let mut driver = world.driver(Some("a-lapsed-lease"));
    driver
        .events
        .push("log", "root", json!({"message": "kept"}));
    assert!(driver.flush_events().await.is_err());
    assert!(driver.events.has_pending());
    assert!(world.event_kinds().await.is_empty());
}

#[tokio::test]
async fn the_dry_run_writes_nothing_and_never_fails() {
    let world = world().await;
    let mut driver = world.driver(None);
    driver.events.push("log", "root", json!({"message": "dry"}));
    let replayed = driver
        .buffer_replay(row(0, CallOrigin::JournalReplay, 0), Vec::new())
        .await;
    assert!(replayed.is_ok());
    assert!(
        driver
            .record_call(&row(1, CallOrigin::Headless, 1), &[])
            .await
            .is_ok()
    );
    assert!(driver.flush_events().await.is_ok());
    assert!(world.rows().await.is_empty());
    assert!(world.event_kinds().await.is_empty());
}

#[tokio::test]
async fn the_live_view_counts_the_rows_written_and_the_store_gets_the_count_once() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    let view = driver.setup.live.clone();
    assert_eq!(view.locked().settled_calls, Some(0));
    for index in 0..3 {
        let replayed = driver
            .buffer_replay(
                row(index, CallOrigin::JournalReplay, index.into()),
                Vec::new(),
            )
            .await;
        assert!(replayed.is_ok(), "{replayed:?}");
    }
    let checkpoint = CallRecord {
        kind: CallKind::Checkpoint,
        ..row(3, CallOrigin::Headless, 3)
    };
    assert!(driver.record_call(&checkpoint, &[]).await.is_ok());
    assert!(
        driver
            .record_call(&row(4, CallOrigin::Runner, 4), &[])
            .await
            .is_ok()
    );
    // Three replays, one live row; the checkpoint is not a call status counts.
    assert_eq!(view.locked().settled_calls, Some(4));
    // Not in the store until the generation stops: a settled call writes only its own row,
    // and the count goes with the outcome's write.
    assert_eq!(world.recorded_count(), None);
    driver.settled_calls = 6;
    let closing = driver.closing().expect("a generation with a lease closes");
    assert_eq!(closing.call_total, Some((1, 6)), "the driver's count");
    assert_eq!(world.recorded_count(), None);
}

#[tokio::test]
async fn a_lost_lease_and_the_dry_run_leave_nothing_to_close() {
    let world = world().await;
    let mut refused = world.driver(Some("a-lapsed-lease"));
    let written = refused
        .record_call(&row(0, CallOrigin::Runner, 0), &[])
        .await;
    assert!(written.is_err(), "{written:?}");
    refused.on_lost_write(written.unwrap_err());
    refused.settled_calls = 1;
    assert!(refused.closing().is_none());
    let mut dry = world.driver(None);
    assert_eq!(dry.setup.live.locked().settled_calls, None);
    dry.settled_calls = 1;
    assert!(dry.closing().is_none());
}

#[tokio::test]
async fn a_finished_generation_hands_its_count_and_last_events_to_its_outcome() {
    let world = world().await;
    let outcome = generation(world.setup(TWO_CALLS, Some(LEASE))).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert!(outcome.store_error.is_none(), "{outcome:?}");
    let closing = outcome.closing.expect("a closing");
    assert_eq!(closing.call_total, Some((1, 2)));
    let last = closing.events.last().expect("the closing event");
    assert_eq!(last.event.value()["type"], "complete", "{last:?}");
    // The driver wrote neither: the outcome's write takes both.
    assert_eq!(world.recorded_count(), None);
    assert!(!world.event_kinds().await.contains(&"complete".to_owned()));
}

async fn generation(setup: DriverSetup) -> Outcome {
    let (_control_tx, control_rx) = mpsc::unbounded_channel();
    run(setup, control_rx).await
}

const TWO_CALLS: &str =
    "const first = await agent('one');\nlog('saw ' + first);\nreturn [first, await agent('two')];";

#[tokio::test]
async fn a_generation_records_each_call_before_the_script_goes_on() {
    let world = world().await;
    let outcome = generation(world.setup(TWO_CALLS, Some(LEASE))).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!(["ECHO: one", "ECHO: two"])));
    assert!(outcome.store_error.is_none());
    let rows = world.rows().await;
    let settled: Vec<u64> = rows.iter().map(|r| r.settlement_ordinal).collect();
    assert_eq!(settled, [0, 1]);
    assert_eq!(outcome.next_settlement, 2);
    let kinds = world.event_kinds().await;
    let saw = kinds.iter().position(|k| k == "log").expect("the log line");
    let first_record = kinds
        .iter()
        .position(|k| k == "callRecord")
        .expect("a call");
    assert!(first_record < saw, "{kinds:?}");
}

#[tokio::test]
async fn a_call_whose_row_was_refused_is_never_answered() {
    let world = world().await;
    let outcome = generation(world.setup(TWO_CALLS, Some("a-lapsed-lease"))).await;
    assert_eq!(outcome.status, RunStatus::Paused, "{outcome:?}");
    assert_eq!(outcome.pause_reason, Some(PauseReason::Interrupted));
    assert!(outcome.store_error.is_some());
    assert_eq!(outcome.result, None);
    // The script never saw the first result: it logged nothing and made no second call.
    assert_eq!(outcome.next_settlement, 1);
    assert!(world.rows().await.is_empty());
}

#[tokio::test]
async fn the_dry_run_answers_every_call_and_reports_them() {
    let world = world().await;
    let mut setup = world.setup(TWO_CALLS, None);
    setup.runner = InstantRunner::new();
    let outcome = generation(setup).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let labels: Vec<&str> = outcome.dry_calls.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["agent 0", "agent 1"]);
    assert!(matches!(&outcome.result, Some(Value::Array(answers)) if answers.len() == 2));
    assert!(world.rows().await.is_empty());
}

/// The heartbeat policy of the tests below: renewed every second.
const TTL: LeasePolicy = LeasePolicy::Ttl(Duration::from_secs(3));

fn lease_with(token: &str) -> Lease {
    Lease {
        owner_id: format!("holder-{token}"),
        pid: std::process::id(),
        proc_start: 0,
        boot_id: None,
        host: None,
        token: token.into(),
        acquired_at: crate::util::now_ms(),
        expires_at: TTL.expiry(crate::util::now_ms()),
    }
}

impl World {
    /// Another execution takes the run over from whoever holds `from`.
    async fn take_over(&self, from: &str, to: &str) {
        let taken = self
            .store
            .acquire_lease(&self.run_id, Some(from), &lease_with(to))
            .await
            .expect("take the lease over");
        assert!(taken, "the lease {from} was the run's");
    }

    async fn lease(&self) -> Lease {
        let lease = self
            .store
            .lease(&self.run_id)
            .await
            .expect("read the lease");
        lease.expect("the run has a lease")
    }
}

#[tokio::test]
async fn a_renewal_keeps_an_expiring_lease_held() {
    let world = world().await;
    // Acquired long ago and never renewed: under the TTL it may be taken over.
    let before = world.lease().await;
    let now = crate::util::now_ms();
    assert!(matches!(TTL.judge(&before, now), LeaseState::Lapsed(_)));
    let mut driver = world.driver_under(TTL);
    let renewed = driver.renew_lease().await;
    assert!(renewed.is_ok(), "{renewed:?}");
    let after = world.lease().await;
    assert_eq!(after.token, LEASE);
    assert!(after.expires_at.is_some_and(|at| at >= now + 3_000));
    assert_eq!(TTL.judge(&after, crate::util::now_ms()), LeaseState::Held);
    let written = driver
        .record_call(&row(0, CallOrigin::Runner, 0), &[])
        .await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!(world.rows().await.len(), 1);
}

#[tokio::test]
async fn without_expiry_there_is_nothing_to_renew() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    assert!(driver.heartbeat().is_none());
    world.take_over(LEASE, "another").await;
    // No renewal is attempted, so it cannot notice: the next fenced write will.
    assert!(driver.renew_lease().await.is_ok());
    assert!(!driver.lease_lost);
}

#[tokio::test]
async fn a_fenced_renewal_loses_the_lease_and_the_generation_writes_nothing_more() {
    let world = world().await;
    let mut driver = world.driver_under(TTL);
    world.take_over(LEASE, "another").await;
    let lost = driver
        .renew_lease()
        .await
        .expect_err("the old holder cannot renew");
    assert!(
        lost.to_string().starts_with("renewing the lease: "),
        "{lost}"
    );
    driver.on_lost_write(lost);
    assert!(driver.lease_lost);
    assert!(matches!(
        driver.halt,
        Some(Halt::Pause {
            reason: PauseReason::Interrupted,
            ..
        })
    ));
    // Even a store that took the old token again gets nothing from this generation.
    world.take_over("another", LEASE).await;
    driver
        .events
        .push("log", "root", json!({"message": "late"}));
    assert!(
        driver
            .record_call(&row(0, CallOrigin::Runner, 0), &[])
            .await
            .is_err()
    );
    assert!(driver.flush_events().await.is_err());
    assert!(driver.renew_lease().await.is_err());
    assert!(world.rows().await.is_empty());
    assert!(world.event_kinds().await.is_empty());
}

impl World {
    fn driver_under(&self, policy: LeasePolicy) -> Driver {
        Driver::new(self.setup_under("", Some(LEASE), policy), None)
    }

    /// Waits (in paused time) until the events buffered so far are stored, so that from
    /// then on only the heartbeat talks to the store.
    async fn until_stored(&self, kind: &str) {
        for _ in 0..100 {
            if self.event_kinds().await.iter().any(|k| k == kind) {
                return;
            }
            tokio::time::sleep(TICK).await;
        }
        panic!("no {kind} event was stored");
    }
}

const HELD_CALL: &str = "return await agent('wait');";

#[tokio::test(start_paused = true)]
async fn the_heartbeat_stops_a_generation_whose_lease_was_taken_over() {
    let world = world().await;
    let (runner, mut started, mut cancelled) = HeldRunner::new();
    let mut setup = world.setup_under(HELD_CALL, Some(LEASE), TTL);
    setup.runner = runner;
    let execution = tokio::spawn(generation(setup));
    started.recv().await.expect("the call reached the agent");
    world.until_stored("agentStart").await;
    world.take_over(LEASE, "another").await;

    let outcome = tokio::time::timeout(Duration::from_secs(60), execution)
        .await
        .expect("the generation stops on its own")
        .expect("the generation task");
    assert!(outcome.lease_lost, "{outcome:?}");
    assert_eq!(outcome.status, RunStatus::Paused);
    assert_eq!(outcome.pause_reason, Some(PauseReason::Interrupted));
    let error = outcome.store_error.unwrap_or_default();
    assert!(error.starts_with("renewing the lease: "), "{error}");
    cancelled
        .recv()
        .await
        .expect("the waiting agent call was cancelled");
    assert!(
        world.rows().await.is_empty(),
        "the cancelled call wrote no row"
    );
    assert_eq!(world.event_kinds().await, ["agentStart"]);
    assert_eq!(world.lease().await.token, "another");
}

#[tokio::test(start_paused = true)]
async fn the_heartbeat_keeps_a_long_call_s_lease_held() {
    let world = world().await;
    let (runner, mut started, mut cancelled) = HeldRunner::new();
    let mut setup = world.setup_under(HELD_CALL, Some(LEASE), TTL);
    setup.runner = runner;
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let execution = tokio::spawn(run(setup, control_rx));
    started.recv().await.expect("the call reached the agent");
    // Acquired long ago: held again only once the heartbeat renewed it.
    let mut held = false;
    for _ in 0..100 {
        if TTL.judge(&world.lease().await, crate::util::now_ms()) == LeaseState::Held {
            held = true;
            break;
        }
        tokio::time::sleep(TICK).await;
    }
    assert!(held, "the heartbeat renewed the lease");
    assert_eq!(world.lease().await.token, LEASE);

    control_tx.send(Control::Stop).expect("the driver listens");
    let outcome = execution.await.expect("the generation task");
    cancelled.recv().await.expect("the stop cancelled the call");
    assert_eq!(outcome.status, RunStatus::Aborted, "{outcome:?}");
    assert!(!outcome.lease_lost);
    assert!(outcome.store_error.is_none(), "{outcome:?}");
    assert_eq!(
        world.rows().await.len(),
        1,
        "the stopped call's row was written"
    );
}

fn settled(index: u32) -> Settled {
    Settled {
        record: row(index, CallOrigin::Runner, u64::from(index)),
        supersedes: Vec::new(),
        reply: Some(VmReply::Resolve {
            call_id: u64::from(index),
            value: json!(index),
        }),
        journaled: true,
    }
}

#[tokio::test]
async fn calls_settled_together_are_written_together_with_the_events_before_them() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    driver
        .events
        .push("log", "root", json!({"message": "before"}));
    driver.settling = vec![settled(0), settled(1), settled(2)];
    assert!(driver.commit_settled().await);
    assert!(driver.settling.is_empty());
    let rows = world.rows().await;
    let settled: Vec<u64> = rows.iter().map(|r| r.settlement_ordinal).collect();
    assert_eq!(settled, [0, 1, 2]);
    assert_eq!(driver.settled_calls, 3);
    assert_eq!(world.event_kinds().await, ["log"]);
    // Nothing waiting: nothing to write, and not a failure.
    assert!(driver.commit_settled().await);
}

fn opened(index: u32) -> crate::model::OpenSession {
    crate::model::OpenSession {
        generation: 1,
        index,
        hash: format!("h{index}"),
        path: None,
        inputs_hash: None,
        session: json!({"sessionId": format!("s{index}")}),
        cwd: "/tmp".into(),
        opened_at: 1,
    }
}

#[tokio::test]
async fn a_live_call_s_session_is_journaled_at_the_tick_an_interrupted_one_s_with_its_row() {
    let world = world().await;
    let mut driver = world.driver(Some(LEASE));
    let journaled = |world: &World| {
        let store = world.store.clone();
        let run_id = world.run_id.clone();
        async move {
            let entries = store
                .open_sessions(&run_id)
                .await
                .expect("read the journal");
            entries
                .iter()
                .map(|entry| entry.index)
                .collect::<Vec<u32>>()
        }
    };
    // Call 0 ended on its own: nothing would reopen its session. Call 1 was cut off: its
    // session goes with its row. Call 2 is still live: it waits for the tick.
    driver.journaling = vec![opened(0), opened(1), opened(2)];
    let mut cut_off = settled(1);
    cut_off.record.aborted = true;
    driver.settling = vec![settled(0), cut_off];
    assert!(driver.commit_settled().await);
    assert_eq!(journaled(&world).await, [1]);
    assert_eq!(driver.journaling, [opened(2)]);
    // Another commit leaves a live call's session waiting too.
    driver.journaling.push(opened(3));
    driver.settling = vec![settled(4)];
    assert!(driver.commit_settled().await);
    assert_eq!(journaled(&world).await, [1]);
    driver.commit_journal().await;
    assert_eq!(journaled(&world).await, [1, 2, 3]);
    assert!(driver.journaling.is_empty());
}

#[tokio::test]
async fn a_refused_group_commit_answers_none_of_its_calls_and_halts_as_interrupted() {
    let world = world().await;
    let mut driver = world.driver(Some("a-lapsed-lease"));
    driver.settling = vec![settled(0), settled(1)];
    assert!(!driver.commit_settled().await);
    assert!(
        driver.settling.is_empty(),
        "the lost group is dropped, not retried"
    );
    assert!(world.rows().await.is_empty());
    assert!(driver.store_error.is_some());
    assert!(matches!(
        driver.halt,
        Some(Halt::Pause {
            reason: PauseReason::Interrupted,
            ..
        })
    ));
}

const PARALLEL_CALLS: &str = "const answers = await parallel([1, 2, 3, 4, 5, 6, 7, 8].map((n) => () => agent('p' + n)));\nreturn answers.length;";

#[tokio::test]
async fn parallel_calls_are_all_recorded_in_program_order_before_the_script_goes_on() {
    let world = world().await;
    let mut setup = world.setup(PARALLEL_CALLS, Some(LEASE));
    setup.limits.concurrency = 8;
    let outcome = generation(setup).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!(8)));
    let rows = world.rows().await;
    let mut indexes: Vec<u32> = rows.iter().map(|r| r.index).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..8).collect::<Vec<_>>());
    let mut ordinals: Vec<u64> = rows.iter().map(|r| r.settlement_ordinal).collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, (0..8).collect::<Vec<_>>());
    assert_eq!(outcome.next_settlement, 8);
}

#[tokio::test]
async fn parallel_calls_whose_rows_were_refused_are_never_answered() {
    let world = world().await;
    let mut setup = world.setup(PARALLEL_CALLS, Some("a-lapsed-lease"));
    setup.limits.concurrency = 8;
    let outcome = generation(setup).await;
    assert_eq!(outcome.status, RunStatus::Paused, "{outcome:?}");
    assert_eq!(outcome.pause_reason, Some(PauseReason::Interrupted));
    assert_eq!(outcome.result, None);
    assert!(world.rows().await.is_empty());
}

#[path = "commit_window_tests.rs"]
mod commit_window;
