//! The prompt-cache hold through the real binary, the real claude adapter and the fake model
//! server (docs/scripts.md "Fan-outs that share a prompt prefix"): three parallel calls whose
//! prompts share a 5 KiB prefix reach the provider one, then two once the first one's answer
//! has begun, so a provider's cache could serve the prefix to both. (That shorter prompts are
//! never held is the room's unit tests'; what the hold costs and saves is `benches/prompt_cache.rs`'s.)

use crate::adapters::{Backend, Context, header};

/// Three parallel calls whose prompts begin with `marker` and the same `prefix_bytes` of text
/// (Claude Code also sends each prompt, inside other text, to a session-title request); the first
/// answer comes only after `delay_ms`, so calls sent at once would all arrive before it.
fn fan_out(prefix_bytes: usize, marker: &str, delay_ms: u64) -> String {
    format!(
        "{}const shared = 'Shared project context for every reviewer, line after line. '.repeat({});\n\
         return await parallel([1, 2, 3].map((n) => () => agent(`{marker} ${{shared}}MOCK_DELAY={delay_ms} question ${{n}}`)));\n",
        header(Backend::Claude, "fanout"),
        prefix_bytes / 61 + 1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sharing_a_long_prefix_reach_the_provider_after_the_first_answer_began() {
    let context = Context::new(Backend::Claude).await;
    // The first call leads; the other two open their sessions and wait for its answer.
    let script = fan_out(5 * 1024, "CACHEMARK-held", 2000);
    let outcome = context.run_script(&script).await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    let result = outcome.json();
    assert_eq!(result.as_array().map(Vec::len), Some(3), "{result}");
    assert_eq!(
        context.fake.arrivals_after_first_answer("CACHEMARK-held"),
        (3, 2),
        "both followers should reach the provider after the lead's answer began"
    );

    context.assert_no_processes_left().await;
}
