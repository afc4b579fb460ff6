//! Retries through the engine, on a runner whose first turns fail: an `agentRetry` event per
//! failed attempt that is tried again, the attempts in status (live and settled), the wait
//! between attempts (`retryDelayMs`, a provider's `retry-after`), and a stop during the wait.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::budget::world_on;
use super::*;
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, BackendSpec, FailureKind, ProbeReport,
    SessionSpec, TurnOutput, TurnRequest,
};
use crate::util::sync::Lock;

/// Fails its first `failures` turns with an execution error (carrying `retry_after`), then
/// answers like the instant runner, or, when `hold` is set, waits until cancelled and says so
/// on `held`. Keeps when each turn began.
struct FlakyRunner {
    inner: Arc<InstantRunner>,
    failures: u32,
    retry_after: Option<Duration>,
    hold: Option<mpsc::UnboundedSender<()>>,
    turns: Arc<AtomicU32>,
    began: Arc<Mutex<Vec<Instant>>>,
}

struct FlakySession {
    inner: Box<dyn AgentSession>,
    failures: u32,
    retry_after: Option<Duration>,
    hold: Option<mpsc::UnboundedSender<()>>,
    turns: Arc<AtomicU32>,
    began: Arc<Mutex<Vec<Instant>>>,
}

impl FlakyRunner {
    fn new(failures: u32) -> FlakyRunner {
        FlakyRunner {
            inner: InstantRunner::new(),
            failures,
            retry_after: None,
            hold: None,
            turns: Arc::default(),
            began: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl AgentRunner for FlakyRunner {
    async fn open_session(
        &self,
        spec: SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        Ok(Box::new(FlakySession {
            inner: self.inner.open_session(spec, observer).await?,
            failures: self.failures,
            retry_after: self.retry_after,
            hold: self.hold.clone(),
            turns: self.turns.clone(),
            began: self.began.clone(),
        }))
    }

    async fn probe(&self, backend: &BackendSpec, model: Option<&str>, cwd: &Path) -> ProbeReport {
        self.inner.probe(backend, model, cwd).await
    }

    async fn shutdown(&self, deadline: Duration) {
        self.inner.shutdown(deadline).await;
    }
}

#[async_trait::async_trait]
impl AgentSession for FlakySession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        self.began.locked().push(Instant::now());
        let number = self.turns.fetch_add(1, Ordering::SeqCst) + 1;
        if number <= self.failures {
            let mut failure = AgentFailure::new(
                FailureKind::Execution,
                format!("upstream said no ({number})"),
            );
            failure.retry_after = self.retry_after;
            return Err(failure);
        }
        if let Some(hold) = &self.hold {
            let _ = hold.send(());
            cancel.cancelled().await;
            return Err(AgentFailure::new(FailureKind::Cancelled, "cancelled"));
        }
        self.inner.prompt(turn, cancel).await
    }

    fn session_ref(&self) -> Option<Value> {
        None
    }

    async fn close(self: Box<Self>) {}
}

fn one_call(options: &str) -> String {
    format!(
        "export const meta = {{ name: 'r', description: 'd', model: 'claude' }};\n\
         return await agent('hi', {{ label: 'flaky', {options} }});"
    )
}

/// Waits (within a deadline) until the run has an event of `kind`.
async fn event_seen(world: &World, run_id: &RunId, kind: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = world.event_types(run_id).await;
        if events.iter().any(|event| event["type"] == kind) {
            return;
        }
        assert!(Instant::now() < deadline, "no {kind} event: {events:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn every_retried_attempt_is_an_event_and_status_counts_the_attempts() {
    let runner = Arc::new(FlakyRunner::new(2));
    let world = world_on(runner.clone());
    let script = one_call("retries: 2, retryDelayMs: 0");
    let admission = world
        .start_with(&script, Default::default())
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let events = world.event_types(&admission.run_id).await;
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|event| event["type"].as_str())
        .filter(|kind| kind.starts_with("agent") && *kind != "agentProgress")
        .filter(|kind| *kind != "agentTranscript")
        .collect();
    assert_eq!(
        kinds,
        ["agentStart", "agentRetry", "agentRetry", "agentEnd"]
    );
    let retries: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "agentRetry")
        .collect();
    for (n, retry) in retries.iter().enumerate() {
        let attempt = n as u64 + 1;
        assert_eq!(retry["label"], "flaky");
        assert_eq!(retry["callIndex"], 0);
        assert_eq!(
            (&retry["attempt"], &retry["of"]),
            (&json!(attempt), &json!(3))
        );
        assert_eq!(retry["errorCode"], "AGENT_EXECUTION_ERROR");
        assert_eq!(
            retry["errorMessage"],
            format!("upstream said no ({attempt})")
        );
        assert_eq!(retry["waitMs"], 0);
    }
    let status = world.status_of(&admission.run_id).await;
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["calls"][0]["attempts"], 3, "{status}");
    assert_eq!(runner.turns.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_wait_between_attempts_is_the_calls_retry_delay() {
    let runner = Arc::new(FlakyRunner::new(2));
    let world = world_on(runner.clone());
    let script = one_call("retries: 2, retryDelayMs: 150");
    let admission = world
        .start_with(&script, Default::default())
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let began = runner.began.locked().clone();
    assert_eq!(began.len(), 3);
    for pair in began.windows(2) {
        let waited = pair[1] - pair[0];
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
    }
    let events = world.event_types(&admission.run_id).await;
    let waits: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "agentRetry")
        .map(|event| &event["waitMs"])
        .collect();
    assert_eq!(waits, [&json!(150), &json!(150)]);
}

