//! Claude Code channels: the run monitor's automatic messages sent as
//! `notifications/claude/channel` to the legacy sessions that named the run.
//!
//! Claude Code cannot render the panel, so the server pushes what the panel would have
//! injected (the same [`automatic_messages`], the same words and ids) to the session itself.
//! The rules (the seed's "Claude Code channels"):
//! - **Who.** A session follows a run once its own `run`, `resume` or `status` call named it
//!   and succeeded; nobody else's sessions ever see it. A restarted session follows again on
//!   its next `status`.
//! - **Nothing replayed.** Following through `status` first marks the messages that status
//!   answer already carried as seen; `run` and `resume` start from nothing (the run, or its
//!   new generation, has said nothing yet).
//! - **2025 era only.** Claude Code registers a channel only on a connection that negotiated
//!   a 2025 version (2.1.332 negotiates 2026-07-28 unless started with
//!   `MCP_PROTOCOL_NEGOTIATION=legacy`, and then takes channel notifications on no stream),
//!   and only a legacy session has a stream to push on, so 2026-07-28 requests never follow
//!   a run. `tests/it/host_answers.rs` pins both sides with the real Claude Code.
//! - **Once.** A message goes out only if it was not seen by this session's following and
//!   its claim in the sender's own receipt ledger (scope: the session) is the first, so two
//!   evaluations racing over the same event send it once. The sender does not claim in the
//!   panel's ledger: a host that renders the panel ignores channel notifications, and a claim
//!   there would keep its panel from ever injecting the message.
//!
//! When: on the engine's `Permission` and `Settled` notices for a followed run, after each
//! successful `workflow` call that names a followed run (a cold stop or a declined setup
//! settles without a notice), and right after a session starts following; after a call, not
//! for a run this process executes with no permission request waiting, whose next change
//! comes with a notice (`Engine::announces_changes`). Each evaluation
//! builds the run's status document once, through the `workflow` tool's own builder; after a
//! `status` call the answer is that document, so none is built. The calls are learnt from
//! the MCP core's answer hook ([`ChannelObserver`], a [`CallObserver`]); the tool itself
//! knows nothing of channels.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::engine::events::RunNotice;
use crate::mcp::handler::{NotificationHub, ServerEvent};
use crate::mcp::{AnsweredCall, CallObserver, PreparedResult, ToolAnswer};
use crate::model::RunId;
use crate::tools::session_runs::SessionRuns;
use crate::tools::workflow::TOOL_NAME;

use super::ledger::{ReceiptLedger, session_scope};
use super::messages::{AutoMessage, automatic_messages};
use crate::util::sync::Lock;

/// The notification method Claude Code listens on.
pub(crate) const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// The experimental capability that registers the channel.
pub(crate) const CHANNEL_CAPABILITY: &str = "claude/channel";
/// Runs one session follows at once; naming one more forgets the one named longest ago.
pub(crate) const MAX_FOLLOWED_RUNS: usize = 256;

/// Who follows which run, and what each of them has already seen.
pub(crate) struct Channels {
    /// Status documents come from here.
    engine: Engine,
    /// Where the notifications go out, addressed to one session each.
    hub: NotificationHub,
    /// What was sent, per session: the sender's own ledger, apart from the panel's.
    sent: ReceiptLedger,
    /// Evaluations started by a request run here, so the answer is not held up by them and
    /// the server's shutdown waits for them.
    tracker: TaskTracker,
    /// Per run, per session: the event ids already seen (pruned to the run's current
    /// messages on every evaluation, so it stays as small as they are).
    following: Mutex<SessionRuns<HashSet<String>>>,
}

impl Channels {
    pub(crate) fn new(engine: Engine, hub: NotificationHub, tracker: TaskTracker) -> Channels {
        Channels {
            engine,
            hub,
            sent: ReceiptLedger::default(),
            tracker,
            following: Mutex::new(SessionRuns::new(MAX_FOLLOWED_RUNS)),
        }
    }

