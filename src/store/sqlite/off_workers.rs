//! Where SQLite's blocking work runs. The process has one connection under a
//! `std::sync::Mutex`, and a write may wait for another process's write lock (a CLI run
//! beside the daemon) for up to [`BUSY_TIMEOUT`]. Waiting is what must not happen on a tokio
//! worker: one call waiting for the lock would hold the daemon's one worker, and every
//! other task with it, for seconds. So every wait goes off the workers, and the work that
//! does not wait stays where it is:
//!
//! - a call whose mutex is free runs inline on its worker: its statements and, every few
//!   MiB of WAL, the automatic checkpoint's writes and syncs, which is the bound of the
//!   time a store call holds a worker;
//! - a call that finds the mutex held waits for it, and then runs, under
//!   `tokio::task::block_in_place`, which hands the thread's worker role to another thread
//!   for the call's duration;
//! - when SQLite finds the database locked it calls [`wait_for_lock`], the connection's busy
//!   handler, which sleeps between retries under `block_in_place` too, so the call waits
//!   off the workers.
//!
//! `block_in_place` on every call would cost up to 14 µs of CPU each (a thread hand-off),
//! about 10% of an agent call's engine overhead; this way an uncontended call pays nothing.
//! Where `block_in_place` cannot run (a current-thread runtime, as `#[tokio::test]` builds,
//! or no runtime) the wait happens inline.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::sync::Lock;
use rusqlite::Connection;
use tokio::runtime::{Handle, RuntimeFlavor};

/// How long a call waits for another connection's lock before it fails as busy.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The pauses between retries of a locked database, in ms (SQLite's own default schedule),
/// the last one repeated.
const RETRY_PAUSES_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];

/// Runs `work` on the connection: inline when the mutex is free, else off the workers.
pub(super) fn with_connection<T>(
    connection: &Mutex<Connection>,
    work: impl FnOnce(&mut Connection) -> T,
) -> T {
    // A panic under the lock cannot leave a transaction half applied: a dropped rusqlite
    // `Transaction` rolls back. So the connection behind a poisoned lock is still sound.
    match connection.try_locked() {
        Some(mut guard) => work(&mut guard),
        None => run(|| work(&mut connection.locked())),
    }
}

/// Runs `work`, which may block, off the async workers where the runtime has them.
pub(super) fn run<T>(work: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The connection's busy handler: SQLite calls it with how many times it has already been
/// called for the lock it is waiting for, and retries while it answers `true`. It pauses off
/// the workers ([`run`]) and gives up once [`BUSY_TIMEOUT`] has passed.
pub(super) fn wait_for_lock() -> impl FnMut(i32) -> bool + Send + 'static {
    let mut started = Instant::now();
    move |count| {
        if count == 0 {
            started = Instant::now();
        }
        let Some(left) = BUSY_TIMEOUT.checked_sub(started.elapsed()) else {
            return false;
        };
        let index = usize::try_from(count).unwrap_or(usize::MAX);
        let pause = RETRY_PAUSES_MS[index.min(RETRY_PAUSES_MS.len() - 1)];
        run(|| std::thread::sleep(Duration::from_millis(pause).min(left)));
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use crate::store::contract::{RUN, lease, run_id, run_record};
    use crate::store::sqlite::DATABASE_FILE;
    use crate::store::{Leases, Runs, SqliteStore};

    /// Store writes that wait for another connection's write lock, more than the runtime's
    /// workers, must leave the runtime able to run a task: on the workers they would hold
    /// every one of them until the busy timeout (5 s). One worker, as the product runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn store_calls_waiting_for_the_write_lock_leave_the_workers_free() {
        let folder = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(folder.path()).unwrap());
        let id = run_id(RUN);
        store
            .create_run(&run_record(RUN, "/project", 1), &lease("holder"))
            .await
            .unwrap();
        // Another process's transaction holds the write lock.
        let other = rusqlite::Connection::open(folder.path().join(DATABASE_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();

        let entered = Arc::new(AtomicUsize::new(0));
        let writes: Vec<_> = (0..3)
            .map(|_| {
                let (store, id, entered) = (store.clone(), id.clone(), entered.clone());
                tokio::spawn(async move {
                    entered.fetch_add(1, Ordering::SeqCst);
                    store.renew_lease(&id, "holder", i64::MAX).await
                })
            })
            .collect();
        // The test body runs on its own thread, not a worker, so it can watch the workers.
        let deadline = Instant::now() + Duration::from_secs(3);
        while entered.load(Ordering::SeqCst) < writes.len() {
            assert!(
                Instant::now() < deadline,
                "only {} of {} store writes started: the workers are held",
                entered.load(Ordering::SeqCst),
                writes.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }

        // Watched by the clock of this thread: tokio's timers are driven by the workers.
        let probe = tokio::spawn(async {});
        let deadline = Instant::now() + Duration::from_secs(3);
        while !probe.is_finished() {
            assert!(
                Instant::now() < deadline,
                "no task ran while store writes waited for the write lock"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            writes.iter().all(|write| !write.is_finished()),
            "the writes wait for the lock the other connection holds"
        );
        other.execute_batch("COMMIT").unwrap();
        for write in writes {
            write
                .await
                .unwrap()
                .expect("the write lands once the lock is free");
        }
    }
}
