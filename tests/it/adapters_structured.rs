//! A schema call on each real adapter against the fake model server, through both paths: the
//! built-in backend (offered Claude Code's own structured output on claude, the client-hosted
//! `StructuredOutput` tool elsewhere when the agent advertises HTTP MCP servers) and the same adapter as a host backend with `structuredOutputTool: false` (the
//! schema in the prompt, JSON read from the text). Each run prints one `structured-call`
//! line with what it cost (model requests, re-prompts, the call's recorded tokens), the
//! figures `docs/adapters.md` quotes.

use serde_json::{Value, json};

use crate::adapters::{Backend, Context, header};
use crate::support::fake_llm::{asks_for_json, last_user_text};

const SCHEMA: &str = "{ type: 'object', properties: { ok: { type: 'boolean' } }, \
                      required: ['ok'], additionalProperties: false }";

/// The name of the host backend that runs the same adapter without the tool.
const PLAIN: &str = "plain";

/// What one schema call cost, from the fake's requests and the run's status.
#[derive(Debug)]
struct Cost {
    requests: usize,
    reprompts: usize,
    offered_tool: bool,
    /// A prompt asked for JSON, which the fake answers with the JSON value as text; without
    /// one, the answer can only have come through the tool.
    json_in_text: bool,
    usage: Value,
}

/// The built-in's command and arguments as the adapter tests configure them, for a host
/// backend that runs the same adapter (it inherits the provider settings from the daemon).
fn command_of(context: &Context, backend: Backend) -> (String, Vec<String>) {
    let node = context.deps.get("node").display().to_string();
    match backend {
        Backend::Claude => (
            node,
            vec![context.deps.get("claude_acp_entry").display().to_string()],
        ),
        Backend::Codex => {
            let provider = format!(
                "model_providers.mock={{name=\"mock\",base_url=\"{}\",wire_api=\"responses\",env_key=\"MOCK_API_KEY\",request_max_retries=0,stream_max_retries=0}}",
                context.fake.openai_base_url()
            );
            let args = format!("-c model_provider=\"mock\" -c model=\"mock-model\" -c {provider}");
            (
                context.deps.get("codex_acp_bin").display().to_string(),
                args.split_whitespace().map(str::to_owned).collect(),
            )
        }
        Backend::Opencode => (
            context.deps.get("opencode_bin").display().to_string(),
            vec!["acp".to_owned()],
        ),
        Backend::Pi => (
            node,
            vec![context.deps.get("pi_acp_entry").display().to_string()],
        ),
    }
}

/// Runs one schema call routed to `model` and returns its result and cost.
async fn schema_call(context: &Context, backend: Backend, model: &str) -> (Value, Cost) {
    let before = context.fake.requests().len();
    let script = format!(
        "{}return await agent('Report whether the adapter works.', {{ model: '{model}', schema: {SCHEMA} }});\n",
        header(backend, &format!("structured-{model}"))
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(
        outcome.code,
        Some(0),
        "{}\n{:#?}",
        outcome.describe(),
        context.fake_log()
    );
    let status = context.status(&outcome.run_id()).await;
    let requests: Vec<Value> = context.fake.requests()[before..]
        .iter()
        .filter(|request| request.method == "POST" && request.path != "/v1/messages/count_tokens")
        .filter_map(|request| request.json())
        .collect();
    let reprompts = requests
        .iter()
        .filter(|body| {
            let prompt = last_user_text(body);
            prompt.starts_with("Your previous answer did not match")
                || prompt.starts_with("No valid answer was returned")
        })
        .count();
    let offered_tool = requests
        .iter()
        .any(|body| body["tools"].to_string().contains("StructuredOutput"));
    let cost = Cost {
        requests: requests.len(),
        reprompts,
        offered_tool,
        json_in_text: requests
            .iter()
            .any(|body| asks_for_json(&last_user_text(body))),
        usage: status["tokenUsage"].clone(),
    };
    eprintln!(
        "structured-call backend={} path={} model_requests={} reprompts={} usage={}",
        backend_name(backend),
        if model == PLAIN { "prompt" } else { "default" },
        cost.requests,
        cost.reprompts,
        cost.usage
    );
    (outcome.json(), cost)
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Claude => "claude",
        Backend::Codex => "codex",
        Backend::Opencode => "opencode",
        Backend::Pi => "pi",
    }
}

/// Both paths give the fake's answer; the built-in is offered a `StructuredOutput` tool (the
/// client-hosted one, or Claude Code's own) exactly when `offers_tool`, and then answers
/// through it without a re-prompt.
async fn a_schema_call_on_both_paths(backend: Backend, offers_tool: bool) {
    let mut context = Context::new(backend).await;
    let (command, args) = command_of(&context, backend);
    context.extra_env.push((
        "AGENTPRISM_BACKENDS".to_owned(),
        json!({PLAIN: {"command": command, "args": args, "structuredOutputTool": false}})
            .to_string(),
    ));
    let (plain, plain_cost) = schema_call(&context, backend, PLAIN).await;
    assert_eq!(plain, json!({"ok": true}));
    assert!(!plain_cost.offered_tool, "{plain_cost:?}");
    assert!(plain_cost.json_in_text, "{plain_cost:?}");
    assert_eq!(plain_cost.reprompts, 0, "{plain_cost:?}");
    let (answer, cost) = schema_call(&context, backend, backend_name(backend)).await;
    assert_eq!(answer, json!({"ok": true}));
    assert_eq!(cost.offered_tool, offers_tool, "{cost:?}");
    assert_eq!(cost.json_in_text, !offers_tool, "{cost:?}");
    assert_eq!(cost.reprompts, 0, "{cost:?}");
    context.assert_no_processes_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_answers_a_schema_call_on_both_paths() {
    a_schema_call_on_both_paths(Backend::Claude, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_a_schema_call_on_both_paths() {
    a_schema_call_on_both_paths(Backend::Codex, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_answers_a_schema_call_on_both_paths() {
    a_schema_call_on_both_paths(Backend::Opencode, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_answers_a_schema_call_without_the_tool() {
    a_schema_call_on_both_paths(Backend::Pi, false).await;
}
