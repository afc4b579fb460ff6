//! The crate's one lock policy: every `std::sync::Mutex` is taken through [`Lock::locked`],
//! which recovers a poisoned lock instead of failing.
//!
//! A mutex is poisoned when a thread panicked while holding it. That says nothing about the
//! data here: every guarded section in this crate changes its data in one step (an insert, a
//! remove, a field set, a swap), with no panic point between two writes that must agree, so
//! what the panicking thread left behind is a state some earlier section also left. Treating
//! poison as fatal would instead turn one panicked task into a panic in every later caller, and
//! take the whole daemon (every run, every session) down with it; skipping the work on poison
//! would silently lose a registration or a wake-up for the rest of the process's life. So a
//! poisoned lock is taken as it is. A new guarded section keeps that promise: no half-written
//! state across anything that can panic.
//!
//! `tokio::sync::Mutex` (held across `.await`) does not poison and is not covered here.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};

/// Takes a `Mutex` under the crate's lock policy (see the module comment).
pub(crate) trait Lock<T: ?Sized> {
    /// Locks, blocking until the lock is free; a lock poisoned by a panicking holder is
    /// recovered, not reported.
    fn locked(&self) -> MutexGuard<'_, T>;

    /// Locks if the lock is free now (`None` if another holder has it); a poisoned lock is
    /// recovered, not reported.
    fn try_locked(&self) -> Option<MutexGuard<'_, T>>;
}

impl<T: ?Sized> Lock<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_locked(&self) -> Option<MutexGuard<'_, T>> {
        match self.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// Waits on `condvar` with `guard`'s lock, under the same policy: a lock poisoned while this
/// thread waited is taken back as it is.
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_recovered_with_its_data() {
        let shared = std::sync::Arc::new(Mutex::new(vec![1]));
        let holder = std::sync::Arc::clone(&shared);
        let panicked = std::thread::spawn(move || {
            let mut guard = holder.locked();
            guard.push(2);
            panic!("a holder panics with the lock held");
        })
        .join();
        assert!(panicked.is_err(), "the holder thread panicked");
        assert!(shared.is_poisoned(), "the panic poisoned the lock");

        let mut guard = shared.locked();
        assert_eq!(*guard, vec![1, 2], "what the holder wrote is still there");
        guard.push(3);
        drop(guard);
        assert_eq!(*shared.locked(), vec![1, 2, 3], "the lock keeps working");
        assert_eq!(
            shared.try_locked().as_deref(),
            Some(&vec![1, 2, 3]),
            "a free poisoned lock is taken"
        );
        let held = shared.locked();
        assert!(shared.try_locked().is_none(), "a held lock is not taken");
        drop(held);
    }
}
