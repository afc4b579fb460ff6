//! How a generation is told to end early and begins to: stop, pause and single-call cancel
//! requests from its owner, and the halt that stops the script and starts nothing new.

use std::sync::atomic::Ordering;

use super::{Control, Driver, Halt};
use crate::model::{CallKind, PauseReason};

impl Driver {
    pub(super) fn on_control(&mut self, command: Control) {
        match command {
            Control::Stop => {
                if !matches!(self.halt, Some(Halt::Stop)) {
                    self.halt = None;
                    self.begin_halt(Halt::Stop);
                }
            }
            Control::Pause(reason) => {
                if self.halt.is_none() {
                    self.begin_halt(Halt::Pause {
                        reason,
                        auth_context: None,
                        reset_hint: None,
                        reset_at: None,
                        checkpoint_context: None,
                    });
                }
            }
            Control::CancelCall { index, reply } => {
                let live = self
                    .in_flight
                    .get(&index)
                    .filter(|call| call.kind == CallKind::Agent);
                if let Some(call) = live {
                    call.cancel.cancel();
                }
                let _ = reply.send(live.is_some());
            }
        }
    }

    /// Starts settling: the script stops, nothing new starts; stop and script ends also
    /// cancel running calls, pauses let them finish.
    pub(super) fn begin_halt(&mut self, halt: Halt) {
        if self.halt.is_some() {
            return;
        }
        self.gate_closed.store(true, Ordering::SeqCst);
        if let Some(vm) = self.vm.take() {
            // The VM thread exits at its next interrupt check or wait; `finish` joins it.
            vm.halt();
            self.halted_vm = Some(vm);
        }
        // A requested pause lets running calls finish and journal; an interrupted one (the
        // owner is going away) cancels them like a stop does.
        let cancel_running =
            !matches!(halt, Halt::Pause { reason, .. } if reason != PauseReason::Interrupted);
        for call in self.in_flight.values() {
            if cancel_running || !call.started {
                call.cancel.cancel();
            }
        }
        self.halt = Some(halt);
    }
}
