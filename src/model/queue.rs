//! A start waiting for a slot: the folder server's durable queue (docs/serve.md, "Queue").
//! A start that finds every slot taken, or others already waiting, is kept here under the run
//! id it will run as; whichever replica frees a slot first claims the oldest entry and starts
//! it. An entry leaves the queue when its run is admitted, or ends in it (canceled before it
//! started, or refused when it was started) and stays readable until housekeeping removes it.

use serde_json::Value;

use super::RunId;

/// A start kept in the queue, as its caller asked for it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedStart {
    /// The id the run gets when it starts, answered to the caller at once.
    pub run_id: RunId,
    /// The folder's workflow to run.
    pub workflow: String,
    /// The caller's owner key, stored with the run when it starts.
    pub caller: String,
    /// The workflow arguments (an object, at most the run API's argument cap).
    pub arguments: Value,
    /// When it was queued (the store's clock, Unix ms).
    pub enqueued_at: i64,
}

/// How an entry ended without becoming a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOutcome {
    /// Its owner canceled it before it started.
    Canceled,
    /// Starting it was refused (its workflow left the folder, preparation rejected it).
    Failed,
}

impl QueueOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueOutcome::Canceled => "canceled",
            QueueOutcome::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<QueueOutcome> {
        match text {
            "canceled" => Some(QueueOutcome::Canceled),
            "failed" => Some(QueueOutcome::Failed),
            _ => None,
        }
    }
}

/// Where an entry stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueuedState {
    /// Waiting: its 1-based place among the entries no replica has claimed (1 starts next).
    Waiting { position: u64 },
    /// Claimed by a replica that is starting it (or was, until its claim lapses).
    Starting,
    /// Ended without a run, with the reason.
    Ended {
        outcome: QueueOutcome,
        message: String,
    },
}

/// One entry and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedEntry {
    pub start: QueuedStart,
    pub state: QueuedState,
}

/// The answer to an enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// Kept, at this 1-based position.
    At(u64),
    /// Not kept: this many entries wait already, the bound.
    Full(u64),
}

/// The queue at a glance: what `/metrics` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Entries waiting (claimed ones included).
    pub length: u64,
    /// When the oldest waiting entry was queued (Unix ms).
    pub oldest_enqueued_at: Option<i64>,
}
