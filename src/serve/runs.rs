//! The async run API: `run/start`, `run/status`, `run/resume`, `run/cancel`, `run/list` and
//! `run/logs`, each answering the bare status object ([`RunView`]) or a small document. The
//! `mhl_run_*` tools and the `run/*` JSON-RPC methods are two faces of these functions
//! (`super::tools`), so they cannot drift apart.
//!
//! Every method but `start` goes through [`Owners::admit`] first: a caller who does not own
//! the run gets [`RunError::Unknown`], whose text is the same for an id that never existed.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::engine::manager::Rejected;
use crate::engine::{Engine, EngineError, ResumeRequest, RunRequest, ScriptInput, StatusQuery};
use crate::model::{QueuedEntry, RunId};

use super::folder::Folder;
use super::owners::{OwnerKey, Owners};
use super::queue::StartQueue;
use super::view::{Holder, RunView};

/// The largest `arguments` of `run/start` and `run/resume`, serialised: they are stored with
/// the run.
pub(crate) const MAX_ARGUMENTS_BYTES: usize = 256 * 1024;
/// Log lines `run/logs` returns at most (the latest ones).
pub(crate) const MAX_LOG_LINES: u32 = 1_000;

/// Why a run method did not answer with a status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// Not this caller's run, or no run at all: one text for both.
    #[error("unknown runId")]
    Unknown,
    /// The request is malformed; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The engine refused or failed (preparation rejected the script or its arguments, the
    /// run cannot be resumed in its state, the store failed).
    #[error("{0}")]
    Refused(String),
}

impl From<EngineError> for RunError {
    fn from(error: EngineError) -> RunError {
        match error {
            EngineError::UnknownRun(_) => RunError::Unknown,
            other => RunError::Refused(other.to_string()),
        }
    }
}

/// What the run methods need: the engine, the folder and the owners.
pub struct RunApi {
    pub engine: Engine,
    pub folder: Arc<Folder>,
    pub owners: Arc<Owners>,
    /// Whether `mhl_run_start` links the run's resources (served over HTTP only).
    pub run_links: bool,
    /// The queue of starts beyond capacity; `None` when it is off (`--max-queued-runs 0`).
    pub(crate) queue: Option<Arc<StartQueue>>,
}

impl RunApi {
    /// `run/start {name, arguments}`: prepares and admits a run of the named workflow for
    /// `owner`; its runId is durable from this answer.
    pub(crate) async fn start(
        &self,
        owner: &OwnerKey,
        params: &Value,
    ) -> Result<RunView, RunError> {
        let name = string_field(params, "name")?;
        let workflow = self.folder.get(name).ok_or_else(|| {
            RunError::Invalid(format!(
                "name: no workflow is named {name:?}; tools/list names the workflows"
            ))
        })?;
        let arguments = arguments(params)?;
        if self.must_queue().await {
            let run_id = self.enqueue(owner, &workflow.name, arguments).await?;
            return self.view(&run_id).await;
        }
        let request = self.run_request(&workflow.path, arguments.clone(), owner.as_str());
        let admission = match self.engine.start(request).await {
            Ok(admission) => admission,
            Err(EngineError::Rejected(Rejected::Capacity(_))) if self.queue.is_some() => {
                let run_id = self.enqueue(owner, &workflow.name, arguments).await?;
                return self.view(&run_id).await;
            }
            Err(error) => return Err(self.refused(error)),
        };
        self.owners
            .started(&admission.run_id, owner, &workflow.name, 1);
        self.view(&admission.run_id).await
    }

    /// `run/status {runId}`.
    pub(crate) async fn status(
        &self,
        owner: &OwnerKey,
        params: &Value,
    ) -> Result<RunView, RunError> {
        let run_id = self.admitted(owner, params).await?;
        self.view(&run_id).await
    }

    /// `run/resume {runId, arguments?}`: `arguments` may carry only `checkpointReplies`
    /// (`{"<callIndex>": answer}`); a run's workflow arguments are fixed at admission.
    pub(crate) async fn resume(
        &self,
        owner: &OwnerKey,
        params: &Value,
    ) -> Result<RunView, RunError> {
        let run_id = self.admitted(owner, params).await?;
        let checkpoint_replies = checkpoint_replies(params)?;
        let record = match self.engine.load_reconciled(&run_id).await {
            Err(EngineError::UnknownRun(_)) if self.queued(&run_id).await?.is_some() => {
                return Err(RunError::Refused(
                    "runId: this start has not run (it waits in the queue, or ended there \
                     before it started); a queued start starts by itself, and an ended one \
                     is started again with run/start"
                        .to_owned(),
                ));
            }
            other => other?,
        };
        let admission = self
            .engine
            .resume(ResumeRequest {
                run_id: Some(run_id.clone()),
                checkpoint_replies,
                ..ResumeRequest::default()
            })
            .await
            .map_err(|error| self.refused(error))?;
        let generation = admission
            .continuation
            .as_ref()
            .and_then(|continuation| continuation["generation"].as_u64())
            .map_or(record.generation + 1, |generation| generation as u32);
        self.owners
            .started(&run_id, owner, &record.workflow_name, generation);
        self.view(&run_id).await
    }

