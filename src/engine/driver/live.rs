//! The marks the driver puts around its steps, so that status may keep an answer between
//! them: `LiveView::revision` is odd from a step's start to its end. The view itself is
//! status's (`engine/status/live.rs`); the driver writes it.

use super::Driver;
use crate::util::sync::Lock;

impl Driver {
    /// Marks the start of a step that may change what status shows (see
    /// [`LiveView::revision`](crate::engine::status::LiveView::revision)).
    pub(super) fn step_begins(&self) {
        self.setup.live.locked().revision |= 1;
    }

    /// Marks its end: the revision moves on to the next even value, and the events the
    /// step appended are announced to the run's watchers (one notice for all of them).
    pub(super) fn step_ends(&mut self) {
        {
            let mut view = self.setup.live.locked();
            view.revision = (view.revision | 1) + 1;
        }
        self.events.announce();
    }

    /// Runs a synchronous step between its marks.
    pub(super) fn step(&mut self, work: impl FnOnce(&mut Driver)) {
        self.step_begins();
        work(self);
        self.step_ends();
    }
}
