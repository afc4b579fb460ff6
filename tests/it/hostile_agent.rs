//! An agent that never ends its message: the ACP reader holds at most
//! `MAX_MESSAGE_BYTES` (32 MiB) of one line, then closes the connection and stops the
//! agent; the turn fails naming the limit, and the process group is gone. The mock agent's
//! `@mock endless_line 64` writes 64 MiB of one message with no newline, then hangs. An
//! answer streamed in many messages is held up to `MAX_ANSWER_BYTES` (16 MiB): past it the
//! turn is cancelled and fails naming that limit (`@mock big_answer 17`); one under it is
//! answered whole. A script that logs past its generation's ceiling is refused naming it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use agentprism::acp::AcpRunner;
use agentprism::engine::runner::{AgentRunner, FailureKind};

use crate::acp::{
    TestObserver, config, mock_backend, open, prompt, session_spec, turn, wait_for_pids,
};
use crate::support::context::wait_gone;

#[tokio::test]
async fn an_agent_that_never_ends_a_message_is_stopped_at_the_limit() {
    let folder = tempfile::tempdir().expect("temp dir");
    let pid_file = folder.path().join("pids");
    let runner = AcpRunner::new(config());
    let backend = mock_backend(
        "mock",
        &[("MOCK_ACP_PID_FILE", &pid_file.display().to_string())],
    );
    let mut session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pids = wait_for_pids(&pid_file, 1).await;
    let failure = prompt(
        &mut session,
        turn("flood\n@mock endless_line 64"),
        CancellationToken::new(),
    )
    .await
    .expect_err("the turn fails");
    assert_eq!(failure.kind, FailureKind::Execution, "{failure:?}");
    assert!(
        failure.message.contains("longer than 32 MiB"),
        "{:?}",
        failure.message
    );
    wait_gone(&pids);
    // The backend still works: the next session gets a fresh process.
    let mut fresh = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let answer = prompt(&mut fresh, turn("hello"), CancellationToken::new())
        .await
        .expect("a fresh process answers");
    assert_eq!(answer.text, "ECHO: hello");
    fresh.close().await;
    runner.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_answer_past_the_limit_fails_the_turn_and_one_under_it_is_whole() {
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let mut session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let failure = prompt(
        &mut session,
        turn("huge\n@mock big_answer 17"),
        CancellationToken::new(),
    )
    .await
    .expect_err("the turn fails");
    assert_eq!(failure.kind, FailureKind::Execution, "{failure:?}");
    assert!(
        failure.message.contains("grew past 16 MiB"),
        "{:?}",
        failure.message
    );
    let whole = prompt(
        &mut session,
        turn("large\n@mock big_answer 15\n@mock reply !"),
        CancellationToken::new(),
    )
    .await
    .expect("an answer under the limit");
    assert_eq!(whole.text.len(), (15 << 20) + 1);
    session.close().await;
    runner.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A script that logs past the generation's ceiling (100,000 lines) is refused at its dry run,
/// naming the ceiling, and nothing is stored; one line fewer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_past_the_ceiling_is_refused_naming_it() {
    let h = crate::engine::harness();
    let meta = "export const meta = { name: 'flood', description: 'd', model: 'mock' };\n";
    let refused = h
        .start(&format!(
            "{meta}for (let i = 0; i < 100001; i++) log('line ' + i);\nreturn 1;"
        ))
        .await
        .expect_err("refused");
    let text = refused.to_string();
    assert!(text.contains("more than 100000 lines"), "{text}");
    let (_, status) = h
        .run_to_end(&format!(
            "{meta}for (let i = 0; i < 1000; i++) log('line ' + i);\nreturn 1;"
        ))
        .await;
    assert_eq!(status["status"], "completed", "{status:#}");
}
