//! Agent activity while a call runs: the `agentStart`, `agentNotice`, `permissionDenied`,
//! `agentRetry`, `agentProgress` and `agentTranscript` events, coalesced to at most one progress event a
//! second per call plus a heartbeat, and the live view's `latestActivity`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::engine::driver::Driver;
use crate::engine::driver::task::Activity;
use crate::engine::events::Fields;
use crate::engine::runner::AgentUpdate;
use crate::engine::status::LatestActivity;
use crate::util::sync::Lock;

/// `agentNotice` and `permissionDenied` events stored per call, each kind: an agent sends
/// these as fast as it likes, so past this many a call's further ones are counted, not stored.
pub(super) const MAX_NOTICES_PER_CALL: u32 = 1_000;

/// agentProgress is emitted at most once a second per call, plus a heartbeat.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);

/// What progress events have said of one call, and what is still to say.
#[derive(Default)]
pub(super) struct Progress {
    /// The transcript so far, as upserted entries (assistant text, thoughts, tool calls).
    transcript: Vec<TranscriptEntry>,
    /// `turnCount`: at least 1 once anything was reported.
    turn_count: u32,
    /// `observedEvents`: updates the agent sent.
    observed: u64,
    /// `coalescedEvents`: updates folded into a later progress event.
    coalesced: u64,
    /// The tail of the assistant's text, for `latestText`.
    latest_text: String,
    /// The title of the latest tool call, shown when there is no text.
    last_tool: Option<String>,
    /// When the last progress event went out, for the rate limit and the heartbeat.
    last_emit: Option<Instant>,
    /// Something changed since the last progress event.
    pub(super) dirty: bool,
    /// `executionStartSeq`: the sequence of the call's `agentStart`.
    start_seq: u64,
    /// `agentNotice` and `permissionDenied` events seen, for [`MAX_NOTICES_PER_CALL`].
    notices: u32,
    denials: u32,
}

/// Counts one more of a call's notices (or denials) in `seen`; whether it is still stored.
fn under_notice_ceiling(seen: &mut u32) -> bool {
    *seen = seen.saturating_add(1);
    *seen <= MAX_NOTICES_PER_CALL
}

/// One `agentTranscript` entry; `revision` grows with each change.
struct TranscriptEntry {
    /// `assistant` or `tool`.
    role: &'static str,
    /// `text`, `thought` or `tool_call`: chunks of one kind extend one entry.
    kind: &'static str,
    /// The entry's text, kept to its tail.
    text: String,
    /// A tool call's id, which later updates of it are matched by.
    tool_id: Option<String>,
    tool_name: Option<String>,
    revision: u32,
    /// Changed since it was last reported.
    dirty: bool,
}

/// Entries beyond this many are not reported (the progress events still are).
const MAX_TRANSCRIPT_ENTRIES: usize = 1000;

impl Progress {
    /// Folds one update into the transcript: chunks extend the current entry of their kind,
    /// tool calls are keyed by their id.
    fn record(&mut self, update: &AgentUpdate) {
        let (role, kind, text, tool) = match update {
            AgentUpdate::MessageChunk(text) => ("assistant", "text", text.as_str(), None),
            AgentUpdate::ThoughtChunk(text) => ("assistant", "thought", text.as_str(), None),
            AgentUpdate::ToolCall { id, title, .. } => {
                ("tool", "tool_call", title.as_str(), Some(id.as_str()))
            }
            _ => return,
        };
        let existing = match tool {
            Some(id) => self
                .transcript
                .iter()
                .position(|e| e.tool_id.as_deref() == Some(id)),
            None => self
                .transcript
                .last()
                .and_then(|last| (last.kind == kind).then_some(self.transcript.len() - 1)),
        };
        match existing {
            Some(position) => {
                let entry = &mut self.transcript[position];
                if tool.is_some() {
                    entry.text = text.to_owned();
                    entry.tool_name = Some(text.to_owned());
                } else {
                    entry.text.push_str(text);
                    if entry.text.len() > 2048 {
                        entry.text = tail_utf8(&entry.text, 512).to_owned();
                    }
                }
                entry.revision += 1;
                entry.dirty = true;
            }
            None if self.transcript.len() < MAX_TRANSCRIPT_ENTRIES => {
                self.transcript.push(TranscriptEntry {
                    role,
                    kind,
                    text: text.to_owned(),
                    tool_id: tool.map(str::to_owned),
                    tool_name: tool.map(|_| text.to_owned()),
                    revision: 1,
                    dirty: true,
                })
            }
            None => {}
        }
    }
}

