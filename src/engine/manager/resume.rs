//! Resume: a paused, aborted or failed run continues under the same id, with checkpoint
//! answers, a revised script, and exact retries by operation id.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::budget::SpendLimits;
use crate::engine::approval;
use crate::engine::journal::ReplayPool;
use crate::engine::manager::error::corrupt;
use crate::engine::manager::{
    Admission, Engine, EngineError, EngineResult, Rejected, ResumeRequest,
};
use crate::engine::prepare::{self, Rejection};
use crate::engine::rerun::{self, RerunTarget};
use crate::model::{
    AutoResume, CallRecord, CheckpointAnswer, CheckpointKind, CheckpointWait, Lease,
    MAX_GENERATION, OperationReceipt, RunId, RunRecord, RunStatus, ScriptRevision, ScriptSource,
};
use crate::store::{Fence, IntentScope, ScriptChange};
use crate::util::{now_ms, sha256_hex};

impl Engine {
    /// Continues a paused, aborted or failed run under the same id.
    pub async fn resume(&self, request: ResumeRequest) -> EngineResult<Admission> {
        let run_id = request
            .run_id
            .clone()
            .ok_or_else(|| EngineError::Rejected(Rejected::input("runId", "runId is required")))?;
        if let Some(admission) = self.standing_receipt(&run_id, &request).await? {
            return Ok(admission);
        }
        let mut record = self.load_reconciled(&run_id).await?;
        check_resumable(&record, !request.rerun.is_empty())?;
        let answers = self.new_checkpoint_answers(&record, &request).await?;
        let (rest, set_aside) = self.rerun_rows(&run_id, &request).await?;
        let meta_before = meta_limits(&record.meta).unwrap_or_default();
        // A pack run takes no revision: its texts come back from the pack, digests checked.
        let revised = if record.script_source == ScriptSource::Pack {
            self.reveal(&mut record).await?;
            false
        } else {
            self.take_revision(&mut record, &request).await?
        };
        let spend = resumed_spend(&record, &request, revised, meta_before)?;
        let active = self.project_active_count(&record.project_dir).await?;
        let slot = self.reserve(&record.project_dir, Some(active))?;
        let lease = self.take_lease_to_resume(&run_id, request.timer).await?;
        let _starting = self.starting(&run_id);
        let under_lease = async {
            self.record_answers(&run_id, &answers, &lease).await?;
            self.retire_stop_intents(&run_id, &lease).await
        };
        if let Err(error) = under_lease.await {
            let _ = self.inner.store.release_lease(&run_id, &lease.token).await;
            return Err(error);
        }
        begin_generation(
            &mut record,
            &request,
            revised,
            self.inner.config.agent_timeout,
        );
        record.limits = spend.set_on(record.limits);
        let operation_id = request
            .operation_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let admission = resumed_admission(&record, revised, &operation_id, &set_aside);
        let receipt = OperationReceipt {
            operation_id: operation_id.clone(),
            generation: record.generation,
            input_digest: resume_digest(&request),
            response: admission_to_receipt(&admission),
            created_at: now_ms(),
        };
        let rows: Vec<(u32, u32)> = set_aside.iter().map(|r| (r.generation, r.index)).collect();
        let write = async {
            let fence = Fence(&lease.token);
            self.inner
                .store
                .put_receipt(&run_id, &receipt, fence)
                .await?;
            if !rows.is_empty() {
                let fence = Fence(&lease.token);
                let store = &self.inner.store;
                store
                    .set_aside_calls(&run_id, &rows, record.generation, fence)
                    .await?;
            }
            let change = if revised {
                ScriptChange::Changed
            } else {
                ScriptChange::Unchanged
            };
            self.inner
                .store
                .update_run(&record, change, Fence(&lease.token))
                .await
        };
        if let Err(error) = write.await {
            let _ = self.inner.store.release_lease(&run_id, &lease.token).await;
            return Err(error.into());
        }
        // A rerun read the pool already, under the same run state this write left.
        let rows = if let Some(rows) = rest {
            rows
        } else {
            self.inner.store.replay_pool(&run_id).await?
        };
        let pool = ReplayPool::new(rows, revised).with_set_aside(set_aside);
        let answers = self.inner.store.checkpoint_answers(&run_id).await?;
        self.spawn_execution(record, lease, Some(pool), answers);
        drop(slot);
        Ok(admission)
    }

