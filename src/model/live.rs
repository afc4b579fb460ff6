//! Why a call of a resumed generation ran live instead of replaying: the reason its row
//! records and status, events and the monitor show.

use serde::{Deserialize, Serialize};

/// Why a call of a resumed generation ran live: what its user reads in status and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LiveReason {
    /// The resume asked to redo it: its recorded answer was set aside.
    Rerun,
    /// No recorded call asks the same: its prompt changed (an answer it is built from
    /// changed, or the script did), or no earlier generation reached it.
    NotRecorded,
    /// A recorded call asks the same, but from another folder or with other options.
    InputsChanged,
    /// Its recorded call failed, answered nothing or answered blank text.
    FailedBefore,
    /// Several recorded calls ask the same and none is this call's alone.
    Ambiguous,
}

impl LiveReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveReason::Rerun => "rerun",
            LiveReason::NotRecorded => "notRecorded",
            LiveReason::InputsChanged => "inputsChanged",
            LiveReason::FailedBefore => "failedBefore",
            LiveReason::Ambiguous => "ambiguous",
        }
    }

    pub fn parse(text: &str) -> Option<LiveReason> {
        Some(match text {
            "rerun" => LiveReason::Rerun,
            "notRecorded" => LiveReason::NotRecorded,
            "inputsChanged" => LiveReason::InputsChanged,
            "failedBefore" => LiveReason::FailedBefore,
            "ambiguous" => LiveReason::Ambiguous,
            _ => return None,
        })
    }
}
