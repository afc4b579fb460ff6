//! The ACP runner's processes: a start that fails (a missing command, a slow initialize), the
//! shutdown of an agent that ignores EOF and of a turn whose cancel is ignored, the pool's
//! spread, resume's reattachment, the idle stop and the release of probe-only processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentprism::acp::AcpRunner;
use agentprism::engine::runner::{AgentRunner, BackendOrigin, BackendSpec, FailureKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    DEADLINE, TestObserver, config, is_alive, mock_backend, open, prompt, session_spec, turn,
    wait_for_pids, wait_gone,
};

#[tokio::test]
async fn shutdown_kills_an_agent_that_ignores_eof_and_its_whole_group() {
    let folder = tempfile::tempdir().expect("temp dir");
    let pid_file = folder.path().join("pids");
    let runner = AcpRunner::new(config());
    let backend = mock_backend(
        "stubborn",
        &[
            ("MOCK_ACP_EXIT_ON_EOF", "0"),
            ("MOCK_ACP_SPAWN_CHILD", "1"),
            ("MOCK_ACP_PID_FILE", &pid_file.display().to_string()),
        ],
    );
    let _session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pids = wait_for_pids(&pid_file, 2).await;
    assert!(pids.iter().all(|pid| is_alive(*pid)));
    let deadline = Duration::from_millis(1500);
    let start = Instant::now();
    runner.shutdown(deadline).await;
    assert!(
        start.elapsed() < deadline + Duration::from_millis(500),
        "shutdown took {:?}",
        start.elapsed()
    );
    for pid in pids {
        // The leader is reaped by the runner; the child by whoever reaps orphans.
        wait_gone(pid, Duration::from_secs(5)).await;
    }
    let failure = runner
        .open_session(session_spec(&backend), Arc::new(TestObserver::default()))
        .await
        .err()
        .expect("a shut-down runner opens nothing");
    assert!(failure.message.contains("shut down"), "{}", failure.message);
}

#[tokio::test]
async fn a_missing_command_names_the_command_and_backend() {
    let runner = AcpRunner::new(config());
    let mut backend = mock_backend("custom", &[]);
    backend.command = "/nonexistent/agentprism-no-such-agent".to_owned();
    let failure = runner
        .open_session(session_spec(&backend), Arc::new(TestObserver::default()))
        .await
        .err()
        .expect("spawn fails");
    assert_eq!(failure.kind, FailureKind::Execution);
    assert!(
        failure.message.contains("backend custom"),
        "{}",
        failure.message
    );
    assert!(
        failure
            .message
            .contains("/nonexistent/agentprism-no-such-agent"),
        "{}",
        failure.message
    );
    backend.id = "claude".to_owned();
    backend.origin = BackendOrigin::Builtin;
    let report = runner.probe(&backend, None, &std::env::temp_dir()).await;
    assert!(!report.probed);
    let error = report.error.expect("probe error");
    assert!(
        error.contains("AGENTPRISM_CLAUDE_ACP_CMD") && error.contains("not found"),
        "{error}"
    );
}

