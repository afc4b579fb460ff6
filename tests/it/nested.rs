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
