//! Test rows of the run model, shared by the unit tests that need a settled call: the fields a
//! test cares about are set with struct update syntax over [`CallRecord::agent_row`].

use super::{CallKind, CallOrigin, CallOutcome, CallRecord, Usage};

impl CallRecord {
    /// A settled agent call of `generation` at `index` with identity `hash`: a runner's result
    /// (no value), one attempt, no usage, settled in index order; every optional field unset.
    pub(crate) fn agent_row(generation: u32, index: u32, hash: &str) -> CallRecord {
        CallRecord {
            generation,
            index,
            kind: CallKind::Agent,
            hash: hash.into(),
            path: None,
            inputs_hash: None,
            label: None,
            phase: None,
            outcome: CallOutcome::Result,
            origin: CallOrigin::Runner,
            result: None,
            error: None,
            aborted: false,
            attempts: 1,
            usage: Usage::default(),
            model_requested: None,
            model_resolved: None,
            backend_id: None,
            resolved_cwd: None,
            replay: None,
            session: None,
            settlement_ordinal: u64::from(index),
            superseded_by: None,
            changes: None,
            live_reason: None,
        }
    }
}
