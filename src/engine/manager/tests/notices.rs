//! What the engine's notices let a follower of a run skip reading. `announces_changes` is
//! true while the run executes here with nothing waiting, false once a permission request
//! waits (its notice may have gone by) and once the run has settled; a `Settled` notice says
//! whether the record written holds a result.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{CHECKPOINT, ONE_CALL};
use crate::engine::events::RunNotice;
use crate::engine::instant::{HeldRunner, started_probe};
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, FailureKind, PermissionOption,
    PermissionRequest, ProbeReport, SessionSpec, TurnOutput, TurnRequest,
};
use crate::model::BackendSpec;

/// Each turn asks for a permission, then waits until cancelled.
struct AskingRunner;

struct AskingSession {
    observer: Arc<dyn AgentObserver>,
}

#[async_trait]
impl AgentRunner for AskingRunner {
    async fn open_session(
        &self,
        _spec: SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        Ok(Box::new(AskingSession { observer }))
    }

    async fn probe(
        &self,
        backend: &BackendSpec,
        model: Option<&str>,
        _cwd: &std::path::Path,
    ) -> ProbeReport {
        started_probe(backend, model)
    }

    async fn shutdown(&self, _deadline: Duration) {}
}

#[async_trait]
impl AgentSession for AskingSession {
    async fn prompt(
        &mut self,
        _turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        let request = PermissionRequest {
            run_id: String::new(),
            call_index: 0,
            label: String::new(),
            tool_call: json!({"title": "write a file"}),
            options: vec![PermissionOption {
                option_id: "allow".into(),
                name: "Allow".into(),
                kind: "allow_once".into(),
            }],
        };
        tokio::select! {
            _ = self.observer.request_permission(request) => {}
            () = cancel.cancelled() => {}
        }
        cancel.cancelled().await;
        Err(AgentFailure::new(FailureKind::Cancelled, "cancelled"))
    }

    fn session_ref(&self) -> Option<Value> {
        None
    }

    async fn close(self: Box<Self>) {}
}

#[tokio::test]
async fn a_run_executing_here_announces_its_changes_until_it_settles() {
    let (runner, mut started, _cancelled) = HeldRunner::new();
    let world = super::world_with(runner);
    let run_id = world
        .admit(ONE_CALL, Default::default())
        .await
        .expect("admitted")
        .run_id;
    started.recv().await.expect("the agent's turn started");
    assert!(world.engine.announces_changes(&run_id));
    world
        .engine
        .stop(&run_id, None, &crate::engine::StatusQuery::default())
        .await
        .expect("stopped");
    world.engine.wait(&run_id).await;
    assert!(!world.engine.announces_changes(&run_id));
}

#[tokio::test]
async fn a_waiting_permission_request_is_not_announced_again() {
    let world = super::world_with(Arc::new(AskingRunner));
    let mut notices = world.engine.subscribe_lifecycle();
    let run_id = world
        .admit(ONE_CALL, Default::default())
        .await
        .expect("admitted")
        .run_id;
    loop {
        match notices.recv().await.expect("a notice") {
            RunNotice::Permission { run_id: id, .. } if id == run_id => {
                break;
            }
            _ => {}
        }
    }
    assert!(!world.engine.announces_changes(&run_id));
}

#[tokio::test]
async fn a_settled_notice_says_whether_the_written_record_holds_a_result() {
    let world = super::world();
    let mut notices = world.engine.subscribe_lifecycle();
    for (script, status, result) in [(ONE_CALL, "completed", true), (CHECKPOINT, "paused", false)] {
        let run_id = world.settled(script).await;
        loop {
            match notices.recv().await.expect("a notice") {
                RunNotice::Settled {
                    run_id: id,
                    status: settled,
                    result: held,
                } if id == run_id => {
                    assert_eq!((settled.as_str(), held), (status, result), "{script}");
                    break;
                }
                _ => {}
            }
        }
    }
}
