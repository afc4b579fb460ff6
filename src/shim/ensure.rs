//! Finding the daemon of this shim's env family, or starting one (daemon.md 1.3, 1.4 and 2
//! "Self-spawn"), through the one implementation `agentprism daemon start` also uses,
//! [`crate::daemon::spawn::ensure_daemon`]: a pointer is only a hint, its pid must still be
//! the same process and `/healthz` on its port must prove the recorded identity; a live but
//! slow daemon is waited for (≤10 s), never replaced; a cold start takes the family's spawn
//! lock, re-probes, spawns and waits (≤10 s) for a qualifying pointer. This module adds what
//! only the shim decides: which version of daemon it adopts.

use std::path::PathBuf;

use serde_json::Value;

use crate::daemon::spawn::{EnsureError, EnsureOptions, daemon_binary, ensure_daemon};
use crate::discovery::{Paths, compare_versions};
use crate::env::EnvSnapshot;

/// A daemon this shim may talk to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Daemon {
    pub pid: u32,
    pub instance_id: String,
    pub port: u16,
    pub version: String,
}

/// Finds or starts the daemon of one env family.
pub struct Ensurer {
    paths: Paths,
    fingerprint: String,
    /// This shim's version: daemons at least this new are adopted.
    version: String,
    options: EnsureOptions,
}

impl Ensurer {
    pub fn new(paths: Paths, fingerprint: String, version: &str, env: &EnvSnapshot) -> Ensurer {
        Ensurer {
            paths,
            fingerprint,
            version: version.to_owned(),
            options: EnsureOptions::new(daemon_binary(env)),
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The binary a cold start spawns.
    pub fn daemon_binary(&self) -> &PathBuf {
        &self.options.binary
    }

    /// Returns a qualifying daemon, starting one under the spawn lock if there is none.
    pub async fn ensure(&self) -> Result<Daemon, EnsureError> {
        let ready = ensure_daemon(&self.paths, &self.fingerprint, &self.options).await?;
        let version = ready
            .health
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or(&ready.record.version)
            .to_owned();
        // Succession hooks in here (daemon.md 1.8): a daemon older than this shim is adopted
        // as it is until the shim learns to start a `--supersede` successor for it.
        if compare_versions(&version, &self.version).is_lt() {
            eprintln!(
                "agentprism-workflow: adopting daemon pid {} of older version {version} (this \
                 shim is {})",
                ready.record.pid, self.version
            );
        }
        Ok(Daemon {
            pid: ready.record.pid,
            instance_id: ready.record.instance_id,
            port: ready.record.port,
            version,
        })
    }
}
