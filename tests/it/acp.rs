//! The ACP runner against real processes: `AcpRunner` drives the scripted mock agent
//! (`examples/mock_acp_agent/`) through sessions, turns, failures, the pool and shutdown.
//!
//! Every wait has a deadline, and tests wait for conditions (a pid file line, a process gone)
//! rather than sleeping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::runner::{
    AgentObserver, AgentRunner, AgentSession, AgentUpdate, BackendOrigin, BackendSpec, FailureKind,
    PermissionOutcome, PermissionRequest, SessionSpec, StopReason, TurnRequest,
};
use agentprism::env::EnvSnapshot;
use async_trait::async_trait;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod processes;

/// Generous: two cores are shared by parallel tests; a healthy agent answers in milliseconds.
const DEADLINE: Duration = Duration::from_secs(20);

fn mock_agent_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_agentprism"))
        .parent()
        .expect("the binary has a parent directory")
        .join("examples/mock_acp_agent");
    if !path.exists() {
        panic!(
            "{} does not exist: run `cargo build --examples`",
            path.display()
        );
    }
    path
}

pub(crate) fn mock_backend(id: &str, knobs: &[(&str, &str)]) -> BackendSpec {
    BackendSpec {
        id: id.to_owned(),
        command: mock_agent_binary().display().to_string(),
        args: Vec::new(),
        env: knobs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect::<BTreeMap<_, _>>(),
        session_meta: None,
        structured_output_tool: true,
        file_roots: Vec::new(),
        origin: BackendOrigin::Host,
    }
}

/// Only what the mock needs to find `sleep`; nothing inherited from the test's environment.
fn base_env() -> EnvSnapshot {
    EnvSnapshot::from_pairs([("PATH", std::env::var("PATH").unwrap_or_default())])
}

/// Agents run under the reaper of the real binary, as in every agentprism process.
pub(crate) fn config() -> AcpConfig {
    let mut config = AcpConfig::new(base_env());
    config.supervision.reaper = Some(PathBuf::from(env!("CARGO_BIN_EXE_agentprism")));
    config.init_timeout = Duration::from_secs(10);
    config.cancel_grace = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_millis(500);
    config
}

pub(crate) fn session_spec(backend: &BackendSpec) -> SessionSpec {
    SessionSpec {
        backend: backend.clone(),
        model: None,
        mode: None,
        config_options: Vec::new(),
        effort: None,
        cwd: std::env::temp_dir(),
        mcp_servers: json!([]),
        meta: None,
        output_schema: None,
        resume_session: None,
        run_id: "run-1".to_owned(),
        call_index: 3,
        label: "writer".to_owned(),
    }
}

pub(crate) fn turn(text: &str) -> TurnRequest {
    TurnRequest {
        prompt: vec![json!({"type": "text", "text": text})],
        meta: None,
        timeout: DEADLINE,
    }
}

/// Records updates and permission requests; answers permissions with `answer`, or never.
#[derive(Default)]
pub(crate) struct TestObserver {
    updates: Mutex<Vec<AgentUpdate>>,
    permissions: Mutex<Vec<PermissionRequest>>,
    answer: Option<String>,
}

#[async_trait]
impl AgentObserver for TestObserver {
    fn update(&self, update: AgentUpdate) {
        self.updates.lock().expect("updates").push(update);
    }

    async fn request_permission(&self, request: PermissionRequest) -> PermissionOutcome {
        self.permissions.lock().expect("permissions").push(request);
        match &self.answer {
            Some(option_id) => PermissionOutcome::Selected {
                option_id: option_id.clone(),
            },
            None => std::future::pending().await,
        }
    }
}

pub(crate) async fn open(
    runner: &AcpRunner,
    spec: SessionSpec,
    observer: Arc<TestObserver>,
) -> Box<dyn AgentSession> {
    match tokio::time::timeout(DEADLINE, runner.open_session(spec, observer)).await {
        Ok(Ok(session)) => session,
        Ok(Err(failure)) => panic!("open_session failed: {failure:?}"),
        Err(_) => panic!("open_session did not finish in time"),
    }
}

pub(crate) async fn prompt(
    session: &mut Box<dyn AgentSession>,
    request: TurnRequest,
    cancel: CancellationToken,
) -> Result<agentprism::engine::runner::TurnOutput, agentprism::engine::runner::AgentFailure> {
    tokio::time::timeout(DEADLINE, session.prompt(request, cancel))
        .await
        .expect("prompt did not finish in time")
}