    /// Records the resume's checkpoint answers under the resume's `lease` (first writer
    /// wins); an answer that differs from one already recorded is a conflict.
    async fn record_answers(
        &self,
        run_id: &RunId,
        answers: &[CheckpointAnswer],
        lease: &Lease,
    ) -> EngineResult<()> {
        for answer in answers {
            let stored = self
                .inner
                .store
                .put_checkpoint_answer(run_id, answer, Fence(&lease.token))
                .await?;
            if stored.answer != answer.answer {
                return Err(EngineError::Rejected(Rejected::Conflict(format!(
                    "checkpoint {} was already answered differently",
                    answer.call_index
                ))));
            }
        }
        Ok(())
    }

    /// A stop asked for before this resume must not end the new generation: its intents are
    /// acknowledged as superseded, under the resume's `lease`.
    async fn retire_stop_intents(&self, run_id: &RunId, lease: &Lease) -> EngineResult<()> {
        let store = &self.inner.store;
        for intent in store.pending_intents(IntentScope::Run(run_id)).await? {
            let retired = json!({"state": "superseded", "operationId": intent.op, "stopped": false, "reason": "the run was resumed after the stop was requested"});
            self.acknowledge_under(run_id, &intent.op, retired, Some(&lease.token))
                .await;
        }
        Ok(())
    }

    /// The recorded rows the request's `rerun` sets aside, and the rest of the replay pool
    /// (`None`, and nothing set aside, for a plain resume); a target that names nothing is
    /// refused, naming the field.
    async fn rerun_rows(
        &self,
        run_id: &RunId,
        request: &ResumeRequest,
    ) -> EngineResult<(Option<Vec<CallRecord>>, Vec<CallRecord>)> {
        if request.rerun.is_empty() {
            return Ok((None, Vec::new()));
        }
        let pool = self.inner.store.replay_pool(run_id).await?;
        let set_aside = rerun::select(&pool, &request.rerun).map_err(|message| {
            EngineError::Rejected(Rejected::input(
                "rerun",
                format!("cannot rerun in run {run_id}: {message}"),
            ))
        })?;
        let gone: std::collections::HashSet<(u32, u32)> = set_aside
            .iter()
            .map(|row| (row.generation, row.index))
            .collect();
        let rest = pool
            .into_iter()
            .filter(|row| !gone.contains(&(row.generation, row.index)))
            .collect();
        Ok((Some(rest), set_aside))
    }