impl Driver {
    pub(super) async fn on_activity(&mut self, activity: Activity) {
        match activity {
            Activity::Started(index) => self.on_started(index),
            Activity::Update(index, update) => self.on_update(index, update),
            Activity::PermissionDenied(index, denial, title) => {
                let Some(call) = self.in_flight.get_mut(&index) else {
                    return;
                };
                if !under_notice_ceiling(&mut call.progress.denials) {
                    return;
                }
                let fields = json!({"label": call.label, "callIndex": index, "tool": denial.tool,
                    "rule": denial.rule, "title": title});
                let scope = call.scope.clone();
                self.events.push("permissionDenied", &scope, fields);
            }
            Activity::Retry(index, notice) => {
                let Some(call) = self.in_flight.get_mut(&index) else {
                    return;
                };
                let fields = json!({"label": call.label, "callIndex": index,
                    "attempt": notice.attempt, "of": notice.of, "errorCode": notice.code,
                    "errorMessage": notice.message, "waitMs": notice.wait.as_millis() as u64});
                let scope = call.scope.clone();
                if let Some(entry) = self.setup.live.locked().calls.get_mut(&index) {
                    entry.attempt = notice.attempt + 1;
                }
                self.events.push("agentRetry", &scope, fields);
            }
            Activity::SessionOpened(index, opened) => {
                self.on_session_opened(index, *opened).await;
            }
            Activity::Done(index, result, isolated) => self.on_done(index, result, isolated).await,
        }
    }

    /// A call's agent took the prompt: its live state and its `agentStart` event.
    fn on_started(&mut self, index: u32) {
        let seq = self.events.last_seq() + 1;
        let Some(call) = self.in_flight.get_mut(&index) else {
            return;
        };
        call.started = true;
        call.progress.start_seq = seq;
        let route = call.route.as_ref();
        let fields = (!self.events.discards()).then(|| {
            let fields = Fields::new()
                .text("label", &call.label)
                .opt_text("phase", call.phase.as_deref())
                .opt_text("model", route.map(|r| r.spec.as_str()))
                .opt_text("backendId", route.map(|r| r.backend.id.as_str()))
                .fixed("callIndex", index.into())
                .opt_text("path", call.path.as_deref())
                .opt_text("liveReason", call.live_reason.map(|r| r.as_str()));
            // Only a call that asks to reopen a recorded session says which.
            match call.session.reopening.as_deref() {
                Some(session_id) => fields.text("reopening", session_id),
                None => fields,
            }
        });
        let scope = call.scope.clone();
        if let Some(entry) = self.setup.live.locked().calls.get_mut(&index) {
            entry.state = "running";
        }
        self.events
            .push_fields("agentStart", &scope, fields.unwrap_or_default());
    }

    /// One update of a call's agent: a slot wait, a notice, or progress.
    fn on_update(&mut self, index: u32, update: AgentUpdate) {
        let Some(call) = self.in_flight.get_mut(&index) else {
            return;
        };
        if let AgentUpdate::SlotWait(waiting) = update {
            // The backend's concurrency cap holds the call back (`acp::slots`): only
            // status shows it, and the call is running again once it has a slot.
            if let Some(entry) = self.setup.live.locked().calls.get_mut(&index) {
                entry.state = if waiting.is_some() {
                    "waiting"
                } else {
                    "running"
                };
                entry.waiting_for = waiting;
            }
            return;
        }
        if let AgentUpdate::Notice(message) = &update {
            // Adapter chatter (acp::chatter): an event of its own, never the answer.
            if !under_notice_ceiling(&mut call.progress.notices) {
                return;
            }
            let fields = json!({"label": call.label, "callIndex": index, "message": message});
            let scope = call.scope.clone();
            self.events.push("agentNotice", &scope, fields);
            return;
        }
        let progress = &mut call.progress;
        progress.observed += 1;
        progress.record(&update);
        match &update {
            AgentUpdate::MessageChunk(text) => {
                progress.latest_text.push_str(text);
                if progress.latest_text.len() > 1024 {
                    let cut = progress.latest_text.len() - 512;
                    let mut start = cut;
                    while !progress.latest_text.is_char_boundary(start) {
                        start += 1;
                    }
                    progress.latest_text.drain(..start);
                }
            }
            AgentUpdate::ToolCall { title, .. } => progress.last_tool = Some(title.clone()),
            _ => {}
        }
        let due = progress
            .last_emit
            .is_none_or(|at| at.elapsed() >= PROGRESS_INTERVAL);
        if due {
            self.emit_progress(index, "activity");
        } else {
            let progress = &mut self
                .in_flight
                .get_mut(&index)
                .expect("call is in flight")
                .progress;
            progress.coalesced += 1;
            progress.dirty = true;
        }
    }