    /// The sender's loop over engine notices; ends with `shutdown` or the engine.
    pub(crate) async fn run(
        self: Arc<Self>,
        mut notices: broadcast::Receiver<RunNotice>,
        shutdown: CancellationToken,
    ) {
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => break,
                notice = notices.recv() => notice,
            };
            match notice {
                Ok(RunNotice::Permission { run_id, .. } | RunNotice::Settled { run_id, .. }) => {
                    self.evaluate(&run_id).await;
                }
                Ok(RunNotice::Activity { .. } | RunNotice::Event { .. }) => {}
                // Missed notices: look at every followed run once.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let runs = self.following.locked().runs();
                    for run_id in runs {
                        self.evaluate(&run_id).await;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }

    /// `session` follows `run_id`, having seen `seen` already.
    fn follow(&self, session: &str, run_id: &RunId, seen: Vec<String>) {
        let mut following = self.following.locked();
        following.name(session, run_id).or_default().extend(seen);
    }

    fn is_followed(&self, run_id: &RunId) -> bool {
        let following = self.following.locked();
        following.has_run(run_id)
    }

    /// A legacy session ended: it follows nothing any more.
    pub(crate) fn session_closed(&self, session: &str) {
        let mut following = self.following.locked();
        following.session_closed(session);
    }

    /// Sends each follower of `run_id` the messages it has not seen and wins the claim of.
    pub(crate) async fn evaluate(&self, run_id: &RunId) {
        if !self.is_followed(run_id) {
            return;
        }
        let Ok(Ok(status)) = crate::tools::workflow::status_document(&self.engine, run_id).await
        else {
            return;
        };
        self.send_new(run_id, &status);
    }

    /// Sends each follower of `run_id` what `status` (the run's status document) shows that
    /// it has not seen and wins the claim of.
    fn send_new(&self, run_id: &RunId, status: &Value) {
        self.send_messages(run_id, &automatic_messages(status));
    }

    /// [`Channels::send_new`] for the messages of a status document already read.
    fn send_messages(&self, run_id: &RunId, messages: &[AutoMessage]) {
        let current: HashSet<&str> = messages.iter().map(|m| m.event_id.as_str()).collect();
        let mut following = self.following.locked();
        let Some(sessions) = following.sessions_mut(run_id) else {
            return;
        };
        for (session, seen) in sessions.iter_mut() {
            seen.retain(|id| current.contains(id.as_str()));
            for message in messages {
                if seen.insert(message.event_id.clone())
                    && self
                        .sent
                        .claim(&session_scope(session), run_id.as_str(), &message.event_id)
                {
                    self.hub.publish(ServerEvent::ToSession {
                        session_id: session.clone(),
                        method: CHANNEL_METHOD.to_owned(),
                        params: notification(run_id, message),
                    });
                }
            }
        }
    }
}

/// The `notifications/claude/channel` params: `{content, meta:{run_id, kind, status,
/// event_id}}`, every meta value a string (Claude Code shows them as tag attributes).
pub(crate) fn notification(run_id: &RunId, message: &AutoMessage) -> Value {
    json!({
        "content": message.content,
        "meta": {
            "run_id": run_id.as_str(),
            "kind": message.kind,
            "status": message.status,
            "event_id": message.event_id,
        },
    })
}

/// What the channels learn from the `workflow` tool's answers, told by the MCP core after
/// each call: which runs a session named, and a status document's new messages.
pub(crate) struct ChannelObserver {
    /// Who follows what; told of every successful answer.
    pub(crate) channels: Arc<Channels>,
    /// The messages of the kept status answers read last: a run polled between changes is
    /// answered with the same kept answer again and again, and its messages are a function
    /// of it.
    pub(crate) memo: MessageMemo,
}

/// How many kept answers [`MessageMemo`] remembers the messages of.
const MEMO_ENTRIES: usize = 16;

/// The automatic messages of recently read kept status answers, by answer. An entry holds
/// its answer weakly, so it keeps no document alive, and the allocation it points at (kept
/// by the weak reference) cannot be reused by another answer while the entry stands: equal
/// addresses are the same answer.
#[derive(Default)]
pub(crate) struct MessageMemo {
    entries: Mutex<MemoEntries>,
}

#[derive(Default)]
struct MemoEntries {
    /// At most [`MEMO_ENTRIES`].
    entries: Vec<(Weak<PreparedResult>, Arc<[AutoMessage]>)>,
    /// The entry the next new answer replaces once the list is full.
    next: usize,
}

impl MessageMemo {
    /// The messages of `document`, the status document of `answer`: remembered when the
    /// answer is a kept one (its text and value never change), else made afresh.
    fn messages(&self, answer: &ToolAnswer, document: &Value) -> Arc<[AutoMessage]> {
        let ToolAnswer::Prepared(prepared) = answer else {
            return automatic_messages(document).into();
        };
        let mut memo = self.entries.locked();
        if let Some((_, messages)) = memo
            .entries
            .iter()
            .find(|(kept, _)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(prepared)))
        {
            return messages.clone();
        }
        let messages: Arc<[AutoMessage]> = automatic_messages(document).into();
        let entry = (Arc::downgrade(prepared), messages.clone());
        if memo.entries.len() < MEMO_ENTRIES {
            memo.entries.push(entry);
        } else {
            let next = memo.next;
            memo.entries[next] = entry;
            memo.next = (next + 1) % MEMO_ENTRIES;
        }
        messages
    }
}

