//! Reopening an interrupted call's session when its run resumes, through the real binaries
//! and the mock agent: after a usage pause, after the daemon executing the run was killed and
//! started again, and after a stop, the agent reopens the journaled session and gets the
//! continuation prompt, or, when it cannot reopen sessions, a fresh session and the original
//! prompt. And `keepSession: true` leaves a call's session open at its end. Each test has its
//! own HOME and state folder and binds ephemeral loopback ports; every process it starts is
//! killed when it ends. Waits poll the mock's log or the run's status with a deadline.

use std::time::{Duration, Instant};

use agentprism::discovery::record::read_own_record;
use agentprism::model::RunId;
use agentprism::store::{EventReads, SqliteStore};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{mcp_post, open_session, try_http};
use crate::support::context::{DEADLINE, TestContext, pids_in, prompts_in_log};

const SCRIPT: &str = "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\nreturn await agent('the task\\n@mock usage_limit');\n";

const CONTINUATION: &str = "You were interrupted. Continue the task you were given; when done, give your final answer as asked.";

/// Every inbound message of `method` in the mock's log.
fn messages(ctx: &TestContext, method: &str) -> Vec<Value> {
    std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == method)
        .collect()
}

/// The methods the mock received, in order, for failure messages.
fn trail(ctx: &TestContext) -> String {
    std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|message| format!("{} {}", message["method"], message["params"]["sessionId"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The methods the mock process of the resume received: those after the second `initialize`
/// (the first process also answered the admission probe).
fn resumed_methods(ctx: &TestContext) -> Vec<String> {
    let methods: Vec<String> = std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|message| message["method"].as_str().map(str::to_owned))
        .collect();
    let second = methods
        .iter()
        .enumerate()
        .filter(|(_, method)| *method == "initialize")
        .nth(1)
        .map_or(methods.len(), |(at, _)| at);
    methods[second..].to_vec()
}

/// Runs [`SCRIPT`] until its usage-limit pause; returns the run id and the paused session's id.
fn paused_run(ctx: &TestContext) -> (String, String) {
    let path = ctx.write("wf.js", SCRIPT);
    let paused = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let run_id = paused.run_id();
    assert_eq!(ctx.status(&run_id)["reason"], "usage_limit");
    let prompts = messages(ctx, "session/prompt");
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let session_id = prompts[0]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    (run_id, session_id)
}

#[test]
fn a_usage_paused_call_reopens_its_session_with_the_continuation_prompt() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    // The resumed run talks to a new mock process, which reopens the id as an agent that
    // keeps its sessions on disk would.
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let (run_id, session_id) = paused_run(&ctx);

    let done = ctx.run(&["resume", &run_id]);
    assert_eq!(done.code(), 0, "{}\n{}", done.stderr, trail(&ctx));
    let reopens: Vec<Value> = ["session/resume", "session/load"]
        .iter()
        .flat_map(|method| messages(&ctx, method))
        .collect();
    assert_eq!(reopens.len(), 1, "{reopens:?}");
    assert_eq!(reopens[0]["params"]["sessionId"], session_id.as_str());
    assert_eq!(
        resumed_methods(&ctx),
        [
            "initialize",
            "session/resume",
            "session/prompt",
            "session/close"
        ],
        "{}",
        trail(&ctx)
    );
    let prompts = prompts_in_log(&ctx, "agent.log");
    assert_eq!(
        prompts.last().map(String::as_str),
        Some(CONTINUATION),
        "{prompts:?}"
    );
    let last_prompt = messages(&ctx, "session/prompt").pop().unwrap();
    assert_eq!(last_prompt["params"]["sessionId"], session_id.as_str());
    assert_eq!(done.json(), json!(format!("ECHO: {CONTINUATION}")));
}

#[test]
fn without_the_capability_the_call_starts_fresh_with_its_original_prompt() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({
        "MOCK_ACP_LOG": log,
        "MOCK_ACP_LOAD_UNKNOWN": "1",
        "MOCK_ACP_LOAD_SESSION": "0",
    }));
    let (run_id, _) = paused_run(&ctx);

    let again = ctx.run(&["resume", &run_id]);
    assert_eq!(
        again.code(),
        3,
        "the original prompt hits the limit again: {}",
        again.stderr
    );
    assert!(messages(&ctx, "session/resume").is_empty());
    assert!(messages(&ctx, "session/load").is_empty());
    assert_eq!(
        resumed_methods(&ctx),
        [
            "initialize",
            "session/new",
            "session/prompt",
            "session/close"
        ],
        "{}",
        trail(&ctx)
    );
    let prompts = prompts_in_log(&ctx, "agent.log");
    assert_eq!(prompts, vec!["the task\n@mock usage_limit"; 2]);
}

