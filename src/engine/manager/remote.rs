//! Reaching the process that holds a run's lease when it is not this one (daemon.md 1.10):
//! the [`OwnerRoute`] port the daemon layer fills in, and the errors of a forward that got
//! no answer.

use serde_json::{Value, json};

use crate::engine::manager::{Engine, EngineError, EngineResult, Rejected};
use crate::model::{Lease, RunId};
use crate::store::LeaseState;

/// How the engine reaches the process holding a run's lease when that is not this one
/// (daemon.md 1.10). The daemon layer implements it with the signed control socket; an
/// engine without one answers as if every other owner were unreachable.
#[async_trait::async_trait]
pub(crate) trait OwnerRoute: Send + Sync {
    /// Sends run-control `body` as operation `op` to the live holder of `lease` and returns
    /// its answer without `ok`.
    async fn forward(&self, lease: &Lease, op: &str, body: &Value) -> Result<Value, Unforwarded>;

    /// Whether `forceOwner` may end the holder of `lease`: a superseded daemon that still
    /// holds the lease and is not this process. Signals nothing; `Err` says why not. A stop
    /// asks this before it records anything, so that a refused `forceOwner` leaves no trace.
    async fn verify_superseded_owner(&self, lease: &Lease) -> Result<(), String>;

    /// Ends the holder of `lease` for `forceOwner`, checking again right before the signals
    /// what [`OwnerRoute::verify_superseded_owner`] checks (the identity may have changed
    /// since); SIGTERM, then SIGKILL. `Ok` once it is gone.
    async fn terminate_superseded_owner(&self, lease: &Lease) -> Result<(), String>;
}

/// Why a forwarded request got no answer from the owner.
#[derive(Clone, Debug)]
pub(crate) enum Unforwarded {
    /// The lease's process is gone (or is another process now).
    NoLiveOwner,
    /// The owner lives but could not be asked: a daemon whose control socket is gone or not
    /// answering, another key, no control protocol at all, or no route from this process.
    /// `owner` is the `control.owner` document.
    Unreachable { owner: Value, reason: String },
    /// The owner lives and is no daemon (no daemon record names it, as with a foreground
    /// `agentprism run`): it has no control socket, and learns of a stop or a cancel only
    /// from the intent the caller records, which a foreground run looks for several times a
    /// second. `owner` is the `control.owner` document.
    NoControlSocket { owner: Value, reason: String },
    /// The owner answered with a refusal: its wire code and message.
    Refused { code: String, message: String },
}

impl Engine {
    /// The lease of `run_id` when a live process other than this one holds it.
    pub(super) async fn foreign_owner(&self, run_id: &RunId) -> EngineResult<Option<Lease>> {
        let Some(lease) = self.inner.store.lease(run_id).await? else {
            return Ok(None);
        };
        let now = self.lease_now().await?;
        Ok(Some(lease).filter(|lease| self.held_elsewhere(lease, now)))
    }

    /// Whether `lease` belongs to another holder that still holds it, as the engine's
    /// [`crate::store::LeasePolicy`] judges (the daemon and the CLI: its process, pid + start time + boot
    /// id, is alive; serve replicas: not expired at `now`, the lease clock's time,
    /// [`Engine::lease_now`]). A lease of this engine's own owner id is never someone else's.
    pub(super) fn held_elsewhere(&self, lease: &Lease, now: i64) -> bool {
        lease.owner_id != self.inner.owner.owner_id
            && self.inner.config.lease_policy.judge(lease, now) == LeaseState::Held
    }

    pub(super) async fn forward(
        &self,
        lease: &Lease,
        op: &str,
        body: &Value,
    ) -> Result<Value, Unforwarded> {
        match self.inner.route.get() {
            Some(route) => route.forward(lease, op, body).await,
            None => Err(Unforwarded::Unreachable {
                owner: lease_owner(lease),
                reason: "this process has no control route to other processes".into(),
            }),
        }
    }

    /// Forwards an action that only a live owner can carry out (cancel-agent, pause,
    /// permissions, setup): every failure is an error, nothing is done in its place.
    pub(super) async fn forward_live(
        &self,
        run_id: &RunId,
        lease: &Lease,
        body: &Value,
    ) -> EngineResult<Value> {
        let action = body.get("action").and_then(Value::as_str).unwrap_or("");
        let op = uuid::Uuid::new_v4().to_string();
        self.forward(lease, &op, body)
            .await
            .map_err(|unforwarded| unforwarded_error(run_id, lease, action, unforwarded))
    }
}

/// `control.owner` for a lease holder known only by its lease.
pub(crate) fn lease_owner(lease: &Lease) -> Value {
    json!({
        "pid": lease.pid,
        "instanceId": lease.owner_id,
        "version": Value::Null,
        "lameDuck": false,
        "controlProtocol": 0,
    })
}

/// The error for an action only a live owner can carry out, when forwarding it failed.
pub(super) fn unforwarded_error(
    run_id: &RunId,
    lease: &Lease,
    action: &str,
    unforwarded: Unforwarded,
) -> EngineError {
    match unforwarded {
        Unforwarded::NoLiveOwner => EngineError::Rejected(Rejected::Owner(format!(
            "run {run_id} has no live owner process (pid {} has ended); {action} needs the process executing the run",
            lease.pid
        ))),
        Unforwarded::Unreachable { reason, .. } | Unforwarded::NoControlSocket { reason, .. } => {
            EngineError::Rejected(Rejected::Owner(format!(
                "run {run_id} is executing in process {}, which cannot be reached for {action}: {reason}",
                lease.pid
            )))
        }
        Unforwarded::Refused { code, message } => {
            if code == "UNKNOWN_RUN" {
                return EngineError::UnknownRun(run_id.clone());
            }
            EngineError::Rejected(Rejected::Owner(format!(
                "process {} executing run {run_id} refused {action}: {message}",
                lease.pid
            )))
        }
    }
}
