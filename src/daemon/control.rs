//! What this daemon answers on its control socket (daemon.md 1.9): `identify`, `shutdown`
//! and `run-control` for runs it executes (served by [`super::run_control`]). The listener in
//! [`crate::control`] has verified every request (peer uid, mac, clock, nonce, addressee)
//! before [`DaemonControl::handle`] sees it. `announce-successor` is checked and carried out by
//! [`super::succession`]; `drain-status` reports what a lame duck still waits for.
//!
//! [`LeaseRoute`] is the calling side (daemon.md 1.10): the engine of any agentprism process
//! uses it to reach the live daemon holding a run's lease, and to end a superseded owner for
//! `forceOwner`.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::health::Health;
use crate::control::{
    ControlClient, ControlClientError, ControlError, ControlHandler, Identity, Peer, kinds,
};
use crate::discovery::liveness::identity_liveness;
use crate::discovery::process_table::{SignalTarget, Signalled, signal_target};
use crate::discovery::record::read_instance_records;
use crate::discovery::{
    DaemonRecord, DaemonState, Paths, RecordRead, RunControlKey, process_alive_as,
};
use crate::engine::manager::{OwnerRoute, Unforwarded};
use crate::engine::{Engine, EngineError};
use crate::model::{Lease, RunId};

/// The daemon's [`ControlHandler`].
pub(crate) struct DaemonControl {
    pub health: Arc<Health>,
    pub engine: Engine,
    /// A verified `shutdown` is passed to the main loop, which exits as on SIGTERM.
    pub shutdown: mpsc::UnboundedSender<String>,
    pub succession: super::succession::Succession,
    /// Where run-control work runs: the engine's runtime, not the front one that serves the
    /// socket (a setup answer can start an execution, which must live with the others).
    pub engine_runtime: tokio::runtime::Handle,
    /// The MCP face of the engine: `delete-run` goes through it so that its sessions get
    /// `resources/list_changed` and lose their subscriptions to the run.
    pub workflow: Arc<crate::tools::WorkflowServer>,
}

#[async_trait::async_trait]
impl ControlHandler for DaemonControl {
    async fn handle(
        &self,
        kind: &str,
        from: &Peer,
        op: &str,
        body: Value,
    ) -> Result<Value, ControlError> {
        match kind {
            kinds::IDENTIFY => {
                let record = &self.health.record;
                Ok(json!({
                    "instanceId": record.instance_id,
                    "pid": record.pid,
                    "version": record.version,
                    "port": record.port,
                    "envFingerprint": record.env_fingerprint,
                    "state": self.health.phase().as_str(),
                    "lameDuck": self.health.is_lame_duck(),
                    "activeRuns": self.engine.active_executions(),
                }))
            }
            kinds::ANNOUNCE_SUCCESSOR => self.succession.accept(from, &body),
            kinds::DRAIN_STATUS => Ok(self.health.drain_status()),
            kinds::SHUTDOWN => {
                let who = format!(
                    "instance {} (pid {}, op {op})",
                    from.identity.instance_id, from.identity.pid
                );
                self.shutdown
                    .send(who)
                    .map_err(|_| ControlError::Internal("already shutting down".into()))?;
                Ok(json!({"outcome": "shutting-down"}))
            }
            kinds::RUN_CONTROL => {
                let (engine, health, op) =
                    (self.engine.clone(), self.health.clone(), op.to_owned());
                self.engine_runtime
                    .spawn(async move { super::run_control::serve(&engine, &health, &op, &body).await })
                    .await
                    .map_err(|error| ControlError::Internal(error.to_string()))?
            }
            kinds::DELETE_RUN => {
                let run_id = body
                    .get("runId")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ControlError::InvalidOperation("runId is required".into()))
                    .and_then(|text| {
                        RunId::parse(text)
                            .map_err(|e| ControlError::InvalidOperation(format!("runId: {e}")))
                    })?;
                let workflow = self.workflow.clone();
                self.engine_runtime
                    .spawn(async move {
                        match workflow.delete_run(&run_id).await {
                            Ok(()) => Ok(json!({"outcome": "deleted", "runId": run_id})),
                            Err(EngineError::UnknownRun(run_id)) => {
                                Err(ControlError::UnknownRun(run_id.to_string()))
                            }
                            Err(EngineError::Rejected(message)) => {
                                Err(ControlError::InvalidOperation(message.to_string()))
                            }
                            Err(EngineError::Store(error)) => {
                                Err(ControlError::Internal(error.to_string()))
                            }
                        }
                    })
                    .await
                    .map_err(|error| ControlError::Internal(error.to_string()))?
            }
            other => Err(ControlError::InvalidOperation(format!(
                "unknown kind {other:?}"
            ))),
        }
    }
}

