//! How shims and daemons find each other on one machine without trusting stale files: the
//! folder layout under `R/daemons/`, per-instance daemon records and the per-family pointer
//! (atomic writes, compare-and-swap under a kernel lock), the env fingerprint that splits
//! daemons into families, the per-family spawn lock, process identity (pid + start time +
//! boot id) and the process table that `daemon status` reconciles records against. Pure
//! filesystem and process code: the HTTP transport sends the `/healthz` probe that completes
//! identity and checks the answer with [`healthz::verify_identity`].

pub(crate) mod fingerprint;
pub mod healthz;
pub(crate) mod key;
pub mod liveness;
pub(crate) mod paths;
pub mod pointer;
pub mod process_table;
pub mod record;
pub(crate) mod spawn_lock;
pub(crate) mod token;
pub(crate) mod version;

use std::path::PathBuf;

pub use fingerprint::{current_fingerprint, fingerprint_of};
pub use key::{KeyError, RunControlKey, healthz_proof, verify_healthz_proof};
pub use liveness::{DeadReason, Liveness, ReuseReason, current_boot_id, process_alive_as};
pub use paths::Paths;
pub use pointer::{Claim, claim_pointer, clear_pointer_if_mine, remove_own_record};
pub use process_table::{DaemonProcess, Entry, ProcessScan, Role, reconcile, signal_verified};
pub use record::{DaemonRecord, DaemonState, RecordRead};
pub use spawn_lock::SpawnLock;
pub(crate) use version::compare_versions;

/// What went wrong while reading or writing discovery state. Callers branch on the kind: a
/// lock timeout is a startup error with a hint, a key error turns control off.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "timed out after {waited:?} waiting for the lock {} (another agentprism process holds \
         it; `agentprism daemon status` lists daemons, `lsof {}` shows the holder)",
        path.display(),
        path.display()
    )]
    LockTimeout {
        path: PathBuf,
        waited: std::time::Duration,
    },
    #[error("{} is not safe to use: {reason}", path.display())]
    UnsafeFolder { path: PathBuf, reason: String },
    #[error("no persistence root: set HOME or AGENTPRISM_PERSISTENCE_ROOT")]
    NoRoot,
}

impl DiscoveryError {
    pub(crate) fn io(
        doing: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        DiscoveryError::Io {
            doing,
            path: path.into(),
            source,
        }
    }
}

/// Result of discovery operations.
pub type Result<T, E = DiscoveryError> = std::result::Result<T, E>;

/// Takes an exclusive `flock` on `path` (created 0600 if missing), trying without blocking
/// every 100 ms until `deadline` has passed. The file is opened `O_CLOEXEC` (std's default),
/// so a spawned child never inherits the lock; the kernel drops it when the holder dies.
pub(crate) fn lock_file(
    path: &std::path::Path,
    deadline: std::time::Duration,
) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| DiscoveryError::io("open lock file", path, e))?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(DiscoveryError::io("lock", path, e));
            }
        }
        let waited = started.elapsed();
        if waited >= deadline {
            return Err(DiscoveryError::LockTimeout {
                path: path.to_path_buf(),
                waited,
            });
        }
        std::thread::sleep(LOCK_POLL.min(deadline - waited));
    }
}

/// How often a waiter retries a held lock (daemon.md 1.3).
pub(crate) const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(100);
