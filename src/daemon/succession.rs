//! Succession (daemon.md 1.8): how a newer daemon takes over its env family and how the older
//! one steps aside.
//!
//! The successor claims the family pointer with `--supersede` (allowed only over a live daemon
//! of a strictly lower version), then tells its predecessor over the signed control socket:
//! `announce-successor`. The predecessor believes the message only when the pointer really
//! names the announced instance, that instance is alive, and its version is not lower than its
//! own; then it turns lame duck and answers with the runs it still executes. A predecessor
//! that misses the message (its socket gone, the call timed out) notices the pointer anyway:
//! [`pointer_names_another`] runs every ≤2 s.
//!
//! Turning lame duck is a one-way door: [`Health::become_lame_duck`] only moves forward, and
//! the daemon writes `state:"superseded"` into its own instance record so that no reader (a
//! shim, `daemon status`, a daemon claiming the pointer) ever treats it as current again, even
//! after its successor exits and clears the pointer. A lame duck never writes the pointer.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::health::Health;
use super::probe::{self, Probe};
use crate::control::{ControlClient, ControlError, Identity, Peer, kinds};
use crate::discovery::pointer::read_pointer;
use crate::discovery::record::{read_record, write_own_record};
use crate::discovery::{
    DaemonRecord, DaemonState, Paths, RecordRead, RunControlKey, compare_versions, process_alive_as,
};
use crate::logging::notice;

/// What the control handler needs to accept an announcement.
pub(crate) struct Succession {
    pub paths: Paths,
    pub health: Arc<Health>,
    /// The main loop hears the successor's instance id here and does the rest of the
    /// transition (record, STATUS, session sweep).
    pub superseded: mpsc::UnboundedSender<String>,
}

impl Succession {
    /// Serves a verified `announce-successor {successor:{instanceId,pid,version,url,
    /// controlUrl}}`: checks the claim against the pointer and the process table, turns lame
    /// duck, and lists the runs this daemon still executes.
    pub(crate) fn accept(&self, from: &Peer, body: &Value) -> Result<Value, ControlError> {
        let successor = body
            .get("successor")
            .ok_or_else(|| ControlError::InvalidOperation("successor is required".into()))?;
        let field = |name: &str| {
            successor.get(name).and_then(Value::as_str).ok_or_else(|| {
                ControlError::InvalidOperation(format!("successor.{name} must be a string"))
            })
        };
        let instance_id = field("instanceId")?;
        let version = field("version")?;
        let pid = successor
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                ControlError::InvalidOperation("successor.pid must be a number".into())
            })?;
        if from.identity.instance_id != instance_id {
            return Err(ControlError::InvalidOperation(format!(
                "the announcement for {instance_id} was sent by {}",
                from.identity.instance_id
            )));
        }
        let own = &self.health.record;
        if instance_id == own.instance_id {
            return Err(ControlError::InvalidOperation(
                "a daemon cannot succeed itself".into(),
            ));
        }
        if compare_versions(version, &own.version).is_lt() {
            return Err(ControlError::InvalidOperation(format!(
                "successor version {version} is older than this daemon's {}",
                own.version
            )));
        }
        let pointer = read_pointer(&self.paths, &own.env_fingerprint).ok_or_else(|| {
            ControlError::InvalidOperation("the family pointer names no daemon".into())
        })?;
        if pointer.instance_id != instance_id || u64::from(pointer.pid) != pid {
            return Err(ControlError::InvalidOperation(format!(
                "the family pointer names instance {} (pid {}), not {instance_id}",
                pointer.instance_id, pointer.pid
            )));
        }
        if !process_alive_as(&pointer).is_alive() {
            return Err(ControlError::InvalidOperation(format!(
                "successor pid {pid} is not running"
            )));
        }
        let owned: Vec<String> = self
            .health
            .engine
            .live_run_ids()
            .iter()
            .map(|id| id.as_str().to_owned())
            .collect();
        if self.health.become_lame_duck(instance_id) {
            let _ = self.superseded.send(instance_id.to_owned());
        }
        Ok(json!({
            "outcome": "lame-duck",
            "ownedRuns": owned,
            "drain": self.health.drain_status(),
        }))
    }
}

/// The daemon the family pointer names when it is a verified live instance other than `own`:
/// the process is alive as recorded and its `/healthz` proves the identity.
pub(crate) async fn pointer_names_another(
    paths: &Paths,
    own: &DaemonRecord,
    key: Option<&RunControlKey>,
) -> Option<DaemonRecord> {
    let pointer = read_pointer(paths, &own.env_fingerprint)?;
    if pointer.same_instance(own) || !process_alive_as(&pointer).is_alive() {
        return None;
    }
    match probe::probe(&pointer, key, crate::discovery::healthz::HEALTHZ_TIMEOUT).await {
        Probe::Identified(_) => Some(pointer),
        _ => None,
    }
}

/// Writes the one-way door into this daemon's own record.
pub(crate) fn record_superseded(paths: &Paths, own: &DaemonRecord, successor: &str) {
    let mut record = own.clone();
    record.state = DaemonState::Superseded;
    record.superseded_by = Some(successor.to_owned());
    if let Err(error) = write_own_record(paths, &record) {
        notice(format_args!(
            "recording that instance {successor} superseded us: {error}"
        ));
    }
}

/// Whether the daemon a pointer names still holds it: alive as recorded and not superseded.
/// The liveness test every pointer claim of a daemon uses.
pub(crate) fn holds_pointer(paths: &Paths, record: &DaemonRecord) -> bool {
    process_alive_as(record).is_alive() && !is_superseded(paths, record)
}

/// Whether `record`'s daemon has stepped aside: its own instance record says `superseded`.
/// A pointer naming such a daemon may be replaced like a dead one.
pub(crate) fn is_superseded(paths: &Paths, record: &DaemonRecord) -> bool {
    match read_record(&paths.instance_record(record.pid)) {
        RecordRead::Ours(current) => {
            current.instance_id == record.instance_id && current.state == DaemonState::Superseded
        }
        _ => false,
    }
}

/// The successor's side: tells `predecessor` that `own` took over. Returns its answer, or
/// why it could not be reached (the predecessor then notices the pointer on its own).
pub(crate) async fn announce(
    key: &RunControlKey,
    own: &DaemonRecord,
    predecessor: &DaemonRecord,
) -> Result<Value, String> {
    let socket = crate::control::socket_path_from_url(&predecessor.control_url)
        .ok_or_else(|| format!("daemon pid {} has no control socket", predecessor.pid))?;
    let client = ControlClient::new(
        key.clone(),
        Identity {
            instance_id: own.instance_id.clone(),
            pid: own.pid,
            version: own.version.clone(),
        },
    );
    let body = json!({
        "successor": {
            "instanceId": own.instance_id,
            "pid": own.pid,
            "version": own.version,
            "url": own.url,
            "controlUrl": own.control_url,
        }
    });
    let op = uuid::Uuid::new_v4().to_string();
    client
        .call(
            &socket,
            &predecessor.instance_id,
            kinds::ANNOUNCE_SUCCESSOR,
            &op,
            &body,
        )
        .await
        .map_err(|error| error.to_string())
}
