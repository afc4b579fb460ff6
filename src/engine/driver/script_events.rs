//! What the script's thread sends its driver, handled: log lines and phases (each counted
//! against the generation's ceilings in `ceilings.rs`), calls handed to `agent_call.rs` and
//! `checkpoint.rs`, and the script's end; and the dry run's batching of queued events.

use serde_json::json;
use tokio::sync::mpsc::error::TryRecvError;

use super::vm::{VmEvent, VmReply};
use super::{Driver, HELD_BYTES, Halt, LINGER, VM_BATCH_LIMIT};
use crate::engine::vm::ScriptFailure;
use crate::util::sync::Lock;

impl Driver {
    /// The dry run's batch: takes the script's events that are already queued (at most
    /// [`VM_BATCH_LIMIT`]) before the loop looks at settled calls, so a `parallel` of calls,
    /// which the dry run answers at once, settles together and wakes the waiting VM thread
    /// once per batch, not once per call. Events keep their order. Live generations do not
    /// batch: there it made a run of the workflow tool's tests end later (not understood
    /// yet), so they keep the loop's order of one event, then the settled calls.
    pub(super) async fn more_vm_events(&mut self, vm_rx: &mut crate::engine::vm::VmEventReceiver) {
        for _ in 1..VM_BATCH_LIMIT {
            if self.halt.is_some() {
                return;
            }
            match vm_rx.try_recv() {
                Ok(event) => self.on_vm(event).await,
                // Empty, or closed: the loop's next `recv` reports a closed channel.
                Err(_) => return,
            }
        }
    }

    /// After one of the script's messages: the dry run's batch of those already queued, then
    /// the linger.
    pub(super) async fn after_vm_event(&mut self, vm_rx: &mut crate::engine::vm::VmEventReceiver) {
        if self.dry() {
            self.more_vm_events(vm_rx).await;
        }
        self.linger(vm_rx).await;
    }

    /// Waits briefly for the script's next message after an answer, when nothing else of
    /// the run is in flight, and takes what comes (at most [`VM_BATCH_LIMIT`] messages).
    ///
    /// A script that was just answered usually sends its next call within microseconds. The
    /// worker would otherwise park in the runtime's I/O driver and the script's message wake
    /// it again, which on this machine costs more CPU than the spin (docs/performance.md,
    /// "The floor"); a script that does not send within [`LINGER`] costs that much spinning
    /// once per answer. The spin takes the script's messages only, in their order; a
    /// control message that arrives meanwhile waits until the linger ends, at most
    /// [`VM_BATCH_LIMIT`] messages later (no call settles meanwhile: none is in flight).
    pub(super) async fn linger(&mut self, vm_rx: &mut crate::engine::vm::VmEventReceiver) {
        for _ in 0..VM_BATCH_LIMIT {
            if !self.answered.replace(false)
                || self.halt.is_some()
                || !self.in_flight.is_empty()
                || self.held_bytes >= HELD_BYTES
            {
                return;
            }
            let deadline = std::time::Instant::now() + LINGER;
            let event = loop {
                match vm_rx.try_recv() {
                    Ok(event) => break event,
                    Err(TryRecvError::Empty) if std::time::Instant::now() < deadline => {
                        std::hint::spin_loop();
                    }
                    // Nothing within the time, or closed: the loop's `recv` takes it from here.
                    Err(_) => return,
                }
            };
            self.on_vm(event).await;
            if self.dry() {
                self.more_vm_events(vm_rx).await;
            }
        }
    }

    /// Answers the script, unless the generation is halting: a halted script gets nothing.
    pub(super) fn reply(&self, reply: VmReply) {
        if self.halt.is_none()
            && let Some(vm) = &self.vm
        {
            vm.reply(reply);
            self.answered.set(true);
        }
    }

    /// Several answers in one message ([`VmReply::Batch`]), in order.
    pub(super) fn reply_all(&self, replies: Vec<VmReply>) {
        if self.halt.is_none()
            && let Some(vm) = &self.vm
        {
            vm.reply_all(replies);
            self.answered.set(true);
        }
    }

    pub(super) fn current_phase(&self, scope: &str) -> Option<String> {
        self.phase_by_scope
            .get(scope)
            .cloned()
            .unwrap_or_else(|| self.phase_by_scope.get("root").cloned().flatten())
    }

    pub(super) async fn on_vm(&mut self, event: VmEvent) {
        if !matches!(event, VmEvent::Finished(_)) {
            self.script_events += 1;
        }
        match event {
            VmEvent::Log { level, message } => {
                let line = match level.as_str() {
                    "warn" => format!("[warn] {message}"),
                    "error" => format!("[error] {message}"),
                    _ => message,
                };
                let over = self.logged.add(&line);
                self.events.push("log", "root", json!({"message": line}));
                if let Some(message) = over {
                    self.begin_halt(Halt::Failed(ScriptFailure::script_error(message)));
                }
            }
            VmEvent::Phase { scope, title } => {
                if scope == "root" && !self.phases_entered.contains_key(&title) {
                    let place = self.phases_entered.len();
                    self.phases_entered.insert(title.clone(), place);
                }
                self.phase_by_scope
                    .insert(scope.clone(), Some(title.clone()));
                if scope == "root" {
                    self.setup.live.locked().current_phase = Some(title.clone());
                    self.trace.phase(&title);
                }
                self.events.push("phase", &scope, json!({"title": title}));
                if let Some(message) = self.phases.add() {
                    self.begin_halt(Halt::Failed(ScriptFailure::script_error(message)));
                }
            }
            VmEvent::Call {
                call_id,
                kind,
                payload,
                weight,
            } => match kind.as_str() {
                "agent" => self.on_agent_call(call_id, payload, weight).await,
                "checkpoint" => self.on_checkpoint(call_id, payload).await,
                other => self.reply(VmReply::Reject {
                    call_id,
                    code: "SCRIPT_ERROR".into(),
                    message: format!("unknown host call {other}"),
                    recoverable: false,
                }),
            },
            VmEvent::Finished(result) => {
                self.vm = None;
                match result {
                    Ok(value) => self.begin_halt(Halt::Done(value)),
                    Err(failure) => self.begin_halt(Halt::Failed(failure)),
                }
            }
        }
    }
}