    /// The first answer to a repeated `operationId`, while the generation it started is
    /// the run's latest and still going (or done): once that generation was stopped,
    /// paused or failed, the same request resumes again (docs/api.md, "Exact retries").
    async fn standing_receipt(
        &self,
        run_id: &RunId,
        request: &ResumeRequest,
    ) -> EngineResult<Option<Admission>> {
        let Some(operation_id) = &request.operation_id else {
            return Ok(None);
        };
        let Some(receipt) = self.inner.store.receipt(run_id, operation_id).await? else {
            return Ok(None);
        };
        if receipt.input_digest != resume_digest(request) {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "operation {operation_id} was already used with different inputs"
            ))));
        }
        let record = self.load_reconciled(run_id).await?;
        let stands = receipt.generation == record.generation
            && !matches!(
                record.status,
                RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed
            );
        if !stands {
            return Ok(None);
        }
        let admission = admission_from_receipt(&receipt.response).ok_or_else(|| {
            corrupt(
                run_id,
                &format!("the receipt of operation {operation_id}"),
                "it does not parse as an admission",
            )
        })?;
        Ok(Some(admission))
    }

    /// The request's checkpoint answers not stored yet, each validated against the
    /// checkpoint the run waits on; an answer already stored must be the same.
    async fn new_checkpoint_answers(
        &self,
        record: &RunRecord,
        request: &ResumeRequest,
    ) -> EngineResult<Vec<CheckpointAnswer>> {
        let run_id = &record.run_id;
        let mut answers = Vec::new();
        for (index, answer) in &request.checkpoint_replies {
            let context = record
                .checkpoint_context
                .as_ref()
                .filter(|context| context.call_index == *index);
            let existing = self.inner.store.checkpoint_answers(run_id).await?;
            if let Some(previous) = existing.iter().find(|a| a.call_index == *index) {
                if &previous.answer != answer {
                    return Err(EngineError::Rejected(Rejected::Conflict(format!(
                        "checkpoint {index} was already answered with {}; a different answer cannot replace it",
                        previous.answer
                    ))));
                }
                continue;
            }
            let Some(context) = context else {
                return Err(EngineError::Rejected(Rejected::input(
                    "checkpointReplies",
                    format!(
                        "checkpoint {index} is not waiting for an answer{}",
                        record
                            .checkpoint_context
                            .as_ref()
                            .map(|waiting| format!(
                                " (the run waits on checkpoint {})",
                                waiting.call_index
                            ))
                            .unwrap_or_default()
                    ),
                )));
            };
            validate_checkpoint_answer(context, answer)?;
            answers.push(CheckpointAnswer {
                call_index: *index,
                hash: context.hash.clone(),
                answer: answer.clone(),
                answered_at: now_ms(),
            });
        }
        Ok(answers)
    }

    /// Writes an inline run's missing copy again from the row's text, when the copy belongs
    /// at this store's place: a daemon that ended between the admission's commit and the
    /// copy's write left none. A copy placed under another replica's folder (a shared store)
    /// is left alone; a failure is logged, since the row holds the text the resume runs.
    async fn restore_script_copy(&self, record: &RunRecord) {
        if record.script_source != ScriptSource::Inline {
            return;
        }
        let store = &self.inner.store;
        let (project_dir, run_id) = (&record.project_dir, &record.run_id);
        if !store
            .script_copy_place(project_dir, run_id)
            .await
            .is_ok_and(|place| place == record.script_file)
        {
            return;
        }
        if let Err(error) = store
            .create_script_copy(project_dir, run_id, &record.script)
            .await
        {
            tracing::warn!(run = %run_id, "cannot write the missing script copy again: {error}");
        }
    }

    /// A changed script file is a revision, validated like a new run; `true` when `record`
    /// now carries one.
    async fn take_revision(
        &self,
        record: &mut RunRecord,
        request: &ResumeRequest,
    ) -> EngineResult<bool> {
        let run_id = &record.run_id;
        let current_text = prepare::reread_script(self.inner.sources.as_ref(), &record.script_file)
            .await
            .map_err(|r| {
                EngineError::Rejected(Rejected::Script(format!("cannot resume run {run_id}: {r}")))
            })?;
        let Some(current_text) = current_text else {
            self.restore_script_copy(record).await;
            return Ok(false);
        };
        let Some(bytes) = Some(current_text).filter(|bytes| bytes != record.script.as_bytes())
        else {
            return Ok(false);
        };
        if request.timer.is_some() {
            return Err(EngineError::Rejected(Rejected::Script(format!(
                "the script {} changed since run {run_id} paused; an automatic resume does not take an edit: resume it by hand",
                record.script_file.display()
            ))));
        }

        let mut input = self.prepare_input(
            bytes,
            record.args.clone(),
            &record.project_dir,
            run_id,
            Some(&record.routing),
        );
        // The cost limit in force after this resume is checked against the revision's
        // routes; the token limit needs no check, and the revision's meta is read after.
        input.budget = crate::budget::SpendLimits {
            tokens: None,
            cost_usd: request
                .limits
                .budget
                .cost_usd
                .or(record.limits.cost_budget_usd),
        };
        let prepared = prepare::prepare(input).await.map_err(|r| {
            let message = format!(
                "the revised script {} was not accepted: {}",
                record.script_file.display(),
                r.message
            );
            // The cause stays the preparation's: a script error or a routing one.
            EngineError::Rejected(Rejection { message, ..r }.into())
        })?;
        record.script = prepared.text;
        record.meta = prepared.analyzed.meta.clone();
        record.workflow_name = prepared.analyzed.name.clone();
        record.phases = prepared.analyzed.phases.clone();
        // A revision reads its companion files again; without one they stay as frozen.
        record.files = prepared.files;
        Ok(true)
    }

    /// A fresh lease for the new generation, unless a live process holds the run.
    /// Under the lease a timer's resume just took: the run still waits for that very
    /// automatic resume. Another process may have fired it first, and its generation may
    /// even have paused again since; then this one lets go and starts nothing.
    async fn check_timer_still_due(
        &self,
        run_id: &RunId,
        due_at: i64,
        lease: &Lease,
    ) -> EngineResult<()> {
        let current = self.inner.store.load_run(run_id).await?;
        if current.status == RunStatus::Paused && current.auto_resume.due_at == Some(due_at) {
            return Ok(());
        }
        let _ = self.inner.store.release_lease(run_id, &lease.token).await;
        Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {run_id} no longer waits for the automatic resume due at {}",
            crate::util::iso_time(due_at)
        ))))
    }

    /// The run's lease for this resume; for a timer's resume (`timer`, its due moment), only
    /// while the run still waits for that very moment.
    async fn take_lease_to_resume(
        &self,
        run_id: &RunId,
        timer: Option<i64>,
    ) -> EngineResult<Lease> {
        let lease = self.new_lease().await?;
        let previous = self.inner.store.lease(run_id).await?;
        if let Some(previous) = &previous
            && self.held_elsewhere(previous, lease.acquired_at)
        {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is held by process {}{}",
                previous.pid,
                previous
                    .host
                    .as_deref()
                    .map_or(String::new(), |host| format!(" on {host}"))
            ))));
        }
        if !self
            .inner
            .store
            .acquire_lease(run_id, previous.as_ref().map(|l| l.token.as_str()), &lease)
            .await?
        {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} was taken by another process while resuming"
            ))));
        }
        if let Some(previous) = previous.filter(|p| p.owner_id != lease.owner_id) {
            tracing::info!(
                run = %run_id,
                holder.host = previous.host.as_deref().unwrap_or("-"),
                holder.instance = %previous.owner_id,
                holder.pid = previous.pid,
                holder.boot = previous.boot_id.as_deref().unwrap_or("-"),
                "took over the run's lease from its former holder, which no longer held it"
            );
        }
        if let Some(due_at) = timer {
            self.check_timer_still_due(run_id, due_at, &lease).await?;
        }
        Ok(lease)
    }
}

