//! Finding the daemon of this shim's env family, or starting one (daemon.md 1.3, 1.4, 1.8 and
//! 2 "Self-spawn"), through the one implementation `agentprism daemon start` also uses,
//! [`crate::daemon::spawn::ensure_daemon`]: a pointer is only a hint, its pid must still be
//! the same process and `/healthz` on its port must prove the recorded identity; a live but
//! slow daemon is waited for (≤10 s), never replaced; a cold start takes the family's spawn
//! lock, re-probes, spawns and waits (≤10 s) for a qualifying pointer.
//!
//! What only the shim decides is succession: a daemon at least as new as the shim is adopted.
//! An older one that speaks our control protocol is superseded: the shim starts `daemon run
//! --supersede` and moves to it, while the old daemon drains as a lame duck. An older one
//! without a usable control plane cannot be told to step aside, so while it has runs or
//! requests in flight the shim adopts it for now (the *bootstrap exception*) and the proxy
//! watches it ([`Daemon::bootstrap`]); once it is idle the shim supersedes it. Sessions alone
//! never defer, and the deferral ends after [`BOOTSTRAP_CAP`] whatever happens. Without a
//! usable run-control key nothing is superseded at all (fail closed).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::daemon::spawn::{
    EnsureError, EnsureOptions, ManagedStart, Ready, daemon_binary, ensure_daemon, ensure_successor,
};
use crate::discovery::record::CONTROL_PROTOCOL;
use crate::discovery::{DaemonRecord, Paths, RunControlKey, compare_versions};
use crate::env::EnvSnapshot;
use crate::util::sync::Lock;

/// How long an older daemon without control is adopted while it finishes its work, at most.
pub(crate) const BOOTSTRAP_CAP: Duration = Duration::from_secs(30 * 60);
/// How often the proxy re-probes a daemon adopted under the bootstrap exception.
pub(crate) const BOOTSTRAP_POLL: Duration = Duration::from_secs(1);

/// A daemon this shim may talk to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Daemon {
    pub pid: u32,
    pub instance_id: String,
    pub port: u16,
    pub version: String,
    /// Set when an older daemon without control was adopted only until its runs and
    /// requests are done: its record, for the proxy to watch.
    pub bootstrap: Option<Box<DaemonRecord>>,
}

/// Finds or starts the daemon of one env family.
pub(crate) struct Ensurer {
    paths: Paths,
    fingerprint: String,
    /// This shim's version: daemons at least this new are adopted.
    version: String,
    options: EnsureOptions,
    /// When the current bootstrap deferral began; it never lasts beyond [`BOOTSTRAP_CAP`].
    deferred_since: Mutex<Option<Instant>>,
}

impl Ensurer {
    pub(crate) fn new(
        paths: Paths,
        fingerprint: String,
        version: &str,
        env: &EnvSnapshot,
    ) -> Ensurer {
        let options = EnsureOptions {
            managed: ManagedStart::for_family(env, &fingerprint, version),
            ..EnsureOptions::new(daemon_binary(env))
        };
        Ensurer {
            paths,
            fingerprint,
            version: version.to_owned(),
            options,
            deferred_since: Mutex::new(None),
        }
    }

    pub(crate) fn paths(&self) -> &Paths {
        &self.paths
    }

    /// Returns the daemon new work goes to: the family's current daemon if it is at least as
    /// new as this shim, else a successor started for it (or, under the bootstrap exception,
    /// the older daemon for now). Starts a daemon under the spawn lock if there is none.
    pub(crate) async fn ensure(&self) -> Result<Daemon, EnsureError> {
        let ready = ensure_daemon(&self.paths, &self.fingerprint, &self.options).await?;
        let version = reported_version(&ready);
        if compare_versions(&version, &self.version).is_ge() {
            self.end_deferral();
            return Ok(daemon_of(ready, None));
        }
        // Older than us. Without a usable key nothing can prove a successor to it: adopt.
        if RunControlKey::load(&self.paths.run_control_key()).is_err() {
            eprintln!(
                "agentprism-workflow: adopting daemon pid {} of older version {version}: the \
                 run-control key is unusable, so it cannot be superseded",
                ready.record.pid
            );
            return Ok(daemon_of(ready, None));
        }
        if speaks_control(&ready) {
            return self.supersede(ready).await;
        }
        // The bootstrap exception: it cannot be told to step aside while it works.
        let busy =
            count(&ready.health, "activeRuns") > 0 || count(&ready.health, "inflightRequests") > 0;
        let since = *self
            .deferred_since
            .locked()
            .get_or_insert_with(Instant::now);
        if busy && since.elapsed() < BOOTSTRAP_CAP {
            eprintln!(
                "agentprism-workflow: daemon pid {} (version {version}, no control plane) still \
                 has work; using it until it is idle, then moving to version {}",
                ready.record.pid, self.version
            );
            let record = Box::new(ready.record.clone());
            return Ok(daemon_of(ready, Some(record)));
        }
        self.supersede(ready).await
    }

    /// Starts (or finds) a daemon of at least our version over `older`. If none comes up (the
    /// `agentprism` binary beside the shim is older than the shim, say, so its daemon cannot
    /// supersede), the older daemon goes on serving: a working old daemon beats no daemon.
    async fn supersede(&self, older: Ready) -> Result<Daemon, EnsureError> {
        self.end_deferral();
        match ensure_successor(&self.paths, &self.fingerprint, &self.options, &self.version).await {
            Ok(successor) => {
                eprintln!(
                    "agentprism-workflow: daemon pid {} (version {}) superseded daemon pid {} \
                     (version {})",
                    successor.record.pid,
                    reported_version(&successor),
                    older.record.pid,
                    reported_version(&older)
                );
                Ok(daemon_of(successor, None))
            }
            Err(error) => {
                eprintln!(
                    "agentprism-workflow: could not start a daemon of version {} to supersede \
                     daemon pid {} (version {}); using that one. {error}",
                    self.version,
                    older.record.pid,
                    reported_version(&older)
                );
                Ok(daemon_of(older, None))
            }
        }
    }

    fn end_deferral(&self) {
        *self.deferred_since.locked() = None;
    }
}

/// The version a daemon reports on `/healthz`, else the one on its record.
fn reported_version(ready: &Ready) -> String {
    ready
        .health
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or(&ready.record.version)
        .to_owned()
}

/// Whether the daemon can be told to step aside: it serves a control protocol we speak.
fn speaks_control(ready: &Ready) -> bool {
    let protocol = ready
        .health
        .get("controlProtocol")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let available = ready
        .health
        .get("controlAvailable")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    protocol == u64::from(CONTROL_PROTOCOL) && available && !ready.record.control_url.is_empty()
}

fn count(health: &Value, field: &str) -> u64 {
    health.get(field).and_then(Value::as_u64).unwrap_or(0)
}

fn daemon_of(ready: Ready, bootstrap: Option<Box<DaemonRecord>>) -> Daemon {
    let version = reported_version(&ready);
    Daemon {
        pid: ready.record.pid,
        instance_id: ready.record.instance_id,
        port: ready.record.port,
        version,
        bootstrap,
    }
}
