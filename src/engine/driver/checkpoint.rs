//! `checkpoint()` calls: the checks, then a replayed answer, an answer given with the resume,
//! or a pause that waits for one. The dry run answers every checkpoint with a default.

use serde_json::{Value, json};

use crate::engine::driver::options::CallPayload;
use crate::engine::driver::{Driver, DryCall, Halt};
use crate::engine::journal::{self, ReplayDecision};
use crate::engine::vm::VmReply;
use crate::model::{
    CallKind, CallOrigin, CallOutcome, CallRecord, CheckpointKind, CheckpointWait, PauseReason,
    ReplayInfo, Usage,
};

/// One checked `checkpoint()` call.
struct Checkpoint {
    call_id: u64,
    scope: String,
    index: u32,
    prompt: String,
    path: Option<String>,
    kind: CheckpointKind,
    /// The choices of a `select`.
    choices: Option<Vec<String>>,
    hash: String,
    label: String,
}

impl Driver {
    pub(super) async fn on_checkpoint(&mut self, call_id: u64, payload: Value) {
        let Some(checkpoint) = self.plan_checkpoint(call_id, payload) else {
            return;
        };
        if self.dry() {
            self.dry_checkpoint(&checkpoint);
            return;
        }
        let mut supersedes = Vec::new();
        if checkpoint.scope == "root" {
            match self.setup.pool.decide(
                CallKind::Checkpoint,
                checkpoint.path.as_deref(),
                &checkpoint.hash,
                None,
            ) {
                ReplayDecision::Replay { row, match_kind } => {
                    self.replay_checkpoint(&checkpoint, row, match_kind).await;
                    return;
                }
                ReplayDecision::Live(_) => {
                    supersedes = self.setup.pool.superseded_by_live(
                        CallKind::Checkpoint,
                        checkpoint.path.as_deref(),
                        &checkpoint.hash,
                    );
                }
            }
        }
        if let Some(answer) = self.take_answer(checkpoint.index, &checkpoint.hash) {
            self.events.push(
                "checkpointAnswered",
                &checkpoint.scope,
                json!({"callIndex": checkpoint.index, "source": "injected"}),
            );
            if checkpoint.scope != "root" {
                // A nested workflow's calls are not journaled: it asks again on every
                // resume, and the stored answer answers it again.
                self.reply(VmReply::Resolve {
                    call_id,
                    value: answer,
                });
                return;
            }
            let record =
                self.checkpoint_record(&checkpoint, answer.clone(), CallOrigin::Confirm, None);
            match self.record_call(&record, &supersedes).await {
                Ok(()) => self.reply(VmReply::Resolve {
                    call_id,
                    value: answer,
                }),
                Err(lost) => self.on_lost_write(lost),
            }
            return;
        }
        let context = CheckpointWait {
            call_index: checkpoint.index,
            hash: checkpoint.hash,
            prompt: checkpoint.prompt,
            kind: checkpoint.kind,
            choices: checkpoint.choices,
        };
        self.begin_halt(Halt::Pause {
            reason: PauseReason::CheckpointRequired,
            auth_context: None,
            reset_hint: None,
            reset_at: None,
            checkpoint_context: Some(context),
        });
    }

    /// Checks `maxAgents`, the kind and its choices, then numbers the call; `None` when it
    /// was rejected.
    fn plan_checkpoint(&mut self, call_id: u64, payload: Value) -> Option<Checkpoint> {
        let CallPayload {
            scope,
            prompt,
            path,
            options,
            ..
        } = CallPayload::parse(payload);
        if self.agent_count >= self.setup.limits.max_agents {
            self.reject(
                call_id,
                "AGENT_LIMIT_EXCEEDED",
                format!(
                    "the run reached its limit of {} calls (maxAgents)",
                    self.setup.limits.max_agents
                ),
                false,
            );
            return None;
        }
        // Counted before its options are checked, as agent calls are and as the prelude counts.
        self.agent_count += 1;
        let checked = check_question(&prompt).and_then(|()| checkpoint_options(&options));
        let (kind, choices) = match checked {
            Ok(checked) => checked,
            Err(message) => {
                self.reject(call_id, "SCRIPT_VALIDATION_ERROR", message, false);
                return None;
            }
        };
        let number = self.take_index(&scope);
        let listed = choices.as_ref().map(|choices| json!(choices));
        let hash = journal::checkpoint_hash(&prompt, kind.as_str(), listed.as_ref());
        let index = if scope == "root" {
            number
        } else {
            self.nested_checkpoint_key(&hash)
        };
        Some(Checkpoint {
            call_id,
            scope,
            index,
            prompt,
            path,
            kind,
            choices,
            hash,
            label: format!("checkpoint {number}"),
        })
    }

