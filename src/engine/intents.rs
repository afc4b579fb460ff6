//! Durable stop intents (daemon.md 1.10 step 2): a whole-run stop that has to travel to
//! another process is first written down, so it survives the caller, the owner being briefly
//! unreachable, and retries. A cancel of one call for an owner without a control socket (a
//! foreground run) travels the same way, as a [`CANCEL_AGENT`] intent. An intent is `<runsDir>/.control/<runId>/<op>.request.json`; it
//! is done once `<op>.ack.json` exists beside it. Both files are published with a fully
//! written temporary file and `link(2)`, so no reader ever sees half a file and the first
//! acknowledgement wins. `runsDir` is the project's `runs` folder inside the persistence root
//! (where the run's script copy lives). Folders are 0700, files 0600.
//!
//! A retry of the same stop reuses an existing unacknowledged intent, so every attempt
//! carries the same operation id and the owner can tell a repeat from a new request.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::RunId;

/// Format of intent and acknowledgement files.
pub const INTENT_VERSION: u32 = 1;
/// A whole-run stop: carried out by the owner, or cold once no owner is left.
pub const STOP: &str = "stop";
/// A cancel of one live agent call (`callIndex`), for an owner without a control socket (a
/// foreground `agentprism run`, which carries out intents every second). Only a live owner
/// can carry it out; without one it is acknowledged as not done.
pub const CANCEL_AGENT: &str = "cancel-agent";

const REQUEST_SUFFIX: &str = ".request.json";
const ACK_SUFFIX: &str = ".ack.json";

/// A recorded request to act on a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    pub version: u32,
    /// The operation id: the file's name and the control request's `op`.
    pub op: String,
    pub run_id: RunId,
    /// [`STOP`] or [`CANCEL_AGENT`].
    pub action: String,
    /// The call a [`CANCEL_AGENT`] intent cancels (absent for a stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<u32>,
    /// Unix ms when the first attempt wrote it.
    pub requested_at: i64,
    /// pid of the process that wrote it, for diagnostics.
    pub requested_by: u32,
}

/// The `runs` folder of the project `project_dir` under the persistence root `root`.
pub fn runs_dir(root: &Path, project_dir: &Path) -> PathBuf {
    crate::store::project_folder(root, project_dir).join("runs")
}

/// The folder holding `run_id`'s intents.
pub fn run_folder(runs_dir: &Path, run_id: &RunId) -> PathBuf {
    runs_dir.join(".control").join(run_id.as_str())
}

/// Returns the unacknowledged `action` intent of `run_id`, creating one if there is none.
pub fn request(runs_dir: &Path, run_id: &RunId, action: &str) -> std::io::Result<Intent> {
    request_for_call(runs_dir, run_id, action, None)
}

/// [`request`] for an action on one call (`call_index`): an unacknowledged intent is reused
/// only for the same action on the same call.
pub fn request_for_call(
    runs_dir: &Path,
    run_id: &RunId,
    action: &str,
    call_index: Option<u32>,
) -> std::io::Result<Intent> {
    if let Some(existing) = unacked(runs_dir, run_id)
        .into_iter()
        .find(|intent| intent.action == action && intent.call_index == call_index)
    {
        return Ok(existing);
    }
    let intent = Intent {
        version: INTENT_VERSION,
        op: uuid::Uuid::new_v4().to_string(),
        run_id: run_id.clone(),
        action: action.to_owned(),
        call_index,
        requested_at: crate::util::now_ms(),
        requested_by: std::process::id(),
    };
    let folder = run_folder(runs_dir, run_id);
    create_private_dirs(&folder)?;
    let bytes = serde_json::to_vec_pretty(&intent).expect("an intent serialises");
    let path = folder.join(format!("{}{REQUEST_SUFFIX}", intent.op));
    publish(&path, &bytes)?;
    Ok(intent)
}

/// The intent `op` of `run_id`, if it exists and parses.
pub fn read(runs_dir: &Path, run_id: &RunId, op: &str) -> Option<Intent> {
    if !is_operation_id(op) {
        return None;
    }
    let path = run_folder(runs_dir, run_id).join(format!("{op}{REQUEST_SUFFIX}"));
    let intent: Intent = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    (intent.op == op && &intent.run_id == run_id).then_some(intent)
}

/// The acknowledgement of `op`, if one was written.
pub fn ack(runs_dir: &Path, run_id: &RunId, op: &str) -> Option<Value> {
    if !is_operation_id(op) {
        return None;
    }
    let path = run_folder(runs_dir, run_id).join(format!("{op}{ACK_SUFFIX}"));
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Marks `op` done with `outcome` (merged into `{version, op, runId, ackedAt, ackedBy}`).
/// The first acknowledgement wins: the one on disk afterwards is returned.
pub fn acknowledge(
    runs_dir: &Path,
    run_id: &RunId,
    op: &str,
    outcome: &Value,
) -> std::io::Result<Value> {
    if !is_operation_id(op) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("operation id {op:?} is not a uuid"),
        ));
    }
    let folder = run_folder(runs_dir, run_id);
    create_private_dirs(&folder)?;
    let mut document = serde_json::json!({
        "version": INTENT_VERSION,
        "op": op,
        "runId": run_id,
        "ackedAt": crate::util::now_ms(),
        "ackedBy": std::process::id(),
    });
    if let (Some(fields), Some(extra)) = (document.as_object_mut(), outcome.as_object()) {
        for (name, value) in extra {
            fields.insert(name.clone(), value.clone());
        }
    }
    let path = folder.join(format!("{op}{ACK_SUFFIX}"));
    let bytes = serde_json::to_vec_pretty(&document).expect("an ack serialises");
    publish(&path, &bytes)?;
    Ok(ack(runs_dir, run_id, op).unwrap_or(document))
}