#[tokio::test]
async fn a_slow_initialize_fails_with_the_init_timeout() {
    let mut config = config();
    config.init_timeout = Duration::from_millis(300);
    let runner = AcpRunner::new(config);
    let backend = mock_backend("sleepy", &[("MOCK_ACP_INIT_DELAY_MS", "5000")]);
    let start = Instant::now();
    let failure = runner
        .open_session(session_spec(&backend), Arc::new(TestObserver::default()))
        .await
        .err()
        .expect("init timeout");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(failure.kind, FailureKind::Execution);
    assert!(
        failure
            .message
            .contains("backend sleepy did not answer initialize within 300 ms; is `"),
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("an ACP agent?"),
        "{}",
        failure.message
    );
    runner.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn pool_size_two_spreads_concurrent_sessions_over_two_processes() {
    let folder = tempfile::tempdir().expect("temp dir");
    let pid_file = folder.path().join("pids");
    let mut config = config();
    config.pool_size = 2;
    let runner = AcpRunner::new(config);
    let backend = mock_backend(
        "mock",
        &[("MOCK_ACP_PID_FILE", &pid_file.display().to_string())],
    );
    let (first, second) = tokio::join!(
        open(
            &runner,
            session_spec(&backend),
            Arc::new(TestObserver::default())
        ),
        open(
            &runner,
            session_spec(&backend),
            Arc::new(TestObserver::default())
        ),
    );
    let _third = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pids = wait_for_pids(&pid_file, 2).await;
    assert_eq!(
        pids.len(),
        2,
        "three sessions on at most two processes: {pids:?}"
    );
    let (mut first, mut second) = (first, second);
    let (a, b) = tokio::join!(
        prompt(
            &mut first,
            turn("@mock delay 100\none"),
            CancellationToken::new()
        ),
        prompt(
            &mut second,
            turn("@mock delay 100\ntwo"),
            CancellationToken::new()
        ),
    );
    assert_eq!(a.expect("first").text, "ECHO: one");
    assert_eq!(b.expect("second").text, "ECHO: two");
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_turn_whose_cancel_is_ignored_kills_the_process_group() {
    let folder = tempfile::tempdir().expect("temp dir");
    let pid_file = folder.path().join("pids");
    // A minimal agent that answers initialize and session/new (our ids are 1 and 2 on a fresh
    // connection), then reads and ignores everything, session/cancel included.
    let script = r#"echo $$ >> "$PID_FILE"
read -r line; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}'
read -r line; echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"deaf"}}'
while read -r line; do :; done
sleep 300"#;
    let backend = BackendSpec {
        id: "deaf".to_owned(),
        command: "sh".to_owned(),
        args: vec!["-c".to_owned(), script.to_owned()],
        env: BTreeMap::from([("PID_FILE".to_owned(), pid_file.display().to_string())]),
        session_meta: None,
        structured_output_tool: true,
        file_roots: Vec::new(),
        origin: BackendOrigin::Host,
    };
    let runner = AcpRunner::new(config());
    let mut session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pid = wait_for_pids(&pid_file, 1).await[0];
    let mut request = turn("anything");
    request.timeout = Duration::from_millis(200);
    let start = Instant::now();
    let failure = prompt(&mut session, request, CancellationToken::new())
        .await
        .expect_err("timeout");
    assert_eq!(failure.kind, FailureKind::Timeout);
    assert!(
        failure.message.contains("ignored session/cancel"),
        "{}",
        failure.message
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    wait_gone(pid, Duration::from_secs(5)).await;
    // The dead process left the pool: the next open starts another.
    let _fresh = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pids = wait_for_pids(&pid_file, 2).await;
    assert_ne!(pids[1], pid);
    runner.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn resume_reattaches_a_known_session_and_falls_back_to_a_new_one() {
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let first = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let reference = first.session_ref().expect("ref");
    let mut spec = session_spec(&backend);
    spec.resume_session = reference["sessionId"].as_str().map(str::to_owned);
    let mut resumed = open(&runner, spec, Arc::new(TestObserver::default())).await;
    assert_eq!(resumed.session_ref(), Some(reference.clone()));
    let output = prompt(&mut resumed, turn("back"), CancellationToken::new())
        .await
        .expect("resumed turn");
    assert_eq!(output.text, "ECHO: back");

    let mut spec = session_spec(&backend);
    spec.resume_session = Some("forgotten-session".to_owned());
    let fresh = open(&runner, spec, Arc::new(TestObserver::default())).await;
    let fresh_reference = fresh.session_ref().expect("ref");
    assert_ne!(fresh_reference["sessionId"], json!("forgotten-session"));
    assert_ne!(fresh_reference, reference);
    runner.shutdown(Duration::from_secs(3)).await;
}

/// A pooled process that has had no session for the idle time is stopped; within it, the next
/// session reuses the warm process.
#[tokio::test]
async fn an_idle_process_is_stopped_after_the_idle_time_and_reused_before_it() {
    let folder = tempfile::tempdir().expect("temp dir");
    let pid_file = folder.path().join("pids");
    let mut settings = config();
    let idle = Duration::from_millis(1500);
    settings.idle_ttl = Some(idle);
    let runner = AcpRunner::new(settings);
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
    prompt(&mut session, turn("one"), CancellationToken::new())
        .await
        .expect("turn");
    let pid = wait_for_pids(&pid_file, 1).await[0];
    drop(session);
    // Well within the idle time: the same process serves the next session.
    let mut again = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let released = Instant::now();
    prompt(&mut again, turn("two"), CancellationToken::new())
        .await
        .expect("turn");
    drop(again);
    assert_eq!(
        wait_for_pids(&pid_file, 1).await,
        vec![pid],
        "no second process"
    );
    assert!(is_alive(pid), "stopped while a session could still come");
    wait_gone(pid, idle + DEADLINE).await;
    assert!(
        released.elapsed() >= idle,
        "stopped after {:?}, before the idle time",
        released.elapsed()
    );
    // The next session starts a fresh process.
    let mut fresh = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let output = prompt(&mut fresh, turn("three"), CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(output.text, "ECHO: three");
    assert_eq!(wait_for_pids(&pid_file, 2).await.len(), 2);
    runner.shutdown(Duration::from_secs(3)).await;
}

/// `release_probed` (what `config` calls after its probes) ends the processes only probes
/// used, at once, and keeps the ones that served a prompt.
#[tokio::test]
async fn processes_started_only_for_probes_are_released_at_once() {
    let folder = tempfile::tempdir().expect("temp dir");
    let probed_pids = folder.path().join("probed");
    let prompted_pids = folder.path().join("prompted");
    let runner = AcpRunner::new(config());
    let probed = mock_backend(
        "probed",
        &[("MOCK_ACP_PID_FILE", &probed_pids.display().to_string())],
    );
    let prompted = mock_backend(
        "prompted",
        &[("MOCK_ACP_PID_FILE", &prompted_pids.display().to_string())],
    );
    let report = runner.probe(&probed, None, &std::env::temp_dir()).await;
    assert!(report.probed, "{report:?}");
    let mut session = open(
        &runner,
        session_spec(&prompted),
        Arc::new(TestObserver::default()),
    )
    .await;
    prompt(&mut session, turn("work"), CancellationToken::new())
        .await
        .expect("turn");
    drop(session);
    let report = runner.probe(&prompted, None, &std::env::temp_dir()).await;
    assert!(report.probed, "{report:?}");
    let probed_pid = wait_for_pids(&probed_pids, 1).await[0];
    let prompted_pid = wait_for_pids(&prompted_pids, 1).await[0];
    runner.release_probed().await;
    wait_gone(probed_pid, DEADLINE).await;
    assert!(
        is_alive(prompted_pid),
        "a process that served a prompt stays warm"
    );
    runner.shutdown(Duration::from_secs(3)).await;
    wait_gone(prompted_pid, DEADLINE).await;
}