    /// A nested workflow's checkpoint is keyed as its agent calls are (from `NESTED_KEYS`
    /// up), so its answer is stored apart from the root's. Nested calls are numbered in the
    /// order they are made, which concurrent nested workflows may change from one generation
    /// to the next: a key holding another checkpoint's answer is passed over, so the answer
    /// given for this one can be stored.
    fn nested_checkpoint_key(&mut self, hash: &str) -> u32 {
        let mut key = self.take_nested_key();
        for _ in 0..self.setup.answers.len() {
            let taken = self
                .setup
                .answers
                .iter()
                .any(|answer| answer.call_index == key && answer.hash != hash);
            if !taken {
                break;
            }
            key = self.take_nested_key();
        }
        key
    }

    /// The dry run's answer: yes, an empty string, or the first choice.
    fn dry_checkpoint(&mut self, checkpoint: &Checkpoint) {
        self.dry_calls.push(DryCall {
            index: checkpoint.index,
            kind: CallKind::Checkpoint,
            label: checkpoint.label.clone(),
            phase: self.current_phase(&checkpoint.scope),
            route: Err("checkpoint".into()),
            mode: None,
            config_options: vec![],
            isolated: false,
            effort: None,
        });
        let answer = match checkpoint.kind {
            CheckpointKind::Confirm => Value::Bool(true),
            CheckpointKind::Input => Value::String(String::new()),
            CheckpointKind::Select => checkpoint
                .choices
                .as_ref()
                .and_then(|choices| choices.first())
                .map_or(Value::Null, |first| Value::String(first.clone())),
        };
        self.reply(VmReply::Resolve {
            call_id: checkpoint.call_id,
            value: answer,
        });
    }

    /// Answers the checkpoint from recorded row `row`, re-journaled as a replay of it.
    async fn replay_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        row: usize,
        match_kind: &'static str,
    ) {
        self.setup.pool.consume(row);
        let source = self.setup.pool.row(row).clone();
        let value = source.result.clone().unwrap_or(Value::Null);
        let record = self.checkpoint_record(
            checkpoint,
            value.clone(),
            CallOrigin::JournalReplay,
            Some(ReplayInfo {
                source_generation: source.generation,
                recorded_index: source.index,
                match_kind: match_kind.to_owned(),
            }),
        );
        let supersedes = vec![(source.generation, source.index)];
        match self.buffer_replay(record, supersedes).await {
            Ok(()) => self.reply(VmReply::Resolve {
                call_id: checkpoint.call_id,
                value,
            }),
            Err(lost) => self.on_lost_write(lost),
        }
    }

    /// A durable answer given with resume: by index, else the unused answer with this hash.
    fn take_answer(&mut self, index: u32, hash: &str) -> Option<Value> {
        let (slot, answer) = self
            .setup
            .answers
            .iter()
            .enumerate()
            .find(|(i, a)| !self.used_answers[*i] && a.call_index == index && a.hash == hash)
            .or_else(|| {
                self.setup
                    .answers
                    .iter()
                    .enumerate()
                    .find(|(i, a)| !self.used_answers[*i] && a.hash == hash)
            })
            .map(|(i, a)| (i, a.answer.clone()))?;
        self.used_answers[slot] = true;
        Some(answer)
    }

    fn checkpoint_record(
        &mut self,
        checkpoint: &Checkpoint,
        value: Value,
        origin: CallOrigin,
        replay: Option<ReplayInfo>,
    ) -> CallRecord {
        CallRecord {
            generation: self.setup.generation,
            index: checkpoint.index,
            kind: CallKind::Checkpoint,
            hash: checkpoint.hash.clone(),
            path: checkpoint.path.clone(),
            inputs_hash: None,
            label: Some(checkpoint.label.clone()),
            phase: None,
            outcome: CallOutcome::Result,
            origin,
            result: Some(value),
            error: None,
            aborted: false,
            attempts: 0,
            usage: Usage::default(),
            model_requested: None,
            model_resolved: None,
            backend_id: None,
            resolved_cwd: None,
            replay,
            session: None,
            changes: None,
            settlement_ordinal: self.next_settlement(),
            superseded_by: None,
            live_reason: None,
        }
    }
}