/// The unacknowledged intents of `run_id`, oldest first.
pub fn unacked(runs_dir: &Path, run_id: &RunId) -> Vec<Intent> {
    let folder = run_folder(runs_dir, run_id);
    let mut intents: Vec<Intent> = std::fs::read_dir(&folder)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let op = name.strip_suffix(REQUEST_SUFFIX)?;
            let intent = read(runs_dir, run_id, op)?;
            folder
                .join(format!("{op}{ACK_SUFFIX}"))
                .symlink_metadata()
                .is_err()
                .then_some(intent)
        })
        .collect();
    intents.sort_by(|a, b| (a.requested_at, &a.op).cmp(&(b.requested_at, &b.op)));
    intents
}

/// Every unacknowledged intent under the persistence root `root`, with its `runsDir`.
pub fn scan(root: &Path) -> Vec<(PathBuf, Intent)> {
    let mut found = Vec::new();
    for project in std::fs::read_dir(root.join("projects"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let runs = project.path().join("runs");
        for run in std::fs::read_dir(runs.join(".control"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Some(run_id) = run
                .file_name()
                .to_str()
                .and_then(|name| RunId::parse(name).ok())
            else {
                continue;
            };
            for intent in unacked(&runs, &run_id) {
                found.push((runs.clone(), intent));
            }
        }
    }
    found
}

/// Operation ids are uuids: they become file names, so nothing else is accepted.
fn is_operation_id(op: &str) -> bool {
    uuid::Uuid::parse_str(op).is_ok()
}

fn create_private_dirs(folder: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)
        .map_err(|e| crate::util::annotate(e, "create folder", folder))
}

/// Links `bytes` into place at `path` unless it exists (the first writer wins).
fn publish(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::util::publish_once(path, bytes, 0o600).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn run_id() -> RunId {
        RunId::parse("abc123-def456").unwrap()
    }

    #[test]
    fn a_retry_reuses_the_unacked_intent_and_an_ack_ends_it() {
        let folder = tempfile::tempdir().unwrap();
        let runs = runs_dir(folder.path(), Path::new("/work/project"));
        let first = request(&runs, &run_id(), STOP).unwrap();
        let again = request(&runs, &run_id(), STOP).unwrap();
        assert_eq!(first, again, "a retry shares the operation id");
        assert_eq!(read(&runs, &run_id(), &first.op), Some(first.clone()));
        assert_eq!(scan(folder.path()), vec![(runs.clone(), first.clone())]);

        let dir = run_folder(&runs, &run_id());
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let file = dir.join(format!("{}.request.json", first.op));
        assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);

        let acked = acknowledge(
            &runs,
            &run_id(),
            &first.op,
            &serde_json::json!({"state": "settled", "stopped": true}),
        )
        .unwrap();
        assert_eq!(acked["stopped"], true);
        assert!(unacked(&runs, &run_id()).is_empty());
        assert!(scan(folder.path()).is_empty());
        let next = request(&runs, &run_id(), STOP).unwrap();
        assert_ne!(
            next.op, first.op,
            "after an ack a new stop is a new operation"
        );
    }

    #[test]
    fn the_first_ack_wins() {
        let folder = tempfile::tempdir().unwrap();
        let runs = folder.path().join("runs");
        let intent = request(&runs, &run_id(), STOP).unwrap();
        acknowledge(
            &runs,
            &run_id(),
            &intent.op,
            &serde_json::json!({"by": "first"}),
        )
        .unwrap();
        let second = acknowledge(
            &runs,
            &run_id(),
            &intent.op,
            &serde_json::json!({"by": "second"}),
        )
        .unwrap();
        assert_eq!(second["by"], "first");
        let leftovers: Vec<_> = std::fs::read_dir(run_folder(&runs, &run_id()))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files are removed");
    }

    #[test]
    fn operation_ids_must_be_uuids() {
        let folder = tempfile::tempdir().unwrap();
        let runs = folder.path().join("runs");
        assert!(read(&runs, &run_id(), "../../etc/passwd").is_none());
        assert!(acknowledge(&runs, &run_id(), "../x", &Value::Null).is_err());
    }

    #[test]
    fn a_half_written_or_foreign_file_is_ignored() {
        let folder = tempfile::tempdir().unwrap();
        let runs = folder.path().join("runs");
        let dir = run_folder(&runs, &run_id());
        create_private_dirs(&dir).unwrap();
        let op = uuid::Uuid::new_v4().to_string();
        std::fs::write(dir.join(format!("{op}.request.json")), b"{\"version\":").unwrap();
        assert!(unacked(&runs, &run_id()).is_empty());
        let fresh = request(&runs, &run_id(), STOP).unwrap();
        assert_ne!(fresh.op, op);
    }
}