impl CallObserver for ChannelObserver {
    /// The answer is read in place: a kept status answer keeps its text.
    fn answered(&self, call: &AnsweredCall<'_>) {
        if call.tool != TOOL_NAME || call.task.is_some() {
            return;
        }
        let tool_answer = call.answer;
        let answer = tool_answer.value();
        if answer["isError"] == true {
            return;
        }
        let document = &answer["structuredContent"];
        let Some(run_id) = document["runId"]
            .as_str()
            .and_then(|id| RunId::parse(id).ok())
        else {
            return;
        };
        let action = call.action();
        // A status answer is the run's status document: its messages are read once, for
        // what the session has seen and for what the followers have not.
        let messages =
            (action == Some("status")).then(|| self.memo.messages(tool_answer, document));
        match (action, call.session, &messages) {
            (Some("run" | "resume"), Some(session), _) => {
                self.channels.follow(session, &run_id, Vec::new());
            }
            (Some("status"), Some(session), Some(messages)) => {
                let seen = messages
                    .iter()
                    .map(|message| message.event_id.clone())
                    .collect();
                self.channels.follow(session, &run_id, seen);
            }
            _ => {}
        }
        if !self.channels.is_followed(&run_id) {
            return;
        }
        if let Some(messages) = &messages {
            // The answer is the run's status document: no second one to build.
            self.channels.send_messages(&run_id, messages);
        } else if !self.channels.engine.announces_changes(&run_id) {
            // A run executing here with no permission request waiting has nothing to say
            // until its next notice, which the sender's loop evaluates: the session follows
            // the run already. Otherwise a notice may have gone by before it did.
            let channels = self.channels.clone();
            self.channels
                .tracker
                .spawn(async move { channels.evaluate(&run_id).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(status: &str) -> ToolAnswer {
        ToolAnswer::Prepared(Arc::new(PreparedResult::new(json!({
            "structuredContent": {"runId": "mabc-def", "workflowName": "w", "status": status},
        }))))
    }

    fn kinds(messages: &[AutoMessage]) -> Vec<(&str, &str)> {
        messages
            .iter()
            .map(|message| (message.kind, message.status.as_str()))
            .collect()
    }

    #[test]
    fn a_kept_answer_read_again_gives_the_messages_made_the_first_time() {
        let memo = MessageMemo::default();
        let read =
            |answer: &ToolAnswer| memo.messages(answer, &answer.value()["structuredContent"]);
        let completed = kept("completed");
        let first = read(&completed);
        assert_eq!(kinds(&first), [("terminal", "completed")]);
        assert!(Arc::ptr_eq(&first, &read(&completed)), "made again");
        // Another answer, even with the same text, and an answer that is not kept, are read.
        let twin = kept("completed");
        assert!(!Arc::ptr_eq(&first, &read(&twin)));
        let plain = ToolAnswer::Value(completed.value().clone());
        assert!(!Arc::ptr_eq(&read(&plain), &read(&plain)));
        // A new answer of the run is read for what it says, however many came between.
        for _ in 0..MEMO_ENTRIES + 1 {
            read(&kept("completed"));
        }
        let paused = kept("paused");
        assert_eq!(kinds(&read(&paused)), [("paused", "paused")]);
        assert_eq!(kinds(&read(&completed)), [("terminal", "completed")]);
    }
}
