//! What this daemon answers on its control socket (daemon.md 1.9): `identify`, `shutdown`
//! and `run-control` for runs it executes (served by [`super::run_control`]). The listener in
//! [`crate::control`] has verified every request (peer uid, mac, clock, nonce, addressee)
//! before [`DaemonControl::handle`] sees it. `announce-successor` is checked and carried out by
//! [`super::succession`]; `drain-status` reports what a lame duck still waits for.
//!
//! [`forward_stop`] is the calling side: a process that finds a run executing in another
//! live daemon asks that daemon to stop it (daemon.md 1.10 step 5), or reports the stop as
//! pending when the owner cannot be reached (step 8).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::health::Health;
use crate::control::{ControlClient, ControlError, ControlHandler, Identity, Peer, kinds};
use crate::discovery::record::read_instance_records;
use crate::discovery::{DaemonRecord, Paths, RecordRead, RunControlKey, process_alive_as};
use crate::engine::Engine;
use crate::model::{Lease, RunId};

/// The daemon's [`ControlHandler`].
pub struct DaemonControl {
    pub health: Arc<Health>,
    pub engine: Engine,
    /// A verified `shutdown` is passed to the main loop, which exits as on SIGTERM.
    pub shutdown: mpsc::UnboundedSender<String>,
    pub succession: super::succession::Succession,
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
                super::run_control::serve(&self.engine, &self.health, &body).await
            }
            other => Err(ControlError::InvalidOperation(format!(
                "unknown kind {other:?}"
            ))),
        }
    }
}

/// The live daemon holding `lease`, if its instance record is found and names a control
/// socket: pid and process start time must both match (a recycled pid is a stranger).
pub fn lease_holder(paths: &Paths, lease: &Lease) -> Option<DaemonRecord> {
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
                && !record.control_url.is_empty()
                && process_alive_as(record).is_alive()
        })
}

/// Asks `owner` over its control socket to stop `run_id`, as operation `op`. `Ok` carries
/// the owner's answer; a `pending` control document when the owner could not be reached.
/// A refusal (`NOT_OWNER`, `UNKNOWN_RUN`, a bad key) is an error.
pub async fn forward_stop(
    key: &RunControlKey,
    owner: &DaemonRecord,
    run_id: &RunId,
    op: &str,
) -> Result<Value, String> {
    let socket = crate::control::socket_path_from_url(&owner.control_url)
        .ok_or_else(|| format!("daemon pid {} has no usable controlUrl", owner.pid))?;
    let from = Identity {
        instance_id: uuid::Uuid::new_v4().to_string(),
        pid: std::process::id(),
        version: super::version().to_owned(),
    };
    let client = ControlClient::new(key.clone(), from);
    let body = json!({"action": "stop", "runId": run_id.as_str()});
    match client
        .call(&socket, &owner.instance_id, kinds::RUN_CONTROL, op, &body)
        .await
    {
        Ok(answer) => Ok(answer),
        Err(error) if error.is_unreachable() => Ok(json!({
            "control": {
                "state": "pending",
                "operationId": op,
                "requestedAt": crate::util::iso_time(crate::util::now_ms()),
                "owner": {
                    "pid": owner.pid,
                    "instanceId": owner.instance_id,
                    "version": owner.version,
                    "lameDuck": false,
                    "controlProtocol": owner.control_protocol,
                },
                "reason": error.to_string(),
            }
        })),
        Err(error) => Err(format!(
            "daemon pid {} refused to stop run {run_id}: {error}",
            owner.pid
        )),
    }
}
