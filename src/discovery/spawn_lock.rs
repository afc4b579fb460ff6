//! The per-family spawn lock `<fp>.spawn.lock` (daemon.md 1.3): a shim holds it while it
//! decides whether to start a daemon and until that daemon is ready, so N shims starting cold
//! make one daemon. It is a kernel `flock`: released when the holder exits or crashes, so there
//! is no stale-lock recovery to get wrong, and opened `O_CLOEXEC`, so the daemon the holder
//! spawns does not inherit it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Paths, Result, lock_file};

/// How long a shim waits for the spawn lock before giving up with a hint.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A held spawn lock; dropping it releases the lock.
#[derive(Debug)]
pub struct SpawnLock {
    /// The open file carrying the `flock`; closing it releases the lock.
    _file: std::fs::File,
    path: PathBuf,
}

impl SpawnLock {
    /// Takes the spawn lock of family `fingerprint`, retrying every 100 ms until `deadline`.
    /// After acquiring, the caller must re-probe: the previous holder may have started a
    /// daemon meanwhile.
    pub fn acquire(paths: &Paths, fingerprint: &str, deadline: Duration) -> Result<SpawnLock> {
        paths.ensure_dirs()?;
        let path = paths.spawn_lock(fingerprint);
        let file = lock_file(&path, deadline)?;
        Ok(SpawnLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::DiscoveryError;

    #[test]
    fn second_holder_waits_until_the_first_drops() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        let first = SpawnLock::acquire(&paths, "fp", DEFAULT_DEADLINE).unwrap();
        let started = std::time::Instant::now();
        let error = SpawnLock::acquire(&paths, "fp", Duration::from_millis(250)).unwrap_err();
        assert!(
            matches!(error, DiscoveryError::LockTimeout { .. }),
            "{error}"
        );
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(error.to_string().contains("fp.spawn.lock"), "{error}");
        // Another family is not affected.
        SpawnLock::acquire(&paths, "other", Duration::ZERO).unwrap();
        drop(first);
        SpawnLock::acquire(&paths, "fp", Duration::ZERO).unwrap();
    }

    #[test]
    fn waiter_gets_the_lock_once_released() {
        let temp = tempfile::tempdir().unwrap();
        let paths = std::sync::Arc::new(Paths::new(temp.path()));
        let first = SpawnLock::acquire(&paths, "fp", DEFAULT_DEADLINE).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let paths = paths.clone();
            std::thread::spawn(move || {
                tx.send(()).unwrap();
                SpawnLock::acquire(&paths, "fp", DEFAULT_DEADLINE).map(|_| ())
            })
        };
        rx.recv().unwrap();
        drop(first);
        waiter.join().unwrap().unwrap();
    }

    #[test]
    fn lock_file_is_private() {
        use std::os::unix::fs::MetadataExt;
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        let lock = SpawnLock::acquire(&paths, "fp", DEFAULT_DEADLINE).unwrap();
        assert_eq!(
            std::fs::metadata(lock.path()).unwrap().mode() & 0o777,
            0o600
        );
    }
}
