//! A provider's 401 and 429 as real providers send them — OpenAI's and Anthropic's words, their
//! headers instead of the fake's `x-should-retry: false` — through the four real adapters and
//! the real `agentprism` binary (the setup of `adapters.rs`): a 401 pauses the run
//! `auth_required` and a rate limit pauses it `usage_limit`, whether the adapter reports the
//! failure at once or keeps retrying until the call's time limit (claude-agent-acp retries a
//! 401 and a 429 for minutes when the provider gives no retry advice, and pi-acp sometimes
//! never ends the turn); a run never completes with `null` for it. What each adapter does is
//! in `docs/adapters.md`; the adapters' recorded answers are in `tests/fixtures/failures/`.

use serde_json::Value;

use crate::adapters::{Backend, Context, Outcome, header};

/// The call's time limit: long enough for every adapter to start and report a failure it
/// reports at once, short enough that one still retrying ends on it.
const CALL_TIMEOUT_MS: u64 = 30_000;

/// Runs one call with `markers` in its prompt and returns the paused run's status.
async fn paused_status(context: &Context, backend: Backend, markers: &str) -> (Outcome, Value) {
    let script = format!(
        "{}return await agent('Say hello. {markers}', {{ timeoutMs: {CALL_TIMEOUT_MS} }});\n",
        header(backend, "provider-failure")
    );
    let outcome = context.run_script(&script).await;
    assert_eq!(
        outcome.code,
        Some(3),
        "the run did not pause: {}\nthe fake answered: {:#?}",
        outcome.describe(),
        context.fake_log()
    );
    let status = context.status(&outcome.run_id()).await;
    assert_eq!(status["status"], "paused", "{status:#}");
    (outcome, status)
}

/// OpenAI's 401 with a `retry-after` and no `x-should-retry`.
async fn an_openai_401_with_retry_after_pauses_auth_required(backend: Backend) {
    let context = Context::new(backend).await;
    let (_, status) = paused_status(
        &context,
        backend,
        "MOCK_STATUS=401 MOCK_WORDING=openai MOCK_PROVIDER_HEADERS MOCK_RETRY_AFTER=5",
    )
    .await;
    assert_eq!(status["reason"], "auth_required", "{status:#}");
    assert!(
        status["outcome"]["authContext"]["backendId"].is_string(),
        "{status:#}"
    );
    context.assert_no_processes_left().await;
}

/// Anthropic's 401 with no retry advice at all.
async fn an_anthropic_401_without_retry_headers_pauses_auth_required(backend: Backend) {
    let context = Context::new(backend).await;
    let (_, status) =
        paused_status(&context, backend, "MOCK_STATUS=401 MOCK_PROVIDER_HEADERS").await;
    assert_eq!(status["reason"], "auth_required", "{status:#}");
    context.assert_no_processes_left().await;
}

/// Anthropic's `rate_limit_error`, the reset moment only in its
/// `anthropic-ratelimit-unified-reset` header, no `retry-after`. opencode is given
/// `retry-after: 0`: without one it backs off by itself for over a minute, silently
/// (`docs/adapters.md`).
async fn an_anthropic_rate_limit_pauses_usage_limit(backend: Backend) {
    let context = Context::new(backend).await;
    let retry_after = match backend {
        Backend::Opencode => " MOCK_RETRY_AFTER=0",
        _ => "",
    };
    let (_, status) = paused_status(
        &context,
        backend,
        &format!("MOCK_STATUS=429 MOCK_LIMIT=rate MOCK_PROVIDER_HEADERS{retry_after}"),
    )
    .await;
    assert_eq!(status["reason"], "usage_limit", "{status:#}");
    context.assert_no_processes_left().await;
}

macro_rules! failure_tests {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_openai_401_with_retry_after_pauses_auth_required() {
                super::an_openai_401_with_retry_after_pauses_auth_required($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_anthropic_401_without_retry_headers_pauses_auth_required() {
                super::an_anthropic_401_without_retry_headers_pauses_auth_required($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_anthropic_rate_limit_pauses_usage_limit() {
                super::an_anthropic_rate_limit_pauses_usage_limit($backend).await;
            }
        }
    };
}

failure_tests!(claude, Backend::Claude);
failure_tests!(codex, Backend::Codex);
failure_tests!(opencode, Backend::Opencode);
failure_tests!(pi, Backend::Pi);