#[test]
fn continue_prompt_replaces_the_default_continuation() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let script = SCRIPT.replace(
        "@mock usage_limit')",
        "@mock usage_limit', {continuePrompt: 'carry on'})",
    );
    let path = ctx.write("wf.js", &script);
    let paused = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(paused.code(), 3, "{}", paused.stderr);
    let done = ctx.run(&["resume", &paused.run_id()]);
    assert_eq!(done.code(), 0, "{}\n{}", done.stderr, trail(&ctx));
    assert_eq!(done.json(), json!("ECHO: carry on"));
}

/// A script whose call holds its turn until the file `release` appears.
fn held_script(release: &std::path::Path) -> String {
    format!(
        "export const meta = {{ name: 'test', description: 'a test workflow', model: 'mock' }};\nreturn await agent('the task\\n@mock wait_file {}');\n",
        release.display()
    )
}

/// A test's daemons and mock agents, killed when it ends.
struct Daemons {
    ctx: TestContext,
    running: Vec<std::process::Child>,
}

impl Daemons {
    /// A world whose mock agents log to `agent.log`, with `env` added to theirs.
    fn new(env: Value) -> Daemons {
        let ctx = TestContext::new();
        let mut agent_env = json!({
            "MOCK_ACP_LOG": ctx.path("agent.log"),
            "MOCK_ACP_PID_FILE": ctx.path("agent-pids"),
        });
        for (key, value) in env.as_object().expect("an object") {
            agent_env[key] = value.clone();
        }
        let ctx = ctx
            .with_mock_backend(agent_env)
            .set("AGENTPRISM_DAEMON_PORT", "0");
        Daemons {
            ctx,
            running: Vec::new(),
        }
    }