    pub(super) fn emit_progress(&mut self, index: u32, cause: &str) {
        let Some(call) = self.in_flight.get_mut(&index) else {
            return;
        };
        let progress = &mut call.progress;
        progress.turn_count = progress.turn_count.max(1);
        progress.last_emit = Some(Instant::now());
        progress.dirty = false;
        let tail = tail_utf8(&progress.latest_text, 512);
        let mut fields = Fields::new()
            .fixed("callIndex", index.into())
            .fixed("executionStartSeq", progress.start_seq.into())
            .fixed("turnCount", progress.turn_count.into())
            .fixed("observedEvents", progress.observed.into())
            .fixed("coalescedEvents", progress.coalesced.into())
            .fixed_ref("cause", &cause);
        let (latest_text, last_tool) = if !tail.is_empty() {
            fields = fields.text("latestText", tail);
            (Some(tail.to_owned()), None)
        } else if let Some(tool) = &progress.last_tool {
            fields = fields.text("lastToolName", tool);
            (None, Some(tool.clone()))
        } else {
            (None, None)
        };
        let start_seq = progress.start_seq;
        let mut upserts = Vec::new();
        for (entry_index, entry) in progress
            .transcript
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.dirty)
        {
            entry.dirty = false;
            let mut shown = json!({"role": entry.role, "kind": entry.kind, "text": tail_utf8(&entry.text, 512)});
            if let Some(name) = &entry.tool_name {
                shown["toolName"] = Value::String(name.clone());
            }
            upserts.push(
                Fields::new()
                    .fixed("callIndex", index.into())
                    .fixed("executionStartSeq", start_seq.into())
                    .fixed("entryIndex", entry_index.into())
                    .fixed("revision", entry.revision.into())
                    .fixed_ref("operation", &"upsert")
                    .value("entry", &shown),
            );
        }
        let scope = call.scope.clone();
        let activity = LatestActivity {
            call_index: index,
            label: call.label.clone(),
            latest_text,
            last_tool_name: last_tool,
        };
        self.setup.live.locked().latest_activity = Some(activity);
        self.events.push_fields("agentProgress", &scope, fields);
        for upsert in upserts {
            self.events.push_fields("agentTranscript", &scope, upsert);
        }
    }

    pub(super) async fn on_tick(&mut self) {
        let due: Vec<u32> = self
            .in_flight
            .iter()
            .filter(|(_, call)| call.started)
            .filter(|(_, call)| {
                let progress = &call.progress;
                (progress.dirty
                    && progress
                        .last_emit
                        .is_none_or(|at| at.elapsed() >= PROGRESS_INTERVAL))
                    || (progress
                        .last_emit
                        .is_some_and(|at| at.elapsed() >= HEARTBEAT_INTERVAL)
                        && (!progress.latest_text.is_empty() || progress.last_tool.is_some()))
            })
            .map(|(index, _)| *index)
            .collect();
        if due.is_empty() && !self.events.has_pending() && self.journaling.is_empty() {
            // An idle tick changes nothing status shows: it is no step.
            return;
        }
        self.step_begins();
        for index in due {
            let heartbeat = self
                .in_flight
                .get(&index)
                .is_some_and(|c| !c.progress.dirty);
            self.emit_progress(index, if heartbeat { "heartbeat" } else { "activity" });
        }
        self.commit_journal().await;
        if self.events.has_pending()
            && self.halt.is_none()
            && let Err(lost) = self.flush_events().await
        {
            self.on_lost_write(lost);
        }
        self.step_ends();
    }
}

/// The last `max` bytes of `text` or fewer, cut at a character boundary.
pub(super) fn tail_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_extend_the_entry_of_their_kind_and_tool_calls_are_keyed_by_id() {
        let mut progress = Progress::default();
        progress.record(&AgentUpdate::MessageChunk("Hel".into()));
        progress.record(&AgentUpdate::MessageChunk("lo".into()));
        progress.record(&AgentUpdate::ThoughtChunk("hmm".into()));
        let tool = |title: &str| AgentUpdate::ToolCall {
            id: "t1".into(),
            title: title.into(),
            status: None,
        };
        progress.record(&tool("read"));
        progress.record(&tool("read src/main.rs"));
        let shown: Vec<(&str, &str, u32)> = progress
            .transcript
            .iter()
            .map(|e| (e.kind, e.text.as_str(), e.revision))
            .collect();
        assert_eq!(
            shown,
            [
                ("text", "Hello", 2),
                ("thought", "hmm", 1),
                ("tool_call", "read src/main.rs", 2)
            ]
        );
    }

    #[test]
    fn the_notice_at_the_ceiling_is_stored_and_the_next_is_not() {
        let mut seen = 0;
        for _ in 0..MAX_NOTICES_PER_CALL {
            assert!(under_notice_ceiling(&mut seen));
        }
        assert!(!under_notice_ceiling(&mut seen));
        assert!(!under_notice_ceiling(&mut seen));
        assert_eq!(seen, MAX_NOTICES_PER_CALL + 2);
    }

    #[test]
    fn a_tail_never_splits_a_character() {
        assert_eq!(tail_utf8("short", 10), "short");
        assert_eq!(tail_utf8("abcdef", 3), "def");
        // "é" is two bytes: a cut inside it moves past it.
        assert_eq!(tail_utf8("aéb", 2), "b");
    }
}
