//! A run this process is starting (stored as running, its generation not live yet) is left
//! alone by reconciliation; once the start is over, a running run with no live generation
//! is found interrupted. A start that is refused leaves no script copy behind, and a run
//! whose copy went missing gets it back when it resumes.

use std::path::PathBuf;

use super::World;
use crate::engine::ScriptInput;
use crate::engine::manager::{EngineError, Rejected, RunRequest};
use crate::model::{RunId, RunStatus};
use crate::store::{RunReads, ScriptCopies, StoreError};

impl World {
    /// The inline scripts' copies under the world's state folder.
    pub(super) fn script_copies(&self) -> Vec<PathBuf> {
        let projects = self._folder.path().join("state").join("projects");
        let listed = |dir: &std::path::Path| {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.path())
                .collect::<Vec<_>>()
        };
        listed(&projects)
            .iter()
            .flat_map(|project| listed(&project.join("runs")))
            .filter(|file| file.to_string_lossy().ends_with(".script.js"))
            .collect()
    }
}

#[tokio::test]
async fn a_run_being_started_here_is_not_reconciled_as_interrupted() {
    let world = super::world();
    let run_id = world.settled(super::ONE_CALL).await;
    // As a start leaves it between its record and its generation: running, nothing live.
    world
        .tamper(&run_id, |record| record.status = RunStatus::Running)
        .await;
    {
        let _starting = world.engine.starting(&run_id);
        let record = world.engine.load_reconciled(&run_id).await.expect("load");
        assert_eq!(record.status, RunStatus::Running);
    }
    let record = world.engine.load_reconciled(&run_id).await.expect("load");
    assert_eq!(record.status, RunStatus::Paused);
}

/// An inline script's copy is written for an admitted run only: an admission its dry run
/// refuses leaves none behind (one refused after preparation:
/// `isolation_outside_a_repository_is_refused_at_admission`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_admission_leaves_no_script_copy() {
    let world = super::world();
    let throws = "export const meta = { name: 't', description: 'd', model: 'claude' };\nthrow new Error('refused here');";
    let refused = world
        .admit(throws, Default::default())
        .await
        .expect_err("the dry run throws");
    assert!(refused.to_string().contains("refused here"), "{refused}");
    assert_eq!(world.script_copies(), Vec::<PathBuf>::new());
    let run_id = world.settled(super::ONE_CALL).await;
    let copies = world.script_copies();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert!(
        copies[0].ends_with(format!("{run_id}.script.js")),
        "{copies:?}"
    );
}

/// The copy is written beside the run row's commit: when the row commits and the copy cannot
/// be written (a folder where the copy goes), the run is deleted again and the refusal names
/// the copy, so a refusal stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_cannot_be_written_leaves_no_run() {
    let world = super::world();
    let run_id = RunId::generate();
    let place = world
        .store
        .script_copy_place(&world.project, &run_id)
        .await
        .expect("place");
    std::fs::create_dir(&place).expect("a folder in the copy's place");
    let request = RunRequest {
        project_dir: world.project.clone(),
        script: ScriptInput::Inline(super::ONE_CALL.into()),
        args: serde_json::json!({}),
        limits: Default::default(),
        caller: None,
        trace: None,
    };
    let refused = world
        .engine
        .start_as(request, run_id.clone())
        .await
        .expect_err("the copy cannot replace a folder");
    assert!(
        matches!(&refused, EngineError::Rejected(Rejected::Unrecorded(message)) if message.contains("script copy")),
        "{refused:?}"
    );
    let lookup = world.store.load_run(&run_id).await;
    assert!(
        matches!(lookup, Err(StoreError::UnknownRun(_))),
        "{lookup:?}"
    );
    // The delete removed the copy's place only if a copy was there: the folder stays, and
    // no temporary file of the write is left beside it.
    let runs = place.parent().expect("runs folder");
    let left: Vec<_> = std::fs::read_dir(runs)
        .expect("runs folder")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert_eq!(left, vec![place.file_name().expect("name").to_owned()]);
}

/// A run whose copy is missing (a daemon that ended between the admission's commit and the
/// copy's write) gets it back from the row's text when it resumes, and runs that text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_writes_a_missing_copy_again() {
    let world = super::world();
    let run_id = world.settled(super::CHECKPOINT).await;
    let copies = world.script_copies();
    assert_eq!(copies.len(), 1, "{copies:?}");
    std::fs::remove_file(&copies[0]).expect("remove the copy");
    world
        .engine
        .resume(super::World::resume_request(
            &run_id,
            vec![(0, serde_json::json!(true))],
        ))
        .await
        .expect("resumed");
    world.engine.wait(&run_id).await;
    assert_eq!(
        std::fs::read_to_string(&copies[0]).expect("the copy again"),
        super::CHECKPOINT
    );
    let record = world.store.load_run(&run_id).await.expect("load");
    assert_eq!(record.status, RunStatus::Completed);
}
