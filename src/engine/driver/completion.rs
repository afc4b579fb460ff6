//! A finished agent task becomes its call row: the answer the script gets (a value, `null`,
//! a thrown error, or none when the call pauses the run or was interrupted), the events
//! that announce it, and the durable write that must come before the answer.

use serde_json::{Value, json};

use crate::engine::driver::durability::LostWrite;
use crate::engine::driver::isolation::Isolated;
use crate::engine::driver::task::TaskResult;
use crate::engine::driver::{Driver, Halt, InFlight, Settled};
use crate::engine::events::Fields;
use crate::engine::preview;
use crate::engine::vm::VmReply;
use crate::model::{CallError, CallOrigin, CallOutcome, CallRecord, Usage};
use crate::util::sync::Lock;

impl Driver {
    pub(super) async fn on_done(
        &mut self,
        index: u32,
        result: TaskResult,
        isolated: Option<Box<Isolated>>,
    ) {
        if let Some(call) = self.in_flight.get(&index)
            && call.progress.dirty
        {
            self.emit_progress(index, "activity");
        }
        let Some(call) = self.in_flight.remove(&index) else {
            return;
        };
        self.held_bytes -= call.held;
        // A call cancelled because the whole run is halting (stop, interrupt) did not end
        // on its own: it is an interrupted row that a resume re-runs, not a cancelled call.
        let result = match result {
            TaskResult::Null { code, .. } if self.halt.is_some() && code == "AGENT_CANCELLED" => {
                TaskResult::Interrupted
            }
            other => other,
        };
        self.setup.live.locked().calls.remove(&index);
        let mut record = self.settled_row(index, &call);
        let result = match result {
            TaskResult::Value {
                value,
                usage,
                attempts,
                session,
            } if call.outcome => TaskResult::Value {
                value: with_changes(value, isolated.as_deref()),
                usage,
                attempts,
                session,
            },
            other => other,
        };
        let (reply, pause) = settle(&mut record, call.call_id, result);
        if record.session.is_none() && record.origin == CallOrigin::Runner {
            // A call that ended without an answer still names the session it worked in.
            record.session.clone_from(&call.session.session);
        }
        if let Some(isolated) = isolated {
            record.resolved_cwd = Some(isolated.cwd.to_string_lossy().into_owned());
            record.changes = Some(isolated.changes);
        }
        record.settlement_ordinal = self.next_settlement();
        self.tally.settled(&record);
        let spent_before = self.setup.usage;
        self.announce_settled(&call, &record);
        self.budget_after_settled(&spent_before);
        let held_permit = call.started;
        self.settling.push(Settled {
            journaled: call.scope == "root" && !self.dry(),
            supersedes: call.supersedes,
            record,
            reply,
        });
        // A pausing call halts the generation only once its row (and every row settled
        // before it) is durable; a lost write halts it as interrupted instead.
        if let Some(pause) = pause
            && self.commit_settled().await
            && self.halt.is_none()
        {
            self.begin_halt(pause);
        }
        if held_permit {
            self.release_permit();
        }
    }

    /// After the loop took what was waiting: commits the settled group now, or leaves it
    /// waiting in the commit window while other calls are live and may settle into it. The
    /// window closes at its deadline, when the group is full, when no other call is live,
    /// when the generation halts, and before any other write of the generation.
    pub(super) async fn commit_or_wait(&mut self) {
        if self.settling.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        let waits = !self.dry()
            && self.halt.is_none()
            && !self.in_flight.is_empty()
            && self.settling.len() < super::GROUP_COMMIT_LIMIT
            && self.commit_due.is_none_or(|due| now < due);
        if waits {
            self.commit_due.get_or_insert(now + super::COMMIT_WINDOW);
        } else {
            self.commit_settled().await;
        }
    }

    /// The group commit: writes the rows of the calls settled since the last one in one
    /// transaction, with the sessions of those of them that were interrupted, then answers
    /// them in settlement order. The session of a call that settled on its own is never
    /// journaled: nothing would reopen it; the tick journals the sessions still live. When
    /// the write is refused none is answered (not durable, so a resume re-runs them) and
    /// the generation halts as interrupted; `false` then.
    pub(super) async fn commit_settled(&mut self) -> bool {
        match self.commit_group().await {
            Ok(()) => true,
            Err(lost) => {
                self.on_lost_write(lost);
                false
            }
        }
    }