/// The acknowledgement of a resume: the new generation, whether it runs a revision, the
/// operation that started it and the rows a rerun set aside.
fn resumed_admission(
    record: &RunRecord,
    revised: bool,
    operation_id: &str,
    set_aside: &[CallRecord],
) -> Admission {
    let mut continuation = json!({"scriptRevised": revised, "generation": record.generation, "operationId": operation_id});
    if !set_aside.is_empty() {
        continuation["rerun"] = set_aside
            .iter()
            .map(|row| json!({"generation": row.generation, "callIndex": row.index, "label": row.label}))
            .collect();
    }
    Admission {
        run_id: record.run_id.clone(),
        status: RunStatus::Running,
        script_source: record.script_source,
        script_file: record.script_file.clone(),
        limits: record.limits,
        setup: None,
        warnings: Vec::new(),
        size: None,
        continuation: Some(continuation),
    }
}

/// Which runs can be resumed: paused, failed, and aborted ones unless a declined backend
/// approval aborted them; a completed one only to rerun some of its calls.
fn check_resumable(record: &RunRecord, rerun: bool) -> EngineResult<()> {
    let run_id = &record.run_id;
    if record.generation >= MAX_GENERATION {
        return Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {run_id} cannot be resumed: it has run {MAX_GENERATION} generations (its start \
             and {} resumes), the most agentprism keeps for one run; start a new run",
            MAX_GENERATION - 1
        ))));
    }
    match record.status {
        RunStatus::Completed if rerun => Ok(()),
        RunStatus::Completed => Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {run_id} is completed; a completed run cannot be resumed (start a new run, or \
             name calls to redo with rerun)"
        )))),
        RunStatus::Pending => Err(EngineError::Rejected(Rejected::AwaitingSetup(
            run_id.clone(),
        ))),
        RunStatus::Running => Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {run_id} is running; pause or stop it before resuming"
        )))),
        // The one aborted run that stays aborted (docs/api.md, "setup_declined"): its
        // user said no to the commands it would run.
        RunStatus::Aborted if !approval::setup_approved(record) => {
            Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} cannot be resumed: it was aborted because its backend approval was declined or cancelled (reason \"{}\"), and that is final; start a new run to be asked again",
                approval::SETUP_DECLINED
            ))))
        }
        RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed => Ok(()),
    }
}