/// How `agentprism runs rm` went when it asked a daemon to delete the run.
#[derive(Debug)]
pub(crate) enum DaemonDelete {
    /// A live daemon deleted it and told its sessions.
    Deleted { pid: u32 },
    /// No live daemon of this user could be asked: delete here.
    NoDaemon,
    /// The daemon knows no such run.
    UnknownRun,
    /// A daemon refused (unknown run, a running run); its message.
    Refused(String),
}

/// Asks a live daemon of this user to delete `run_id` over the signed control socket, so
/// the MCP sessions it serves hear of it (`resources/list_changed`). Current daemons are
/// asked before superseded ones, the newest first; one that cannot be reached is skipped.
pub(crate) async fn delete_through_daemon(
    paths: &Paths,
    owner_id: &str,
    run_id: &RunId,
) -> DaemonDelete {
    let Ok(key) = RunControlKey::load(&paths.run_control_key()) else {
        return DaemonDelete::NoDaemon;
    };
    let scanned = paths.clone();
    let mut daemons: Vec<DaemonRecord> = tokio::task::spawn_blocking(move || {
        read_instance_records(&scanned)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|file| match file.read {
                RecordRead::Ours(record) => Some(record),
                _ => None,
            })
            .filter(|record| record.control_protocol >= 1 && process_alive_as(record).is_alive())
            .collect()
    })
    .await
    .unwrap_or_default();
    daemons.sort_by_key(|record| {
        (
            record.state == DaemonState::Superseded,
            std::cmp::Reverse(record.started_at),
        )
    });
    let client = ControlClient::new(
        key,
        Identity {
            instance_id: owner_id.to_owned(),
            pid: std::process::id(),
            version: super::version().to_owned(),
        },
    );
    let op = uuid::Uuid::new_v4().to_string();
    for record in daemons {
        let Some(socket) = crate::control::socket_path_from_url(&record.control_url) else {
            continue;
        };
        match client
            .call(
                &socket,
                &record.instance_id,
                kinds::DELETE_RUN,
                &op,
                &json!({"runId": run_id}),
            )
            .await
        {
            Ok(_) => return DaemonDelete::Deleted { pid: record.pid },
            Err(ControlClientError::Rejected(error)) => {
                // A daemon from before `delete-run` does not know the kind: try the next,
                // or delete here.
                if error.code() == crate::control::codes::INVALID_OPERATION
                    && error.message().starts_with("unknown kind")
                {
                    continue;
                }
                if error.code() == crate::control::codes::UNKNOWN_RUN {
                    return DaemonDelete::UnknownRun;
                }
                return DaemonDelete::Refused(error.message().to_owned());
            }
            Err(_) => continue,
        }
    }
    DaemonDelete::NoDaemon
}

/// The daemon record of the process holding `lease`, if one is live: pid and process start
/// time must match (a recycled pid is a stranger) and, for a daemon owner, its `instanceId`
/// must be the lease's `ownerId` (daemon.md 1.10 step 3).
pub(crate) fn lease_holder(paths: &Paths, lease: &Lease) -> Option<DaemonRecord> {
    read_instance_records(paths)
        .ok()?
        .into_iter()
        .filter_map(|file| match file.read {
            RecordRead::Ours(record) => Some(record),
            _ => None,
        })
        .find(|record| {
            record.pid == lease.pid
                && record.proc_start == lease.proc_start
                && record.instance_id == lease.owner_id
                && process_alive_as(record).is_alive()
        })
}

/// `control.owner` of a pending answer: who holds the lease, as far as we know.
pub(crate) fn owner_document(lease: &Lease, record: Option<&DaemonRecord>) -> Value {
    match record {
        Some(record) => json!({
            "pid": record.pid,
            "instanceId": record.instance_id,
            "version": record.version,
            "lameDuck": record.state == DaemonState::Superseded,
            "controlProtocol": record.control_protocol,
        }),
        None => crate::engine::manager::lease_owner(lease),
    }
}

/// How an engine reaches the other processes holding its runs' leases: their daemon
/// records under the persistence root, the run-control key, and the signed control socket.
/// Installed by the composition root (`crate::app::engine`) in every process, so the CLI,
/// the MCP tool and the daemon's own intent scanning route control the same way.
pub(crate) struct LeaseRoute {
    paths: Paths,
    /// Who we sign as: the engine's lease owner id and this process.
    from: Identity,
}

