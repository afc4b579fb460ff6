//! A run resumes up to its last generation, `MAX_GENERATION`, and a resume past it is
//! refused naming the limit, with nothing stored.

use serde_json::json;

use super::World;
use crate::engine::manager::{EngineError, Rejected};
use crate::engine::rerun::RerunTarget;
use crate::model::{MAX_GENERATION, RunStatus};
use crate::store::RunReads;

#[tokio::test]
async fn a_run_resumes_into_its_last_generation_and_no_further() {
    let world = super::world();
    let run_id = world.settled(super::CHECKPOINT).await;
    world
        .tamper(&run_id, |record| record.generation = MAX_GENERATION - 1)
        .await;
    world
        .engine
        .resume(World::resume_request(&run_id, vec![(0, json!(true))]))
        .await
        .expect("the last generation starts");
    world.engine.wait(&run_id).await;
    let record = world.store.load_run(&run_id).await.expect("load");
    assert_eq!(
        (record.status, record.generation),
        (RunStatus::Completed, MAX_GENERATION)
    );
    assert_eq!(record.result, Some(json!("ECHO: after true")));

    let before = world.store.load_run(&run_id).await.expect("load");
    let mut rerun = World::resume_request(&run_id, Vec::new());
    rerun.rerun = vec![RerunTarget::Index(1)];
    let refused = world.engine.resume(rerun).await;
    match refused {
        Err(EngineError::Rejected(Rejected::Conflict(message))) => assert!(
            message.contains("it has run 4095 generations (its start and 4094 resumes)"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let after = world.store.load_run(&run_id).await.expect("load");
    assert_eq!(
        serde_json::to_value(&after).expect("JSON"),
        serde_json::to_value(&before).expect("JSON"),
        "a refused resume stores nothing"
    );
}