/// The options `checkpoint()` takes.
const CHECKPOINT_OPTIONS: &[&str] = &["kind", "choices"];

/// The longest checkpoint question: it is stored with the run and shown by every `status`
/// while the run waits for the answer.
pub(super) const QUESTION_MAX_BYTES: usize = 16 << 10;
/// The most choices a `select` offers, and the longest of them, for the same reason.
pub(super) const CHOICES_MAX: usize = 64;
pub(super) const CHOICE_MAX_BYTES: usize = 256;

fn check_question(question: &str) -> Result<(), String> {
    if question.len() > QUESTION_MAX_BYTES {
        return Err(format!(
            "checkpoint() question must be at most {QUESTION_MAX_BYTES} bytes, got {}",
            question.len()
        ));
    }
    Ok(())
}

/// Options of the TypeScript product that answer a checkpoint without a person: there are
/// none here, an unanswered checkpoint always pauses the run.
const AUTO_ANSWER_OPTIONS: &[&str] = &["headless", "default", "timeoutMs"];

/// `checkpoint()` options after their checks: the kind (`confirm` when left out) and the
/// choices of a `select`. Every option is known, `kind` is `confirm`, `input` or `select`,
/// and `choices`, a non-empty array of strings, goes with `select` only.
fn checkpoint_options(options: &Value) -> Result<(CheckpointKind, Option<Vec<String>>), String> {
    let Some(map) = options.as_object() else {
        return Err("checkpoint() options must be an object".into());
    };
    if let Some(unknown) = map
        .keys()
        .find(|key| !CHECKPOINT_OPTIONS.contains(&key.as_str()))
    {
        let known = CHECKPOINT_OPTIONS.join(", ");
        if AUTO_ANSWER_OPTIONS.contains(&unknown.as_str()) {
            return Err(format!(
                "checkpoint() option {unknown:?} is not known: there is no `headless` or \
                 `default` checkpoint option (nor `timeoutMs`); an unanswered checkpoint \
                 pauses the run until a resume answers it. Known options: {known}"
            ));
        }
        return Err(format!(
            "checkpoint() option {unknown:?} is not known; known options: {known}"
        ));
    }
    let kind = match map.get("kind").filter(|kind| !kind.is_null()) {
        None => CheckpointKind::Confirm,
        Some(given) => given
            .as_str()
            .and_then(CheckpointKind::parse)
            .ok_or_else(|| {
                format!(
                    "checkpoint() option kind must be \"confirm\", \"input\" or \"select\", got {given}"
                )
            })?,
    };
    let choices = map.get("choices").filter(|choices| !choices.is_null());
    if kind == CheckpointKind::Select {
        let listed: Option<Vec<String>> = choices
            .and_then(Value::as_array)
            .filter(|list| !list.is_empty())
            .and_then(|list| {
                list.iter()
                    .map(|choice| choice.as_str().map(str::to_owned))
                    .collect()
            });
        return match listed {
            Some(listed) if listed.len() > CHOICES_MAX => Err(format!(
                "checkpoint() option choices must have at most {CHOICES_MAX} items, got {}",
                listed.len()
            )),
            Some(listed) => match listed.iter().position(|c| c.len() > CHOICE_MAX_BYTES) {
                Some(at) => Err(format!(
                    "checkpoint() option choices[{at}] must be at most {CHOICE_MAX_BYTES} bytes, got {}",
                    listed[at].len()
                )),
                None => Ok((kind, Some(listed))),
            },
            None => Err(
                "checkpoint() kind \"select\" needs the option choices: a non-empty array of strings"
                    .into(),
            ),
        };
    }
    if choices.is_some() {
        return Err(format!(
            "checkpoint() option choices goes with kind \"select\" only, not {:?}",
            kind.as_str()
        ));
    }
    Ok((kind, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(options: Value) -> String {
        checkpoint_options(&options).expect_err("refused")
    }

    #[test]
    fn a_question_and_its_choices_are_taken_to_their_limits_and_refused_past_them() {
        assert_eq!(check_question(&"q".repeat(QUESTION_MAX_BYTES)), Ok(()));
        assert_eq!(
            check_question(&"q".repeat(QUESTION_MAX_BYTES + 1)),
            Err("checkpoint() question must be at most 16384 bytes, got 16385".into())
        );
        let select = |choices: Vec<String>| {
            checkpoint_options(&json!({"kind": "select", "choices": choices}))
        };
        let longest = "c".repeat(CHOICE_MAX_BYTES);
        assert!(select(vec![longest.clone(); CHOICES_MAX]).is_ok());
        assert_eq!(
            select(vec![longest; CHOICES_MAX + 1]),
            Err("checkpoint() option choices must have at most 64 items, got 65".into())
        );
        assert_eq!(
            select(vec!["a".into(), "c".repeat(CHOICE_MAX_BYTES + 1)]),
            Err("checkpoint() option choices[1] must be at most 256 bytes, got 257".into())
        );
    }

    #[test]
    fn a_checkpoint_kind_is_one_of_three_and_select_needs_string_choices() {
        assert_eq!(
            checkpoint_options(&json!({})).unwrap(),
            (CheckpointKind::Confirm, None)
        );
        assert_eq!(
            checkpoint_options(&json!({"kind": "input", "choices": null})).unwrap(),
            (CheckpointKind::Input, None)
        );
        assert_eq!(
            checkpoint_options(&json!({"kind": "select", "choices": ["a", "b"]})).unwrap(),
            (
                CheckpointKind::Select,
                Some(vec!["a".to_owned(), "b".to_owned()])
            )
        );
        assert_eq!(
            refused(json!({"kind": "pick"})),
            "checkpoint() option kind must be \"confirm\", \"input\" or \"select\", got \"pick\""
        );
        assert_eq!(
            refused(json!({"kind": 3})),
            "checkpoint() option kind must be \"confirm\", \"input\" or \"select\", got 3"
        );
        for choices in [json!(null), json!([]), json!(["a", 1]), json!("a")] {
            assert_eq!(
                refused(json!({"kind": "select", "choices": choices})),
                "checkpoint() kind \"select\" needs the option choices: a non-empty array of strings"
            );
        }
        assert_eq!(
            refused(json!({"choices": ["a"]})),
            "checkpoint() option choices goes with kind \"select\" only, not \"confirm\""
        );
    }

    #[test]
    fn unknown_checkpoint_options_are_refused_by_name() {
        assert_eq!(
            refused(json!({"kidn": "input"})),
            "checkpoint() option \"kidn\" is not known; known options: kind, choices"
        );
        for name in ["headless", "default", "timeoutMs"] {
            let message = refused(json!({ name: true }));
            assert!(
                message.starts_with(&format!("checkpoint() option \"{name}\" is not known: there is no `headless` or `default` checkpoint option")),
                "{message}"
            );
            assert!(
                message.ends_with("Known options: kind, choices"),
                "{message}"
            );
        }
    }
}
