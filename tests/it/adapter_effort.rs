//! `agent()`'s `effort` through each real adapter that offers a reasoning level, run by the
//! real binary against the fake model server with `adapters.rs`'s setup: two calls with
//! different levels, and each model request carries its own call's level in the adapter's own
//! field. The calls choose a model that has levels: codex-acp offers `reasoning_effort` only
//! for a model it has a preset for (`gpt-5.5`; the fake answers any name), opencode and pi only
//! for a reasoning model (`mock-reasoner` in the test's provider); claude's default model has
//! all five.

use serde_json::{Value, json};

use crate::adapters::{Backend, Context, header};

/// Where each adapter puts the level in its model request: the Messages API's
/// `output_config.effort` (Claude Code), the Responses API's `reasoning.effort` (codex) and
/// chat completions' `reasoning_effort` (opencode, pi).
fn route_and_field(backend: Backend) -> (&'static str, &'static str) {
    match backend {
        Backend::Claude => ("claude", "/output_config/effort"),
        Backend::Codex => ("codex/gpt-5.5", "/reasoning/effort"),
        Backend::Opencode => ("opencode/mock/mock-reasoner", "/reasoning_effort"),
        Backend::Pi => ("pi/mock/mock-reasoner", "/reasoning_effort"),
    }
}

/// `levels` are two levels the model offers, neither of them the session's default (claude
/// and codex start at `medium`, opencode at its first variant, `low`, pi at `off`), so each
/// request shows a level that was set.
async fn each_request_carries_its_calls_level(backend: Backend, levels: [&str; 2]) {
    let (route, field) = route_and_field(backend);
    let context = Context::new(backend).await;
    let [first, second] = levels;
    let script = format!(
        "{}const a = await agent('Effort {first}', {{ model: '{route}', effort: '{first}' }});\n\
         const b = await agent('Effort {second}', {{ model: '{route}', effort: '{second}' }});\n\
         return [a, b];\n",
        header(backend, "effort")
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(outcome.code, Some(0), "{}", outcome.describe());
    assert_eq!(
        outcome.json(),
        json!([
            format!("MOCK-REPLY: Effort {first}"),
            format!("MOCK-REPLY: Effort {second}")
        ])
    );
    let efforts: Vec<(String, Value)> = context
        .fake
        .requests()
        .iter()
        .filter_map(|request| request.json())
        // The turn's own requests offer tools; opencode's title request, which repeats the
        // prompt text, offers none and has a level of its own.
        .filter(|body| {
            body["tools"]
                .as_array()
                .is_some_and(|tools| !tools.is_empty())
        })
        .map(|body| {
            let prompt = crate::support::fake_llm::last_user_text(&body);
            (prompt, body.pointer(field).cloned().unwrap_or(Value::Null))
        })
        .filter(|(prompt, _)| prompt.starts_with("Effort "))
        .collect();
    assert_eq!(
        efforts,
        levels
            .iter()
            .map(|level| (format!("Effort {level}"), json!(level)))
            .collect::<Vec<_>>(),
        "{:?}",
        context.fake_log()
    );
    context.assert_no_processes_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude() {
    each_request_carries_its_calls_level(Backend::Claude, ["low", "xhigh"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex() {
    each_request_carries_its_calls_level(Backend::Codex, ["low", "xhigh"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode() {
    each_request_carries_its_calls_level(Backend::Opencode, ["medium", "high"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi() {
    each_request_carries_its_calls_level(Backend::Pi, ["low", "high"]).await;
}