    /// [`Driver::commit_settled`] without handling a refusal: for the writes that commit the
    /// waiting group before their own, so rows reach the store in settlement order.
    pub(super) async fn commit_group(&mut self) -> Result<(), LostWrite> {
        self.commit_due = None;
        if self.settling.is_empty() {
            return Ok(());
        }
        let group = std::mem::take(&mut self.settling);
        let budget = self.budget_reply();
        let rows: Vec<(&CallRecord, &[(u32, u32)])> = group
            .iter()
            .filter(|settled| settled.journaled)
            .map(|settled| (&settled.record, settled.supersedes.as_slice()))
            .collect();
        // The sessions of the group's calls leave the tick's queue: an interrupted call's
        // goes with its row (a resume reopens it), a call that settled on its own needs none.
        let mut sessions = Vec::new();
        for entry in std::mem::take(&mut self.journaling) {
            let settled = rows
                .iter()
                .find(|(row, _)| row.generation == entry.generation && row.index == entry.index);
            match settled {
                None => self.journaling.push(entry),
                Some((row, _)) if crate::engine::reopen::interrupted(row) => sessions.push(entry),
                Some(_) => {}
            }
        }
        let recorded = if rows.is_empty() && sessions.is_empty() {
            Ok(())
        } else {
            self.record_calls(&sessions, &rows).await
        };
        if let Err(lost) = recorded {
            // The script learns the spend all the same; no call is answered.
            if let Some(budget) = budget {
                self.reply(budget);
            }
            return Err(lost);
        }
        // The budget first, then the answers in settlement order, in one message.
        let replies: Vec<VmReply> = budget
            .into_iter()
            .chain(group.into_iter().filter_map(|settled| settled.reply))
            .collect();
        self.reply_all(replies);
        Ok(())
    }

    /// Journals the sessions opened since the last tick whose calls are still live: a
    /// session is on record at most one tick after it opened, unless its call settled first.
    pub(super) async fn commit_journal(&mut self) {
        if self.journaling.is_empty() || self.halt.is_some() {
            return;
        }
        if !self.commit_settled().await {
            return;
        }
        let sessions = std::mem::take(&mut self.journaling);
        if let Err(lost) = self.record_calls(&sessions, &[]).await {
            self.on_lost_write(lost);
        }
    }

    /// The row of a settled call before its result is filled in.
    fn settled_row(&self, index: u32, call: &InFlight) -> CallRecord {
        let route = call.route.as_ref();
        CallRecord {
            generation: self.setup.generation,
            index,
            kind: call.kind,
            hash: call.hash.clone(),
            path: call.path.clone(),
            inputs_hash: call.inputs_hash.clone(),
            label: Some(call.label.clone()),
            phase: call.phase.clone(),
            outcome: CallOutcome::Result,
            origin: if self.dry() {
                CallOrigin::Headless
            } else {
                CallOrigin::Runner
            },
            result: None,
            error: None,
            aborted: false,
            attempts: 0,
            usage: Usage::default(),
            model_requested: route.map(|r| r.spec.clone()),
            model_resolved: route.and_then(|r| r.model.clone()),
            backend_id: route.map(|r| r.backend.id.clone()),
            resolved_cwd: None,
            replay: None,
            session: None,
            changes: None,
            settlement_ordinal: 0,
            superseded_by: None,
            live_reason: call.live_reason,
        }
    }