/// The run row of the new generation: the next generation number, the request's limits,
/// the revision if any, and the last generation's outcome cleared.
fn begin_generation(
    record: &mut RunRecord,
    request: &ResumeRequest,
    revised: bool,
    agent_timeout: std::time::Duration,
) {
    record.generation += 1;
    record.limits = record
        .limits
        .with_overrides(
            request.limits.max_agents,
            request.limits.concurrency,
            request.limits.agent_retries,
        )
        .with_agent_timeout(agent_timeout);
    if revised {
        record.script_revisions.push(ScriptRevision {
            generation: record.generation,
            accepted_at: now_ms(),
            sha256: sha256_hex(record.script.as_bytes()),
        });
    }
    record.status = RunStatus::Running;
    record.pause_reason = None;
    record.error_code = None;
    record.error_message = None;
    record.auth_context = None;
    record.checkpoint_context = None;
    record.reset_hint = None;
    record.reset_at = None;
    record.result = None;
    // Any resume takes the run's timer; only an automatic one counts towards the cap.
    record.auto_resume = AutoResume {
        due_at: None,
        count: match request.timer {
            Some(_) => record.auto_resume.count.saturating_add(1),
            None => 0,
        },
    };
    if request.limits.auto_resume == Some(false) {
        record.limits.auto_resume = Some(false);
    }
    record.updated_at = now_ms();
}

/// The spending limits of the resumed run: those the request names (`resume_limits` rules),
/// then those a revision's `meta` changed, over the run's own. A cost limit can be set on
/// resume only where one was checked against the routed backends: a run admitted with one,
/// or a revision (whose dry run checks it).
fn resumed_spend(
    record: &RunRecord,
    request: &ResumeRequest,
    revised: bool,
    meta_before: SpendLimits,
) -> EngineResult<SpendLimits> {
    let current = crate::budget::SpendLimits::of(&record.limits);
    let mut requested = request.limits.budget;
    if revised {
        let meta_now = meta_limits(&record.meta).map_err(|error| {
            EngineError::Rejected(Rejected::Script(format!(
                "the revised script {} was not accepted: {error}",
                record.script_file.display()
            )))
        })?;
        if meta_now.tokens != meta_before.tokens {
            requested.tokens = requested.tokens.or(meta_now.tokens);
        }
        if meta_now.cost_usd != meta_before.cost_usd {
            requested.cost_usd = requested.cost_usd.or(meta_now.cost_usd);
        }
    }
    if requested.cost_usd.is_some() && current.cost_usd.is_none() && !revised {
        return Err(EngineError::Rejected(Rejected::input(
            "costBudgetUsd",
            format!(
                "costBudgetUsd can only be raised on resume: run {} was admitted without one, so its backends were never checked for reporting cost; start a new run with costBudgetUsd",
                record.run_id
            ),
        )));
    }
    crate::budget::resume_limits(current, requested, &record.token_usage).map_err(|error| {
        let field = match error.field.as_str() {
            "tokenBudget" => "tokenBudget",
            _ => "costBudgetUsd",
        };
        EngineError::Rejected(Rejected::input(field, error.to_string()))
    })
}