/// How long `forceOwner` waits for a superseded owner to exit after SIGTERM, then SIGKILL.
pub(crate) const FORCE_TERM_WAIT: Duration = Duration::from_secs(5);
pub(crate) const FORCE_KILL_WAIT: Duration = Duration::from_secs(2);

impl LeaseRoute {
    pub(crate) fn new(paths: Paths, owner_id: &str) -> LeaseRoute {
        LeaseRoute {
            paths,
            from: Identity {
                instance_id: owner_id.to_owned(),
                pid: std::process::id(),
                version: super::version().to_owned(),
            },
        }
    }
}

#[async_trait::async_trait]
impl OwnerRoute for LeaseRoute {
    async fn forward(&self, lease: &Lease, op: &str, body: &Value) -> Result<Value, Unforwarded> {
        if !identity_liveness(lease.pid, lease.proc_start, None).is_alive() {
            return Err(Unforwarded::NoLiveOwner);
        }
        let paths = self.paths.clone();
        let looked_up = lease.clone();
        let record = tokio::task::spawn_blocking(move || lease_holder(&paths, &looked_up))
            .await
            .ok()
            .flatten();
        let owner = owner_document(lease, record.as_ref());
        let unreachable = |reason: String| Unforwarded::Unreachable {
            owner: owner.clone(),
            reason,
        };
        let Some(record) = record else {
            return Err(Unforwarded::NoControlSocket {
                owner: owner.clone(),
                reason: format!(
                    "process {} holds the run and is no daemon with a control socket (no daemon record names owner {})",
                    lease.pid, lease.owner_id
                ),
            });
        };
        if record.control_protocol < 1 {
            return Err(unreachable(format!(
                "daemon pid {} speaks no control protocol",
                record.pid
            )));
        }
        let Some(socket) = crate::control::socket_path_from_url(&record.control_url) else {
            return Err(unreachable(format!(
                "daemon pid {} has no usable controlUrl",
                record.pid
            )));
        };
        let key = RunControlKey::load(&self.paths.run_control_key())
            .map_err(|error| unreachable(format!("the run-control key is unusable: {error}")))?;
        let client = ControlClient::new(key, self.from.clone());
        match client
            .call(&socket, &record.instance_id, kinds::RUN_CONTROL, op, body)
            .await
        {
            Ok(mut answer) => {
                if answer.get("owner").is_none() {
                    answer["owner"] = owner;
                }
                Ok(answer)
            }
            Err(ControlClientError::Rejected(error)) => Err(Unforwarded::Refused {
                code: error.code().to_owned(),
                message: error.message().to_owned(),
            }),
            Err(error) => Err(unreachable(error.to_string())),
        }
    }

    async fn verify_superseded_owner(&self, lease: &Lease) -> Result<(), String> {
        if lease.owner_id == self.from.instance_id || lease.pid == std::process::id() {
            return Err("the run's owner is this process".into());
        }
        let paths = self.paths.clone();
        let looked_up = lease.clone();
        let record = tokio::task::spawn_blocking(move || lease_holder(&paths, &looked_up))
            .await
            .ok()
            .flatten()
            .ok_or_else(|| {
                format!(
                    "process {} holding the run is no daemon (no live daemon record names instance {}), so it cannot be superseded; only a superseded daemon may be ended",
                    lease.pid, lease.owner_id
                )
            })?;
        if record.state != DaemonState::Superseded {
            return Err(format!(
                "daemon pid {} (instance {}) is not superseded; only a superseded owner may be ended",
                record.pid, record.instance_id
            ));
        }
        Ok(())
    }

    async fn terminate_superseded_owner(&self, lease: &Lease) -> Result<(), String> {
        let gone = || !identity_liveness(lease.pid, lease.proc_start, None).is_alive();
        if let Err(reason) = self.verify_superseded_owner(lease).await {
            // Gone since it was verified: there is nothing left to end.
            return if gone() { Ok(()) } else { Err(reason) };
        }
        let target = SignalTarget {
            pid: lease.pid,
            start_time: lease.proc_start,
        };
        for (signal, wait) in [
            (Signal::SIGTERM, FORCE_TERM_WAIT),
            (Signal::SIGKILL, FORCE_KILL_WAIT),
        ] {
            match signal_target(target, signal) {
                Ok(Signalled::AlreadyGone) => return Ok(()),
                Ok(_) => {}
                Err(error) => return Err(error.to_string()),
            }
            let deadline = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < deadline {
                if gone() {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if gone() {
            Ok(())
        } else {
            Err(format!("daemon pid {} survived SIGKILL", lease.pid))
        }
    }
}