    /// Starts `agentprism daemon run` and waits until it serves; its MCP port.
    fn start(&mut self) -> u16 {
        let log =
            std::fs::File::create(self.ctx.path(&format!("daemon-{}.log", self.running.len())))
                .expect("create the daemon log");
        let child = self
            .ctx
            .command(&["daemon", "run"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn the daemon");
        let record = self
            .ctx
            .state()
            .join(format!("daemons/instances/{}.json", child.id()));
        self.running.push(child);
        let record = wait_for("the daemon's record", || {
            read_own_record(&record).filter(|record| {
                !record.control_url.is_empty()
                    && try_http(record.port, "GET", "/healthz?challenge=x", &[], "")
                        .is_some_and(|reply| reply.status == 200)
            })
        });
        record.port
    }

    /// Kills the last daemon started, as a crash would, and the agents it ran.
    fn crash(&mut self) {
        let mut child = self.running.pop().expect("a daemon");
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
        for pid in pids_in(&self.ctx.path("agent-pids")) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    /// Starts `script` in the daemon at `port` through its MCP `workflow` tool.
    fn start_run(&self, port: u16, script: &str) -> String {
        let session = open_session(port);
        let reply = mcp_post(
            port,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "workflow", "arguments": {"action": "run",
                    "projectDir": self.ctx.project(), "script": script}}}),
        );
        let answer = reply.json();
        answer["result"]["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no runId: {answer}"))
            .to_owned()
    }

    /// Waits until the mock received the held call's prompt; the id of its session.
    fn held_session(&self) -> String {
        wait_for("the call's prompt to reach the agent", || {
            messages(&self.ctx, "session/prompt")
                .into_iter()
                .find(|prompt| {
                    prompt["params"]["prompt"][0]["text"]
                        .as_str()
                        .is_some_and(|text| text.starts_with("the task"))
                })
                .and_then(|prompt| prompt["params"]["sessionId"].as_str().map(str::to_owned))
        })
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in &mut self.running {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
        for pid in pids_in(&self.ctx.path("agent-pids")) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, failing after [`DEADLINE`].
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The messages the mock received after the first `count`, as (method, session id, first
/// prompt text).
fn messages_after(ctx: &TestContext, count: usize) -> Vec<(String, String, String)> {
    std::fs::read_to_string(ctx.path("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"].is_string())
        .skip(count)
        .map(|message| {
            let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
            (
                text(&message["method"]),
                text(&message["params"]["sessionId"]),
                text(&message["params"]["prompt"][0]["text"]),
            )
        })
        .collect()
}

/// How many requests the mock received so far.
fn logged(ctx: &TestContext) -> usize {
    messages_after(ctx, 0).len()
}

/// The run's stored events of `kind`.
fn events_of(ctx: &TestContext, run_id: &str, kind: &str) -> Vec<Value> {
    let store = SqliteStore::open(&ctx.state()).expect("open the store");
    let run_id = RunId::parse(run_id).expect("a run id");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime
        .block_on(store.events(&run_id, 0, 10_000))
        .expect("events")
        .into_iter()
        .map(|event| event.event.value())
        .filter(|event| event["type"] == kind)
        .collect()
}

/// Resumes `run_id` after its interruption and checks what the agent was asked: the
/// journaled session `session_id` reopened with the continuation prompt (`reopens`), or a
/// fresh session with the original prompt.
fn resume_and_check(daemons: &Daemons, run_id: &str, session_id: &str, reopens: bool) {
    let ctx = &daemons.ctx;
    std::fs::write(ctx.path("release"), "").expect("release the original prompt");
    let before = logged(ctx);
    let done = ctx.run(&["resume", run_id]);
    assert_eq!(done.code(), 0, "{}\n{}", done.stderr, trail(ctx));
    let after: Vec<(String, String, String)> = messages_after(ctx, before)
        .into_iter()
        .filter(|(method, _, _)| method.starts_with("session/") && method != "session/close")
        .collect();
    let opened = after
        .iter()
        .position(|(method, _, _)| {
            ["session/new", "session/load", "session/resume"].contains(&method.as_str())
        })
        .unwrap_or_else(|| panic!("no session opened: {after:?}"));
    let prompt = after[opened..]
        .iter()
        .find(|(method, _, _)| method == "session/prompt")
        .unwrap_or_else(|| panic!("no prompt: {after:?}"));
    let end = events_of(ctx, run_id, "agentEnd");
    let end = end.last().expect("an agentEnd");
    if reopens {
        let (method, reopened, _) = &after[opened];
        assert!(
            method == "session/resume" || method == "session/load",
            "{after:?}"
        );
        assert_eq!(reopened, session_id);
        assert_eq!(
            (prompt.1.as_str(), prompt.2.as_str()),
            (session_id, CONTINUATION)
        );
        assert_eq!(done.json(), json!(format!("ECHO: {CONTINUATION}")));
        assert_eq!(end["session"]["reopened"], true, "{end}");
        let starts = events_of(ctx, run_id, "agentStart");
        assert_eq!(starts.last().unwrap()["reopening"], session_id);
    } else {
        assert_eq!(after[opened].0, "session/new", "{after:?}");
        assert!(prompt.2.starts_with("the task"), "{after:?}");
        assert_ne!(prompt.1, session_id);
    }
}

/// The session ids the store journaled for the run's live calls.
fn journaled_sessions(ctx: &TestContext, run_id: &str) -> Vec<String> {
    let database = ctx.state().join(agentprism::store::sqlite::DATABASE_FILE);
    let connection = rusqlite::Connection::open(&database).expect("open the store");
    let mut statement = connection
        .prepare(
            "SELECT sessions.session FROM open_sessions AS sessions JOIN runs USING (run_key)
             WHERE runs.run_id = ?1",
        )
        .expect("prepare");
    let references = statement
        .query_map([run_id], |row| row.get::<_, String>(0))
        .expect("query")
        .collect::<Result<Vec<_>, _>>()
        .expect("read");
    references
        .iter()
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .filter_map(|reference| reference["sessionId"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_call_cut_off_by_a_daemon_crash_reopens_its_journaled_session() {
    // A new mock process reopens the id, as an agent that keeps its sessions on disk would.
    let mut daemons = Daemons::new(json!({"MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let port = daemons.start();
    let run_id = daemons.start_run(port, &held_script(&daemons.ctx.path("release")));
    let session_id = daemons.held_session();
    // The session is journaled with the generation's next write, at most a tick after it
    // opened; the crash comes once it is on record.
    wait_for("the session to be journaled", || {
        journaled_sessions(&daemons.ctx, &run_id)
            .contains(&session_id)
            .then_some(())
    });
    daemons.crash();
    daemons.start();
    resume_and_check(&daemons, &run_id, &session_id, true);
}

#[test]
fn after_a_crash_an_agent_that_cannot_reopen_gets_a_fresh_session_and_the_original_prompt() {
    let mut daemons = Daemons::new(json!({
        "MOCK_ACP_LOAD_UNKNOWN": "1",
        "MOCK_ACP_LOAD_SESSION": "0",
    }));
    let port = daemons.start();
    let run_id = daemons.start_run(port, &held_script(&daemons.ctx.path("release")));
    let session_id = daemons.held_session();
    daemons.crash();
    daemons.start();
    resume_and_check(&daemons, &run_id, &session_id, false);
}

#[test]
fn a_stopped_call_reopens_its_journaled_session_on_resume() {
    let mut daemons = Daemons::new(json!({"MOCK_ACP_LOAD_UNKNOWN": "1"}));
    let port = daemons.start();
    let run_id = daemons.start_run(port, &held_script(&daemons.ctx.path("release")));
    let session_id = daemons.held_session();
    let stopped = daemons.ctx.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    wait_for("the run to be aborted", || {
        Some(daemons.ctx.status(&run_id)).filter(|status| status["status"] == "aborted")
    });
    resume_and_check(&daemons, &run_id, &session_id, true);
}

#[test]
fn a_stopped_call_of_an_agent_that_cannot_reopen_starts_fresh_on_resume() {
    let mut daemons = Daemons::new(json!({"MOCK_ACP_LOAD_SESSION": "0"}));
    let port = daemons.start();
    let run_id = daemons.start_run(port, &held_script(&daemons.ctx.path("release")));
    let session_id = daemons.held_session();
    let stopped = daemons.ctx.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    wait_for("the run to be aborted", || {
        Some(daemons.ctx.status(&run_id)).filter(|status| status["status"] == "aborted")
    });
    resume_and_check(&daemons, &run_id, &session_id, false);
}

#[test]
fn keep_session_leaves_the_session_open_and_the_default_closes_it() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    for (option, closed) in [("{keepSession: true}", false), ("{}", true)] {
        let before = logged(&ctx);
        let path = ctx.write(
            "wf.js",
            &format!(
                "export const meta = {{ name: 'test', description: 'a test workflow', model: 'mock' }};\nreturn await agent('keep it', {option});\n"
            ),
        );
        let done = ctx.run(&["run", path.to_str().unwrap()]);
        assert_eq!(done.code(), 0, "{option}: {}", done.stderr);
        let after = messages_after(&ctx, before);
        let session = after
            .iter()
            .find(|(method, _, text)| method == "session/prompt" && text == "keep it")
            .map(|(_, session, _)| session.clone())
            .unwrap_or_else(|| panic!("{option}: no prompt in {after:?}"));
        let closes = after
            .iter()
            .filter(|(method, id, _)| method == "session/close" && *id == session)
            .count();
        assert_eq!(closes, usize::from(closed), "{option}: {after:?}");
    }
}