    /// `run/cancel {runId}`: stops the run (a stopped run stays resumable).
    pub(crate) async fn cancel(
        &self,
        owner: &OwnerKey,
        params: &Value,
    ) -> Result<RunView, RunError> {
        let run_id = self.admitted(owner, params).await?;
        if self.cancel_queued(&run_id).await? {
            return self.view(&run_id).await;
        }
        match self
            .engine
            .stop(&run_id, None, &StatusQuery::default())
            .await
        {
            // A start that ended in the queue: its view says how.
            Err(EngineError::UnknownRun(_)) => return self.view(&run_id).await,
            other => other?,
        };
        self.engine.wait(&run_id).await;
        self.view(&run_id).await
    }

    /// `run/list`: the caller's runs this process knows, oldest first.
    pub(crate) async fn list(&self, owner: &OwnerKey) -> Result<Value, RunError> {
        Ok(json!({"runs": self.list_views(owner).await?}))
    }

    /// The views of the caller's runs this process knows, oldest first.
    pub(crate) async fn list_views(&self, owner: &OwnerKey) -> Result<Vec<RunView>, RunError> {
        let mut runs = Vec::new();
        for run_id in self.owners.runs_of(owner) {
            match self.view(&run_id).await {
                Ok(view) => runs.push(view),
                // Deleted meanwhile (terminal TTL): not listed.
                Err(RunError::Unknown) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(runs)
    }

    /// `run/logs {runId}`: the latest log lines (`log()` of the script), oldest first.
    pub(crate) async fn logs(&self, owner: &OwnerKey, params: &Value) -> Result<Value, RunError> {
        let run_id = self.admitted(owner, params).await?;
        let (lines, total) = self.log_lines(&run_id).await?;
        Ok(json!({"runId": run_id, "lines": lines, "totalLines": total}))
    }

    /// The latest log lines and how many there are, for `run/logs` and the logs resource.
    pub(crate) async fn log_lines(&self, run_id: &RunId) -> Result<(Vec<String>, u64), RunError> {
        self.engine
            .events()
            .log_tail(run_id, MAX_LOG_LINES)
            .await
            .map_err(|error| RunError::from(EngineError::Store(error)))
    }

    /// An engine refusal as a client sees it: the folder's absolute path cut out.
    fn refused(&self, error: EngineError) -> RunError {
        match RunError::from(error) {
            RunError::Refused(message) => RunError::Refused(self.folder.scrub(&message)),
            other => other,
        }
    }

    /// The owner-gated run id of `params.runId`.
    pub(crate) async fn admitted(
        &self,
        owner: &OwnerKey,
        params: &Value,
    ) -> Result<RunId, RunError> {
        let text = string_field(params, "runId")?;
        let run_id = RunId::parse(text).map_err(|_| RunError::Unknown)?;
        self.owners
            .admit(&self.engine, &run_id, owner)
            .await
            .map_err(|_| RunError::Unknown)?;
        Ok(run_id)
    }

    /// The status object: from memory while the run executes here, else from its record.
    pub(crate) async fn view(&self, run_id: &RunId) -> Result<RunView, RunError> {
        if let Some(claim) = self.owners.claim(run_id)
            && let Some(name) = &claim.workflow
            && let Some(live) = self.engine.live_status(run_id)
        {
            let phases = self
                .folder
                .get(name)
                .map(|workflow| workflow.phases.clone())
                .unwrap_or_default();
            let mut view = RunView::live(run_id, name, &phases, claim.generation, &live);
            view.holder = Some(Holder::this_process(self.engine.owner()));
            return Ok(view);
        }
        let record = match self.engine.load_reconciled(run_id).await {
            Ok(record) => record,
            Err(EngineError::UnknownRun(_)) => match self.queued(run_id).await? {
                Some(entry) => return Ok(RunView::queued(&entry)),
                // Started between the two reads: read the run again.
                None => self.engine.load_reconciled(run_id).await?,
            },
            Err(error) => return Err(error.into()),
        };
        let mut view = RunView::stored(&record);
        if view.state == "working" {
            view.holder = self.engine.holder(run_id).await?.as_ref().map(Holder::of);
        }
        Ok(view)
    }
}

impl RunApi {
    /// The request that starts the folder's workflow at `path` with `arguments` for the
    /// owner key `caller` (a start now, or a queued one when its turn comes).
    pub(crate) fn run_request(
        &self,
        path: &std::path::Path,
        arguments: Value,
        caller: &str,
    ) -> RunRequest {
        RunRequest {
            project_dir: self.folder.root.clone(),
            script: ScriptInput::Path(path.to_path_buf()),
            args: arguments,
            limits: Default::default(),
            caller: Some(caller.to_owned()),
            trace: None,
        }
    }

    /// The queue entry of `run_id`, if there is one.
    async fn queued(&self, run_id: &RunId) -> Result<Option<QueuedEntry>, RunError> {
        self.engine
            .queue()
            .queued(run_id)
            .await
            .map_err(|error| RunError::from(EngineError::Store(error)))
    }
}

fn string_field<'a>(params: &'a Value, field: &str) -> Result<&'a str, RunError> {
    params
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| RunError::Invalid(format!("{field}: a string is required")))
}