#[tokio::test]
async fn a_providers_retry_after_is_waited_at_least() {
    let mut runner = FlakyRunner::new(1);
    runner.retry_after = Some(Duration::from_millis(200));
    let runner = Arc::new(runner);
    let world = world_on(runner.clone());
    let script = one_call("retries: 1, retryDelayMs: 0");
    let admission = world
        .start_with(&script, Default::default())
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let began = runner.began.locked().clone();
    assert_eq!(began.len(), 2);
    assert!(began[1] - began[0] >= Duration::from_millis(200));
    let events = world.event_types(&admission.run_id).await;
    let retry = events
        .iter()
        .find(|event| event["type"] == "agentRetry")
        .expect("a retry event");
    assert_eq!(retry["waitMs"], 200);
}

#[tokio::test]
async fn a_live_call_shows_its_attempt_and_a_stop_ends_the_backoff_at_once() {
    // The first attempt fails and the call waits ten minutes: a stop must not wait them out.
    let runner = Arc::new(FlakyRunner::new(1));
    let world = world_on(runner.clone());
    let script = one_call("retries: 1, retryDelayMs: 600000");
    let admission = world
        .start_with(&script, Default::default())
        .await
        .expect("admitted");
    let run_id = admission.run_id;
    event_seen(&world, &run_id, "agentRetry").await;
    let status = world.status_of(&run_id).await;
    assert_eq!(status["calls"][0]["status"], "running", "{status}");
    assert_eq!(status["calls"][0]["attempt"], 2, "{status}");
    let stopped_at = Instant::now();
    world
        .engine
        .stop(&run_id, None, &StatusQuery::default())
        .await
        .expect("stop");
    tokio::time::timeout(Duration::from_secs(10), world.engine.wait(&run_id))
        .await
        .expect("the run ends within seconds of the stop, not after the wait");
    assert!(stopped_at.elapsed() < Duration::from_secs(10));
    assert_eq!(runner.turns.load(Ordering::SeqCst), 1, "no second attempt");
    let status = world.status_of(&run_id).await;
    assert_ne!(status["status"], "running", "{status}");
}

#[tokio::test]
async fn a_live_call_in_its_second_attempt_says_so() {
    let (held, mut started) = mpsc::unbounded_channel();
    let mut runner = FlakyRunner::new(1);
    runner.hold = Some(held);
    let runner = Arc::new(runner);
    let world = world_on(runner.clone());
    let script = one_call("retries: 3, retryDelayMs: 0");
    let admission = world
        .start_with(&script, Default::default())
        .await
        .expect("admitted");
    let run_id = admission.run_id;
    tokio::time::timeout(Duration::from_secs(20), started.recv())
        .await
        .expect("the second attempt starts");
    // The retry reaches the driver on its own channel: wait for status to show it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = world.status_of(&run_id).await;
        if status["calls"][0]["attempt"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "attempt 2 never shown: {status}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let live = world.engine.live_status(&run_id).expect("live");
    assert_eq!(live.calls[0].attempt, 2);
    world
        .engine
        .stop(&run_id, None, &StatusQuery::default())
        .await
        .expect("stop");
    world.engine.wait(&run_id).await;
}
