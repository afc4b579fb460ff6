//! A run this process is starting (stored as running, its generation not live yet) is left
//! alone by reconciliation; once the start is over, a running run with no live generation
//! is found interrupted.

use crate::model::RunStatus;

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