/// `arguments`: a JSON object of at most [`MAX_ARGUMENTS_BYTES`] (absent: `{}`).
pub(crate) fn arguments(params: &Value) -> Result<Value, RunError> {
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => return Ok(Value::Object(Map::new())),
        Some(arguments @ Value::Object(_)) => arguments,
        Some(_) => {
            return Err(RunError::Invalid(
                "arguments: a JSON object is required".to_owned(),
            ));
        }
    };
    check_size(arguments)?;
    Ok(arguments.clone())
}

/// Refuses arguments over [`MAX_ARGUMENTS_BYTES`] serialised.
pub(crate) fn check_size(arguments: &Value) -> Result<(), RunError> {
    let size = serde_json::to_vec(arguments).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_ARGUMENTS_BYTES {
        return Err(RunError::Invalid(format!(
            "arguments: {size} bytes of JSON; at most {MAX_ARGUMENTS_BYTES} (256 KiB) are stored \
             with a run, so pass large payloads by reference (a path, a URL, a blob key)"
        )));
    }
    Ok(())
}

/// `arguments.checkpointReplies` of `run/resume` as (call index, answer) pairs.
fn checkpoint_replies(params: &Value) -> Result<Vec<(u32, Value)>, RunError> {
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => {
            return Err(RunError::Invalid(
                "arguments: a JSON object is required".to_owned(),
            ));
        }
    };
    check_size(&Value::Object(arguments.clone()))?;
    if let Some(other) = arguments.keys().find(|key| *key != "checkpointReplies") {
        return Err(RunError::Invalid(format!(
            "arguments.{other}: a run's workflow arguments are fixed when it starts; resume \
             arguments may only carry checkpointReplies ({{\"<callIndex>\": answer}})"
        )));
    }
    let Some(replies) = arguments.get("checkpointReplies") else {
        return Ok(Vec::new());
    };
    let replies = replies.as_object().ok_or_else(|| {
        RunError::Invalid(
            "arguments.checkpointReplies: an object {\"<callIndex>\": answer} is required"
                .to_owned(),
        )
    })?;
    replies
        .iter()
        .map(|(index, answer)| {
            let index = index.parse::<u32>().map_err(|_| {
                RunError::Invalid(format!(
                    "arguments.checkpointReplies: the key {index:?} is not a call index (a \
                     whole number such as \"3\")"
                ))
            })?;
            Ok((index, answer.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_capped_at_256_kib() {
        let exact = "x".repeat(MAX_ARGUMENTS_BYTES - r#"{"a":""}"#.len());
        assert!(arguments(&json!({"arguments": {"a": exact}})).is_ok());
        let over = "x".repeat(MAX_ARGUMENTS_BYTES - r#"{"a":""}"#.len() + 1);
        let error = arguments(&json!({"arguments": {"a": over}})).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("arguments: 262145 bytes of JSON; at most 262144"),
            "{error}"
        );
        assert!(arguments(&json!({"arguments": [1]})).is_err());
        assert_eq!(arguments(&json!({})).unwrap(), json!({}));
    }

    #[test]
    fn resume_arguments_carry_only_checkpoint_replies() {
        let replies =
            checkpoint_replies(&json!({"arguments": {"checkpointReplies": {"2": true}}})).unwrap();
        assert_eq!(replies, vec![(2, json!(true))]);
        let error = checkpoint_replies(&json!({"arguments": {"approved": "yes"}})).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("arguments.approved: a run's workflow arguments are fixed"),
            "{error}"
        );
        assert!(
            checkpoint_replies(&json!({"arguments": {"checkpointReplies": {"x": 1}}})).is_err()
        );
        assert!(checkpoint_replies(&json!({})).unwrap().is_empty());
    }
}