/// The limits a script's `meta` sets.
fn meta_limits(meta: &Value) -> Result<SpendLimits, crate::budget::LimitError> {
    let empty = serde_json::Map::new();
    crate::budget::limits(meta.as_object().unwrap_or(&empty), "meta.")
}

fn validate_checkpoint_answer(context: &CheckpointWait, answer: &Value) -> EngineResult<()> {
    let choices = context.choices.as_deref().unwrap_or_default();
    let valid = match context.kind {
        CheckpointKind::Confirm => answer.is_boolean(),
        CheckpointKind::Input => answer.is_string(),
        CheckpointKind::Select => answer
            .as_str()
            .is_some_and(|answer| choices.iter().any(|choice| choice == answer)),
    };
    if valid {
        return Ok(());
    }
    let expected = match context.kind {
        CheckpointKind::Confirm => "true or false".to_owned(),
        CheckpointKind::Input => "a string".to_owned(),
        CheckpointKind::Select => format!("one of {}", json!(context.choices)),
    };
    Err(EngineError::Rejected(Rejected::input(
        "checkpointReplies",
        format!(
            "checkpoint {} is a {} checkpoint: its answer must be {expected}, got {answer}",
            context.call_index,
            context.kind.as_str()
        ),
    )))
}

pub(super) fn resume_digest(request: &ResumeRequest) -> String {
    let mut body = json!({
        "runId": request.run_id,
        "checkpointReplies": request.checkpoint_replies.iter().map(|(i, v)| json!([i, v])).collect::<Vec<_>>(),
        "maxAgents": request.limits.max_agents,
        "concurrency": request.limits.concurrency,
        "agentRetries": request.limits.agent_retries,
    });
    // Only when given, so the digest of a request without them is what it always was.
    if !request.rerun.is_empty() {
        body["rerun"] = request.rerun.iter().map(RerunTarget::to_json).collect();
    }
    let budget = request.limits.budget;
    if let Some(tokens) = budget.tokens {
        body["tokenBudget"] = json!(tokens);
    }
    if let Some(dollars) = budget.cost_usd {
        body["costBudgetUsd"] = json!(dollars);
    }
    sha256_hex(crate::engine::journal::canonical_json(&body).as_bytes())
}

pub(super) fn admission_to_receipt(admission: &Admission) -> Value {
    json!({
        "runId": admission.run_id,
        "status": admission.status,
        "scriptSource": admission.script_source,
        "scriptFile": admission.script_file,
        "limits": admission.limits,
        "continuation": admission.continuation,
    })
}

pub(super) fn admission_from_receipt(value: &Value) -> Option<Admission> {
    Some(Admission {
        run_id: RunId::parse(value.get("runId")?.as_str()?).ok()?,
        status: serde_json::from_value(value.get("status")?.clone()).ok()?,
        script_source: serde_json::from_value(value.get("scriptSource")?.clone()).ok()?,
        script_file: PathBuf::from(value.get("scriptFile")?.as_str()?),
        limits: serde_json::from_value(value.get("limits")?.clone()).ok()?,
        setup: None,
        warnings: Vec::new(),
        size: value.get("size").cloned(),
        continuation: value.get("continuation").cloned(),
    })
}
