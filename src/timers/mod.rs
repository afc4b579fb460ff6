//! Durable timers: a moment stored with a run at which the engine acts on it by itself. The
//! first use is the usage reset: a run paused on a provider's usage limit with a known reset
//! moment resumes itself then (plus a few seconds of jitter), as if its owner had called
//! `resume`. Nothing schedules a timer yet: such a pause waits for its owner, as its
//! `resetHint` says.
//!
//! Who does what, once a backend implements `TimerStore`:
//! - the adapter failure parser (`acp`) reads the reset moment out of a usage-limit error;
//! - the engine schedules a timer when it records such a pause, and cancels the run's timer
//!   on a manual `resume`, `stop` or edit;
//! - the store keeps timers with their run (`TimerStore`), so they survive restarts,
//!   succession and replica takeover;
//! - the process that serves runs (the daemon's tick, serve's sweep) asks the engine to fire
//!   what is due; the engine claims each timer before acting, and resumes the run as its
//!   owner.
//!
//! Invariants: a timer fires at most once, whichever process claims it first
//! (`TimerStore::claim` is a compare-and-set); a run has at most one timer of a kind, and
//! scheduling replaces it; automatic resumes of one run are capped
//! (`MAX_AUTOMATIC_RESUMES`) so a wrong parse cannot loop; a pause without a known reset
//! schedules nothing and says so; a run or a process may opt out, and then nothing is stored.
//!
//! This module imports nothing from the engine or any server, so a store backend can
//! implement its port without depending on what drives it.

use async_trait::async_trait;

/// How many times one run may be resumed by a timer.
pub const MAX_AUTOMATIC_RESUMES: u32 = 3;

/// Why a timer exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Resume a run paused on a usage limit once the provider's limit resets.
    UsageReset,
}

/// One stored timer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    pub run_id: String,
    pub kind: TimerKind,
    /// When it fires, in milliseconds since the epoch, jitter included.
    pub due_ms: u64,
    /// How many automatic resumes the run has had before this one.
    pub attempt: u32,
}

/// Why a timer operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// The store could not be read or written.
    #[error("timer store: {0}")]
    Store(String),
}

/// The durable half of timers, implemented by store backends beside their other per-concern
/// traits.
#[async_trait]
pub trait TimerStore: Send + Sync {
    /// Stores `timer`, replacing the run's timer of the same kind.
    async fn schedule(&self, timer: Timer) -> Result<(), TimerError>;

    /// Removes the run's timer of `kind`; answers whether there was one.
    async fn cancel(&self, run_id: &str, kind: TimerKind) -> Result<bool, TimerError>;

    /// The timers due at `now_ms`, earliest first, at most `limit` of them.
    async fn due(&self, now_ms: u64, limit: usize) -> Result<Vec<Timer>, TimerError>;

    /// Takes `timer` for this process if it is still stored as given: `true` means the caller
    /// fires it and nobody else will.
    async fn claim(&self, timer: &Timer) -> Result<bool, TimerError>;

    /// The earliest due moment of all stored timers, so the caller knows how long to sleep.
    async fn next_due(&self) -> Result<Option<u64>, TimerError>;
}
