//! The token estimate of an inline script's admission, through the engine's library API with
//! the instant runner: earlier runs of the project with the same `meta.name` give the history,
//! from their summaries, and runs of another name do not.

use crate::engine::harness;

fn script(name: &str) -> String {
    format!(
        "export const meta = {{ name: '{name}', description: 'd', model: 'codex' }};\n\
         return [await agent('one'), await agent('two')];"
    )
}

#[tokio::test]
async fn earlier_inline_runs_of_the_same_name_give_the_estimate() {
    let h = harness();
    let first = h.admit(&script("sized"), Default::default()).await;
    assert_eq!(
        first.size.as_ref().unwrap()["history"],
        serde_json::Value::Null
    );
    for name in ["sized", "sized", "another"] {
        let (_, status) = h.run_to_end(&script(name)).await;
        assert_eq!(status["status"], "completed", "{status:#}");
    }
    h.engine.wait(&first.run_id).await;
    let admitted = h.admit(&script("sized"), Default::default()).await;
    let size = admitted.size.expect("a size");
    // The first run and the two after it; `another` is another workflow.
    assert_eq!(size["history"]["runs"], 3, "{size:#}");
    let average = size["history"]["avgTokensPerCall"]
        .as_f64()
        .expect("an average");
    assert!(average > 0.0, "{size:#}");
    assert_eq!(
        size["estimatedTokens"].as_f64(),
        Some((average * 2.0).round()),
        "{size:#}"
    );
}
