//! A provider's 401 and 429 as real providers send them — OpenAI's and Anthropic's words, their
//! headers instead of the fake's `x-should-retry: false` — through the four real adapters and
//! the real `agentprism` binary (the setup of `adapters.rs`): a 401 pauses the run
//! `auth_required` and a rate limit pauses it `usage_limit`, whether the adapter reports the
//! failure at once or keeps retrying until the call's time limit (claude-agent-acp retries a
//! 401 and a 429 for minutes when the provider gives no retry advice, and pi-acp sometimes
//! never ends the turn); a run never completes with `null` for it. What each adapter does is
//! in `docs/adapters.md`; the adapters' recorded answers are in `tests/fixtures/failures/`.

use std::sync::Arc;
use std::time::Duration;

use agentprism::acp::AcpRunner;
use agentprism::engine::runner::{
    AgentObserver, AgentRunner, AgentUpdate, FailureKind, PermissionOutcome, PermissionRequest,
    TurnRequest,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::acp::{config, mock_backend, session_spec};
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

struct Quiet;

#[async_trait]
impl AgentObserver for Quiet {
    fn update(&self, _update: AgentUpdate) {}

    async fn request_permission(&self, _request: PermissionRequest) -> PermissionOutcome {
        std::future::pending().await
    }
}

/// claude-agent-acp answering a provider failure with an empty `end_turn` (the form its users
/// report for usage limits), or not at all while Claude Code retries: the mock agent, named
/// as claude-agent-acp, writes the error to the session's Claude Code transcript the way the
/// CLI does and ends the turn empty, or hangs. The call fails `usage_limit` with the reset
/// moment of the message, and `auth_required` at its time limit, instead of an empty answer or
/// a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_turns_that_report_nothing_are_judged_by_the_transcript() {
    let home = tempfile::tempdir().expect("home");
    let home_path = home.path().display().to_string();
    let runner = AcpRunner::new(config());
    let backend = mock_backend(
        "claude",
        &[
            (
                "MOCK_ACP_AGENT_NAME",
                "@agentclientprotocol/claude-agent-acp",
            ),
            ("HOME", &home_path),
        ],
    );
    let limit = json!({"type": "assistant", "isApiErrorMessage": true, "apiErrorStatus": 429,
        "error": "rate_limit", "message": {"model": "<synthetic>", "content": [{"type": "text",
        "text": "API Error: Request rejected (429) · usage limit reached, try again in 2 hours"}]}});
    let retrying = json!({"type": "system", "subtype": "api_error", "error": {"status": 401,
        "message": "401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\"}}"},
        "retryInMs": 5000, "retryAttempt": 2, "maxRetries": 10});
    let turns = [
        (
            format!("@mock claude_transcript {limit}\n@mock reply "),
            Duration::from_secs(20),
            FailureKind::UsageLimit,
        ),
        (
            format!("@mock claude_transcript {retrying}\n@mock hang"),
            Duration::from_millis(500),
            FailureKind::AuthRequired,
        ),
    ];
    for (text, timeout, kind) in turns {
        let mut session = tokio::time::timeout(
            Duration::from_secs(20),
            runner.open_session(session_spec(&backend), Arc::new(Quiet)),
        )
        .await
        .expect("open in time")
        .expect("open");
        let request = TurnRequest {
            prompt: vec![json!({"type": "text", "text": text})],
            meta: None,
            timeout,
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            session.prompt(request, CancellationToken::new()),
        )
        .await
        .expect("the turn ends in time");
        let failure = answer.expect_err("the recorded provider error fails the turn");
        assert_eq!(failure.kind, kind, "{failure:?}");
        if kind == FailureKind::UsageLimit {
            assert!(failure.reset_at.is_some(), "{failure:?}");
        }
    }
    runner.shutdown(Duration::from_secs(3)).await;
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