    /// Adds the call's usage to the run's and announces it: `agentEnd`, `tokenUsage` when
    /// it used any, and `callRecord`.
    fn announce_settled(&mut self, call: &InFlight, record: &CallRecord) {
        self.setup.usage.add(&record.usage);
        let usage = self.setup.usage;
        self.setup.live.locked().usage = usage;
        if self.events.discards() {
            // The dry run: nobody reads these events, so neither they nor the preview are
            // built; the seqs still advance as they would.
            self.events.skip(2 + u64::from(!record.usage.is_zero()));
            return;
        }
        let shown = record.result.as_ref().map(|result| {
            let shown = preview::preview(result);
            json!({"preview": shown.preview, "redacted": shown.redacted, "truncated": shown.truncated})
        });
        let mut end = Fields::new()
            .fixed("callIndex", record.index.into())
            .text("label", &call.label)
            .value("result", shown.as_ref().unwrap_or(&Value::Null))
            .fixed_ref("usage", &record.usage);
        if let Some(error) = &record.error {
            end = end.text("errorCode", &error.code).text(
                "errorMessage",
                &crate::engine::status::error_message(&error.message),
            );
        }
        if let Some(changes) = &record.changes {
            end = end.value("changes", &changes_value(changes));
        }
        if let Some(path) = &call.session.path {
            end = end.value("session", &Value::Object(path.fields()));
        }
        self.events.push_fields("agentEnd", &call.scope, end);
        if !record.usage.is_zero() {
            self.events.push_fields(
                "tokenUsage",
                &call.scope,
                Fields::new().fixed_ref("usage", &usage),
            );
        }
        let call_record = Fields::new()
            .fixed("index", record.index.into())
            .fixed_ref("kind", &record.kind)
            .opt_text("label", record.label.as_deref())
            .fixed_ref("outcome", &record.outcome)
            .fixed_ref("origin", &record.origin)
            .fixed("attempts", record.attempts.into())
            .opt_text(
                "errorCode",
                record.error.as_ref().map(|error| error.code.as_str()),
            );
        self.events
            .push_fields("callRecord", &call.scope, call_record);
    }
}

/// What `isolated()` answers: the agent's answer and the call's changes with the diff. The
/// dry run, which makes no worktree, answers changes of nothing on no branch.
fn with_changes(value: Value, isolated: Option<&Isolated>) -> Value {
    let mut changes = match isolated {
        Some(isolated) => changes_value(&isolated.changes),
        None => changes_value(&crate::model::CallChanges {
            branch: None,
            base_commit: String::new(),
            head_commit: String::new(),
            files_changed: 0,
            insertions: 0,
            deletions: 0,
        }),
    };
    changes["diff"] = json!(isolated.and_then(|i| i.diff.clone()).unwrap_or_default());
    json!({ "result": value, "changes": changes })
}

/// A call's changes as events, status and `isolated()` show them.
pub(super) fn changes_value(changes: &crate::model::CallChanges) -> Value {
    serde_json::to_value(changes).unwrap_or(Value::Null)
}

