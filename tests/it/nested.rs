//! Nested `workflow()` calls beside the root script's own, through the engine's library API
//! with the instant runner: a nested workflow's agent calls are numbered in their own scope,
//! and while they run beside root calls of the same numbers each call gets its own answer.

use serde_json::json;

use crate::engine::harness;

const CHILD: &str = "export const meta = { name: 'child', description: 'd', model: 'codex' };\\n\
                     return [await agent('child one'), await agent('child two')];";

#[tokio::test]
async fn a_nested_workflow_s_calls_run_beside_root_calls_of_the_same_numbers() {
    let h = harness();
    let script = format!(
        "export const meta = {{ name: 'x', description: 'd', model: 'codex' }};\n\
         const [a, b, nested] = await Promise.all([\n\
           agent('root one'), agent('root two'), workflow(\"{CHILD}\"),\n\
         ]);\n\
         return {{a, b, nested}};"
    );
    let (_, status) = h.run_to_end(&script).await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({
            "a": "ECHO: root one",
            "b": "ECHO: root two",
            "nested": ["ECHO: child one", "ECHO: child two"],
        }),
        "{status:#}"
    );
    assert_eq!(h.runner.prompts(), 4);
}

const ASKS: &str = "export const meta = { name: 'asks', description: 'd', model: 'codex' };\\n\
                    return await checkpoint('nested question');";

/// A nested workflow's checkpoint, then the root script's first checkpoint: each is answered
/// in turn, and neither answer is taken for the other's.
#[tokio::test]
async fn a_nested_checkpoint_and_a_root_checkpoint_take_their_own_answers() {
    let h = harness();
    let script = format!(
        "export const meta = {{ name: 'x', description: 'd', model: 'codex' }};\n\
         const nested = await workflow(\"{ASKS}\");\n\
         const root = await checkpoint('root question', {{kind: 'input'}});\n\
         return {{nested, root}};"
    );
    let (run_id, status) = h.run_to_end(&script).await;
    assert_eq!(status["reason"], "checkpoint_required", "{status:#}");
    let context = &status["outcome"]["checkpointContext"];
    assert_eq!(context["prompt"], "nested question", "{status:#}");
    let nested = u32::try_from(context["callIndex"].as_u64().expect("an index")).unwrap();
    assert!(nested >= 1 << 31, "{status:#}");

    let status = h.resume_to_end(&run_id, vec![(nested, json!(true))]).await;
    assert_eq!(status["reason"], "checkpoint_required", "{status:#}");
    let context = &status["outcome"]["checkpointContext"];
    assert_eq!(context["prompt"], "root question", "{status:#}");
    assert_eq!(context["callIndex"], 0, "{status:#}");

    let status = h.resume_to_end(&run_id, vec![(0, json!("mine"))]).await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({"nested": true, "root": "mine"}),
        "{status:#}"
    );
}

/// A nested workflow's answered checkpoint, then root agent calls in the same generation:
/// the checkpoint is not journaled, so it takes no row the root's calls write.
#[tokio::test]
async fn an_answered_nested_checkpoint_leaves_the_root_s_call_rows_to_the_root() {
    let h = harness();
    let script = format!(
        "export const meta = {{ name: 'x', description: 'd', model: 'codex' }};\n\
         const nested = await workflow(\"{ASKS}\");\n\
         const a = await agent('after one');\n\
         const b = await agent('after two');\n\
         return {{nested, a, b}};"
    );
    let (run_id, status) = h.run_to_end(&script).await;
    let index = status["outcome"]["checkpointContext"]["callIndex"]
        .as_u64()
        .expect("paused at the nested checkpoint");
    let status = h
        .resume_to_end(&run_id, vec![(u32::try_from(index).unwrap(), json!(true))])
        .await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({"nested": true, "a": "ECHO: after one", "b": "ECHO: after two"}),
        "{status:#}"
    );
}
