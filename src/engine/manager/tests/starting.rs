//! A run this process is starting (stored as running, its generation not live yet) is left
//! alone by reconciliation; once the start is over, a running run with no live generation
//! is found interrupted. A start that is refused leaves no script copy behind.

use std::path::PathBuf;

use super::World;
use crate::model::RunStatus;

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