/// Fills `record` from the task's result and says what the script gets (`None`: nothing
/// yet) and whether the call pauses the run.
fn settle(
    record: &mut CallRecord,
    call_id: u64,
    result: TaskResult,
) -> (Option<VmReply>, Option<Halt>) {
    let agent_error = |code: String, message: String, recoverable: bool| CallError {
        form: "agent".into(),
        code,
        message,
        recoverable,
    };
    match result {
        TaskResult::Value {
            value,
            usage,
            attempts,
            session,
        } => {
            record.result = Some(value.clone());
            record.usage = usage;
            record.attempts = attempts;
            record.session = session;
            (Some(VmReply::Resolve { call_id, value }), None)
        }
        TaskResult::Null {
            code,
            message,
            usage,
            attempts,
        } => {
            record.outcome = CallOutcome::Null;
            record.usage = usage;
            record.attempts = attempts;
            record.error = Some(agent_error(code, message, true));
            let value = Value::Null;
            (Some(VmReply::Resolve { call_id, value }), None)
        }
        TaskResult::Throw {
            code,
            message,
            usage,
            attempts,
        } => {
            record.outcome = CallOutcome::Error;
            record.usage = usage;
            record.attempts = attempts;
            record.error = Some(agent_error(code.clone(), message.clone(), false));
            let reply = VmReply::Reject {
                call_id,
                code,
                message,
                recoverable: false,
            };
            (Some(reply), None)
        }
        TaskResult::Pause {
            reason,
            code,
            message,
            auth_context,
            reset_hint,
            reset_at,
            session,
            usage,
            attempts,
        } => {
            record.outcome = CallOutcome::Error;
            record.usage = usage;
            record.attempts = attempts;
            record.session = session;
            record.error = Some(agent_error(code, message, false));
            let pause = Halt::Pause {
                reason,
                auth_context,
                reset_hint,
                reset_at,
                checkpoint_context: None,
            };
            (None, Some(pause))
        }
        TaskResult::Interrupted => {
            record.outcome = CallOutcome::Error;
            record.origin = CallOrigin::Engine;
            record.aborted = true;
            record.error = Some(CallError {
                form: "engine".into(),
                code: "WORKFLOW_ABORTED".into(),
                message: "interrupted before it finished".into(),
                recoverable: false,
            });
            (None, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AuthContext, PauseReason};

    fn row() -> CallRecord {
        CallRecord {
            label: Some("a".into()),
            attempts: 0,
            settlement_ordinal: 0,
            ..CallRecord::agent_row(1, 3, "h")
        }
    }

    fn usage(total: u64) -> Usage {
        Usage {
            total_tokens: total,
            ..Usage::default()
        }
    }

    #[test]
    fn a_value_is_recorded_and_handed_to_the_script() {
        let mut record = row();
        let result = TaskResult::Value {
            value: json!("done"),
            usage: usage(5),
            attempts: 2,
            session: Some(json!({"sessionId": "s"})),
        };
        let (reply, pause) = settle(&mut record, 7, result);
        assert!(matches!(reply, Some(VmReply::Resolve { call_id: 7, value }) if value == "done"));
        assert!(pause.is_none());
        assert_eq!(record.outcome, CallOutcome::Result);
        assert_eq!(record.result, Some(json!("done")));
        assert_eq!((record.attempts, record.usage.total_tokens), (2, 5));
        assert!(record.session.is_some() && record.error.is_none());
    }

    #[test]
    fn a_recoverable_failure_is_null_for_the_script_and_a_thrown_one_rejects() {
        let mut record = row();
        let null = TaskResult::Null {
            code: "AGENT_TIMEOUT".into(),
            message: "slow".into(),
            usage: usage(1),
            attempts: 3,
        };
        let (reply, pause) = settle(&mut record, 1, null);
        assert!(matches!(
            reply,
            Some(VmReply::Resolve {
                value: Value::Null,
                ..
            })
        ));
        assert!(pause.is_none());
        assert_eq!(record.outcome, CallOutcome::Null);
        let error = record.error.unwrap();
        assert_eq!(
            (error.code.as_str(), error.recoverable),
            ("AGENT_TIMEOUT", true)
        );

        let mut record = row();
        let throw = TaskResult::Throw {
            code: "AGENT_REFUSAL".into(),
            message: "no".into(),
            usage: usage(1),
            attempts: 1,
        };
        let (reply, _) = settle(&mut record, 2, throw);
        assert!(matches!(
            reply,
            Some(VmReply::Reject { call_id: 2, ref code, recoverable: false, .. }) if code == "AGENT_REFUSAL"
        ));
        assert_eq!(record.outcome, CallOutcome::Error);
        assert!(!record.error.unwrap().recoverable);
    }

    #[test]
    fn a_pausing_call_is_recorded_with_its_session_and_not_answered() {
        let mut record = row();
        let result = TaskResult::Pause {
            reason: PauseReason::AuthRequired,
            code: "AUTH_REQUIRED".into(),
            message: "log in".into(),
            auth_context: Some(AuthContext {
                backend_id: "claude".into(),
                methods: Vec::new(),
            }),
            reset_hint: None,
            reset_at: None,
            session: Some(json!({"sessionId": "s"})),
            usage: usage(0),
            attempts: 1,
        };
        let (reply, pause) = settle(&mut record, 1, result);
        assert!(reply.is_none());
        assert!(matches!(
            pause,
            Some(Halt::Pause {
                reason: PauseReason::AuthRequired,
                auth_context: Some(_),
                ..
            })
        ));
        assert_eq!(record.error.unwrap().code, "AUTH_REQUIRED");
        assert!(record.session.is_some());
    }

    #[test]
    fn an_interrupted_call_is_an_aborted_engine_row_that_gets_no_answer() {
        let mut record = row();
        let (reply, pause) = settle(&mut record, 1, TaskResult::Interrupted);
        assert!(reply.is_none() && pause.is_none());
        assert!(record.aborted);
        assert_eq!(record.origin, CallOrigin::Engine);
        let error = record.error.unwrap();
        assert_eq!(
            (error.form.as_str(), error.code.as_str()),
            ("engine", "WORKFLOW_ABORTED")
        );
    }
}