/// Waits until the pid file has at least `count` lines.
pub(crate) async fn wait_for_pids(path: &Path, count: usize) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        if pids.len() >= count {
            return pids;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "pid file {} has {pids:?}, wanted {count}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True while `pid` runs; a zombie waiting for a slow reaper counts as gone.
fn is_alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some(Some('Z' | 'X')))
}

async fn wait_gone(pid: i32, limit: Duration) {
    let start = Instant::now();
    while is_alive(pid) {
        assert!(
            start.elapsed() < limit,
            "process {pid} still alive after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn echo_round_trip() {
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let observer = Arc::new(TestObserver::default());
    let mut session = open(&runner, session_spec(&backend), observer.clone()).await;
    let output = prompt(&mut session, turn("hello there"), CancellationToken::new())
        .await
        .expect("echo turn");
    assert_eq!(output.text, "ECHO: hello there");
    assert_eq!(output.stop_reason, StopReason::EndTurn);
    let chunks = observer.updates.lock().expect("updates").iter().any(
        |update| matches!(update, AgentUpdate::MessageChunk(text) if text == "ECHO: hello there"),
    );
    assert!(chunks, "the observer saw the chunk");
    let reference = session.session_ref().expect("session ref");
    assert_eq!(reference["backendId"], json!("mock"));
    assert!(
        reference["sessionId"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    // Chunked replies are concatenated in order, and a second turn starts clean.
    let output = prompt(
        &mut session,
        turn("@mock chunks 3\n@mock usage_null\nabc def"),
        CancellationToken::new(),
    )
    .await
    .expect("chunked turn");
    assert_eq!(output.text, "ECHO: abc def");
    session.close().await;
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn model_and_mode_are_chosen_through_config_options_and_probe_reports_them() {
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let mut spec = session_spec(&backend);
    spec.model = Some("mock-smart".to_owned());
    spec.mode = Some("plan".to_owned());
    let mut session = open(&runner, spec, Arc::new(TestObserver::default())).await;
    let output = prompt(
        &mut session,
        turn("@mock echo_model"),
        CancellationToken::new(),
    )
    .await
    .expect("turn");
    assert_eq!(output.text, "MODEL: mock-smart MODE: plan");

    let mut spec = session_spec(&backend);
    spec.model = Some("no-such-model".to_owned());
    let failure = runner
        .open_session(spec, Arc::new(TestObserver::default()))
        .await
        .err()
        .expect("an unknown model fails");
    assert_eq!(failure.kind, FailureKind::Execution);
    assert!(
        failure.message.contains("set_config_option"),
        "{}",
        failure.message
    );

    let report = runner
        .probe(&backend, Some("mock-smart"), &std::env::temp_dir())
        .await;
    assert!(report.probed, "{report:?}");
    assert_eq!(report.current_model.as_deref(), Some("mock-smart"));
    assert_eq!(report.modes.len(), 2);
    assert!(!report.config_options.is_empty());
    assert_eq!(report.auth_methods.len(), 1);
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn auth_required_carries_the_advertised_methods() {
    let runner = AcpRunner::new(config());
    let gated = mock_backend("gated", &[("MOCK_ACP_AUTH", "required")]);
    let failure = runner
        .open_session(session_spec(&gated), Arc::new(TestObserver::default()))
        .await
        .err()
        .expect("auth required");
    assert_eq!(failure.kind, FailureKind::AuthRequired);
    assert_eq!(
        json!(failure.auth_context),
        json!({"backendId": "gated", "methods": [{"id": "mock-login", "name": "Mock login"}]})
    );
    let report = runner.probe(&gated, None, &std::env::temp_dir()).await;
    assert!(!report.probed);
    assert!(
        report
            .error
            .as_deref()
            .is_some_and(|error| error.contains("authentication")),
        "{report:?}"
    );
    assert_eq!(report.auth_methods.len(), 1);

    // The same kind when it comes from a prompt.
    let backend = mock_backend("mock", &[]);
    let mut session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let failure = prompt(
        &mut session,
        turn("@mock auth_required"),
        CancellationToken::new(),
    )
    .await
    .expect_err("auth required");
    assert_eq!(failure.kind, FailureKind::AuthRequired);
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn usage_limit_and_plain_errors_map_to_their_kinds() {
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
        turn("@mock usage_limit"),
        CancellationToken::new(),
    )
    .await
    .expect_err("usage limit");
    assert_eq!(failure.kind, FailureKind::UsageLimit);
    let failure = prompt(
        &mut session,
        turn("@mock error -32603 disk on fire"),
        CancellationToken::new(),
    )
    .await
    .expect_err("plain error");
    assert_eq!(failure.kind, FailureKind::Execution);
    assert!(
        failure.message.contains("disk on fire"),
        "{}",
        failure.message
    );
    let failure = prompt(
        &mut session,
        turn("@mock stop refusal"),
        CancellationToken::new(),
    )
    .await
    .expect_err("refusal");
    assert_eq!(failure.kind, FailureKind::Refusal);
    let failure = prompt(
        &mut session,
        turn("@mock stop max_tokens"),
        CancellationToken::new(),
    )
    .await
    .expect_err("truncated");
    assert_eq!(failure.kind, FailureKind::Truncated);
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_crash_mid_prompt_fails_the_turn_and_the_next_open_spawns_a_fresh_process() {
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
    let first = wait_for_pids(&pid_file, 1).await;
    let failure = prompt(
        &mut session,
        turn("@mock stderr last words\n@mock crash"),
        CancellationToken::new(),
    )
    .await
    .expect_err("crash");
    assert_eq!(failure.kind, FailureKind::Execution);
    for needle in [
        "backend mock",
        "exited",
        "exit status 2",
        "session/prompt",
        "last words",
    ] {
        assert!(
            failure.message.contains(needle),
            "{:?} should mention {needle}",
            failure.message
        );
    }
    let mut fresh = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let pids = wait_for_pids(&pid_file, 2).await;
    assert_ne!(pids[1], first[0]);
    let output = prompt(&mut fresh, turn("again"), CancellationToken::new())
        .await
        .expect("fresh process answers");
    assert_eq!(output.text, "ECHO: again");
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_hanging_prompt_times_out_and_is_cancelled_in_time() {
    for cancel_stop in [None, Some("end_turn")] {
        let runner = AcpRunner::new(config());
        let knobs: Vec<(&str, &str)> = cancel_stop
            .map(|stop| ("MOCK_ACP_CANCEL_STOP", stop))
            .into_iter()
            .collect();
        let backend = mock_backend("mock", &knobs);
        let mut session = open(
            &runner,
            session_spec(&backend),
            Arc::new(TestObserver::default()),
        )
        .await;
        let mut request = turn("@mock hang");
        request.timeout = Duration::from_millis(300);
        let start = Instant::now();
        let failure = prompt(&mut session, request, CancellationToken::new())
            .await
            .expect_err("timeout");
        assert_eq!(
            failure.kind,
            FailureKind::Timeout,
            "{cancel_stop:?}: {failure:?}"
        );
        assert!(
            failure.message.contains("stopped after session/cancel"),
            "{}",
            failure.message
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        // The cancel landed, so the process was kept and the session still works.
        let output = prompt(&mut session, turn("still here"), CancellationToken::new())
            .await
            .expect("next turn");
        assert_eq!(output.text, "ECHO: still here");

        let cancel = CancellationToken::new();
        let cancelling = cancel.clone();
        let (failure, ()) = tokio::join!(
            prompt(&mut session, turn("@mock hang"), cancel),
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                cancelling.cancel();
            }
        );
        assert_eq!(failure.expect_err("cancelled").kind, FailureKind::Cancelled);
        runner.shutdown(Duration::from_secs(3)).await;
    }
}

#[tokio::test]
async fn a_permission_request_reaches_the_observer_and_is_cancelled_with_the_turn() {
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let observer = Arc::new(TestObserver {
        answer: Some("allow".to_owned()),
        ..TestObserver::default()
    });
    let mut session = open(&runner, session_spec(&backend), observer.clone()).await;
    let output = prompt(
        &mut session,
        turn("@mock permission"),
        CancellationToken::new(),
    )
    .await
    .expect("turn");
    assert_eq!(output.text, "PERMISSION: allow");
    {
        let permissions = observer.permissions.lock().expect("permissions");
        let request = permissions.first().expect("asked once");
        assert_eq!(
            (
                request.run_id.as_str(),
                request.call_index,
                request.label.as_str()
            ),
            ("run-1", 3, "writer")
        );
        let kinds: Vec<&str> = request
            .options
            .iter()
            .map(|option| option.kind.as_str())
            .collect();
        assert_eq!(kinds, ["allow_once", "reject_once"]);
        assert_eq!(request.tool_call["title"], json!("Mock edit"));
    }

    // Nobody answers: the deadline cancels the turn and the pending permission with it.
    let silent = Arc::new(TestObserver::default());
    let mut session = open(&runner, session_spec(&backend), silent.clone()).await;
    let mut request = turn("@mock permission");
    request.timeout = Duration::from_millis(300);
    let failure = prompt(&mut session, request, CancellationToken::new())
        .await
        .expect_err("timeout");
    assert_eq!(failure.kind, FailureKind::Timeout);
    assert!(
        failure.message.contains("stopped after session/cancel"),
        "{}",
        failure.message
    );
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn file_system_requests_round_trip() {
    let folder = tempfile::tempdir().expect("temp dir");
    let path = folder.path().join("note.txt");
    let runner = AcpRunner::new(config());
    let backend = mock_backend("mock", &[]);
    let mut session = open(
        &runner,
        session_spec(&backend),
        Arc::new(TestObserver::default()),
    )
    .await;
    let output = prompt(
        &mut session,
        turn(&format!("@mock write {} hello file", path.display())),
        CancellationToken::new(),
    )
    .await
    .expect("write turn");
    assert_eq!(output.text, format!("WROTE: {}", path.display()));
    assert_eq!(
        std::fs::read_to_string(&path).expect("written"),
        "hello file"
    );
    let output = prompt(
        &mut session,
        turn(&format!("@mock read {}", path.display())),
        CancellationToken::new(),
    )
    .await
    .expect("read turn");
    assert_eq!(output.text, "hello file");
    runner.shutdown(Duration::from_secs(3)).await;
}

async fn ask(session: &mut Box<dyn AgentSession>, text: String) -> String {
    prompt(session, turn(&text), CancellationToken::new())
        .await
        .expect("turn")
        .text
}

#[tokio::test]
async fn file_requests_stay_inside_the_working_tree_unless_the_backend_widens_it() {
    let project = tempfile::tempdir().expect("temp dir");
    let outside = tempfile::tempdir().expect("temp dir");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    std::os::unix::fs::symlink(outside.path(), project.path().join("link")).expect("link");
    let runner = AcpRunner::new(config());
    let narrow = mock_backend("narrow", &[]);
    let mut wide = mock_backend("wide", &[]);
    wide.file_roots = vec![outside.path().to_path_buf()];
    let mut spec = session_spec(&narrow);
    spec.cwd = project.path().to_path_buf();
    let mut session = open(&runner, spec, Arc::new(TestObserver::default())).await;
    let inside = project.path().join("in.txt");
    let answer = ask(
        &mut session,
        format!("@mock write {} kept", inside.display()),
    )
    .await;
    assert_eq!(answer, format!("WROTE: {}", inside.display()));
    let answer = ask(&mut session, format!("@mock read {}", inside.display())).await;
    assert_eq!(answer, "kept");
    let written_outside = outside.path().join("new.txt");
    for text in [
        "@mock read /etc/passwd".to_owned(),
        format!("@mock write {} x", written_outside.display()),
        format!("@mock read {}/link/secret.txt", project.path().display()),
    ] {
        let answer = ask(&mut session, text.clone()).await;
        assert!(
            answer.starts_with("ERROR -32602:")
                && answer.contains("outside the call's working tree"),
            "{text}: {answer}"
        );
    }
    assert!(
        !written_outside.exists(),
        "nothing written outside the tree"
    );
    drop(session);
    let mut spec = session_spec(&wide);
    spec.cwd = project.path().to_path_buf();
    let mut session = open(&runner, spec, Arc::new(TestObserver::default())).await;
    let answer = ask(
        &mut session,
        format!("@mock read {}/link/secret.txt", project.path().display()),
    )
    .await;
    assert_eq!(answer, "secret");
    let answer = ask(
        &mut session,
        format!("@mock write {} x", written_outside.display()),
    )
    .await;
    assert_eq!(answer, format!("WROTE: {}", written_outside.display()));
    let answer = ask(&mut session, "@mock read /etc/passwd".to_owned()).await;
    assert!(answer.starts_with("ERROR -32602:"), "{answer}");
    drop(session);
    runner.shutdown(Duration::from_secs(3)).await;
}
