//! Real MCP hosts end to end, installed by `scripts/install-test-deps`: Claude Code
//! (`claude -p`), Codex (`codex exec`), Gemini CLI (`gemini -p`), Qwen Code (`qwen -p`) and
//! opencode (`opencode run`), with agentprism registered in their MCP configuration as the
//! stdio shim and over Streamable HTTP (`setup.rs`). Their model is the scripted fake in
//! `support::fake_host_model` on loopback, so nothing reaches the network and no key is needed.
//! `inspector.rs` lists our tools with the MCP Inspector's CLI.
//!
//! Claude Code and Codex, one scenario per transport, in two host sessions:
//! 1. The fake model sees the `workflow` tool in the host's tool list (with its schema) and
//!    calls `run`, whose preparation takes 15 s (the mock agent's `initialize` is slow, and the
//!    zero-token probe waits for it); it then thinks for 15 s before calling `status`. Both
//!    stretches exceed the ~10 s after which Codex retires the thread that spawned the shim.
//!    After that `status` (the run waits for a file) the fake parks, and the test kills the
//!    host with SIGKILL: the run keeps running in the daemon.
//! 2. The test lets the run finish; a new host session polls `status` until the run is
//!    terminal, reads `result` and answers; the answer and the result crossed the host.
//!
//! Gemini CLI, Qwen Code and opencode, one scenario per transport, in three host sessions and
//! without the 15 s pauses (they exist for Codex's thread retirement):
//! 1. `run` (6 s of preparation), then `status` (the run's agent waits for a file that never
//!    comes), and the host is killed with SIGKILL mid-run: the run keeps running in the daemon.
//! 2. A new session looks at the run with `status`, `stop`s it, and polls `status` until it
//!    reads `aborted`, then reads `result`.
//! 3. Another session finds the run terminal at its first `status` and reads `result`.
//!
//! Each host's two scenarios run at once in one test. Every host gets its own HOME, which also
//! tags every process it starts: a sweeper kills what still carries it when the test ends, and
//! the world's daemons are killed by their records.

mod inspector;
pub(crate) mod process;
mod setup;

use std::time::{Duration, Instant};

use serde_json::json;

use crate::shim::World;
use crate::support::fake_host_model::{FakeHostModel, Plan, Step};
use setup::{Deps, Endpoint, HostSetup};

/// The name agentprism is registered under, in every snippet and doc.
const SERVER: &str = "agentprism-workflow";
/// The stretches Claude Code's and Codex's connections to agentprism must survive.
const PAUSE: Duration = Duration::from_secs(15);
/// From the first host's start to the parked `status`: start-up, 15 s preparation, 15 s
/// pause, and headroom for two loaded cores.
const FIRST_SESSION_DEADLINE: Duration = Duration::from_secs(120);
/// How long a `run` of Gemini CLI, Qwen Code and opencode prepares: longer than the 5 s
/// opencode gives an MCP server's requests by default, which does not bound tool calls.
const PREPARATION: Duration = Duration::from_secs(6);
/// A later host session: start-up and a few quick calls.
const LATER_SESSION_DEADLINE: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    ClaudeCode,
    Codex,
    GeminiCli,
    QwenCode,
    Opencode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Stdio,
    Http,
}

#[test]
fn claude_code_runs_a_workflow_across_host_sessions_over_stdio_and_http() {
    both_transports(Host::ClaudeCode);
}

#[test]
fn codex_runs_a_workflow_across_host_sessions_over_stdio_and_http() {
    both_transports(Host::Codex);
}

#[test]
fn gemini_cli_runs_stops_and_outlives_a_killed_session_over_stdio_and_http() {
    both_transports(Host::GeminiCli);
}

#[test]
fn qwen_code_runs_stops_and_outlives_a_killed_session_over_stdio_and_http() {
    both_transports(Host::QwenCode);
}

#[test]
fn opencode_runs_stops_and_outlives_a_killed_session_over_stdio_and_http() {
    both_transports(Host::Opencode);
}

/// Both transports at once: each scenario mostly waits, so two in parallel cost one's time.
fn both_transports(host: Host) {
    let scenario = match host {
        Host::ClaudeCode | Host::Codex => paused_scenario,
        Host::GeminiCli | Host::QwenCode | Host::Opencode => stop_scenario,
    };
    std::thread::scope(|scope| {
        let stdio = scope.spawn(|| scenario(host, Transport::Stdio));
        let http = scope.spawn(|| scenario(host, Transport::Http));
        let (stdio, http) = (stdio.join(), http.join());
        for outcome in [stdio, http] {
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// A world whose run waits for `release`, the fake model that runs it, and the host set up.
struct Stage {
    world: World,
    release: std::path::PathBuf,
    fake: FakeHostModel,
    setup: HostSetup,
}

impl Stage {
    /// `init_delay`: how long every new mock agent takes to initialize; `pause`: how long the
    /// fake thinks after `run`.
    fn new(host: Host, transport: Transport, init_delay: Duration, pause: Duration) -> Stage {
        let deps = Deps::find();
        // The daemon's pool keeps the agent the probe started, so only preparation pays the
        // delay.
        let world = World::with(|context| {
            context.with_mock_backend(
                json!({"MOCK_ACP_INIT_DELAY_MS": init_delay.as_millis().to_string()}),
            )
        });
        let release = world.context.path("release-the-agent");
        let script = format!(
            "export const meta = {{ name: 'hosted', description: 'a workflow through a real host', model: 'mock' }};\n\
             const reply = await agent('hello from the host test\\n@mock wait_file {}');\n\
             return {{ done: true, reply }};\n",
            release.display()
        );
        let fake = FakeHostModel::start(Plan {
            server: SERVER.to_owned(),
            run_arguments: json!({"action": "run", "projectDir": world.context.project(), "script": script}),
            pause_after_run: pause,
        });
        let endpoint = match transport {
            Transport::Stdio => Endpoint::Shim,
            Transport::Http => {
                let started = world.context.run(&["daemon", "start"]);
                assert_eq!(started.code(), 0, "daemon start: {}", started.stderr);
                let url = world.pointer().expect("a daemon pointer")["url"]
                    .as_str()
                    .expect("the daemon's url")
                    .to_owned();
                Endpoint::Http(url)
            }
        };
        let setup = HostSetup::new(host, endpoint, &world, &fake, &deps);
        Stage {
            world,
            release,
            fake,
            setup,
        }
    }

    /// Session 1: `run`, `status`, and the host killed while the fake parks; the run lives on.
    fn run_and_kill_the_host(
        &self,
        host: Host,
        transport: Transport,
        deadline: Duration,
    ) -> String {
        let started = Instant::now();
        let mut first = self
            .setup
            .spawn("first", "FAKE-PLAN: run. Start the workflow and watch it.");
        let run_id = self
            .fake
            .wait_for("the parked status call", deadline, |steps| {
                steps.iter().find_map(|step| match step {
                    Step::Parked { run_id } => Some(run_id.clone()),
                    _ => None,
                })
            });
        eprintln!(
            "{host:?}/{transport:?}: run {run_id} admitted and polled after {:?}",
            started.elapsed()
        );
        assert_tool_listed(&self.fake, host);
        first.kill();
        let status = self.world.context.status(&run_id);
        assert_eq!(
            status["status"], "running",
            "the run outlives the killed host: {status:#}"
        );
        if transport == Transport::Stdio {
            self.setup.assert_no_shim_left();
        }
        run_id
    }

    /// A later session with `prompt`, which must end with the fake's answer naming the run;
    /// returns the steps it added.
    fn session(&self, label: &str, prompt: &str, run_id: &str) -> Vec<Step> {
        let before = self.fake.steps().len();
        let session = self.setup.spawn(label, prompt);
        let finished = session.finish(LATER_SESSION_DEADLINE, &self.fake);
        assert_eq!(finished.code, Some(0), "{}", finished.describe());
        assert!(
            finished.stdout.contains(&format!("FAKE-DONE {run_id}")),
            "the host printed the model's answer: {}",
            finished.describe()
        );
        let steps = self.fake.steps().split_off(before);
        assert!(
            steps
                .iter()
                .any(|step| matches!(step, Step::Answered { text } if text.contains(run_id))),
            "{steps:#?}"
        );
        steps
    }
}

/// Claude Code and Codex: the 15 s stretches, the kill, and a second session that reads the
/// released run to its end.
fn paused_scenario(host: Host, transport: Transport) {
    let started = Instant::now();
    let stage = Stage::new(host, transport, PAUSE, PAUSE);
    let run_id = stage.run_and_kill_the_host(host, transport, FIRST_SESSION_DEADLINE);

    std::fs::write(&stage.release, "").expect("release the agent");
    let steps = stage.session(
        "second",
        &format!("FAKE-PLAN: check {run_id}. Report the run's result."),
        &run_id,
    );
    let result = output_of(&steps, "result");
    assert!(
        result.contains("done"),
        "the result through the host: {result}"
    );
    let actions = actions_of(&stage.fake.steps());
    assert_eq!(
        actions.first().map(String::as_str),
        Some("run"),
        "{actions:?}"
    );
    assert_eq!(
        actions.last().map(String::as_str),
        Some("result"),
        "{actions:?}"
    );
    assert_eq!(stage.world.context.status(&run_id)["status"], "completed");
    assert_paths_faked(&stage.fake);
    eprintln!("{host:?}/{transport:?}: done in {:?}", started.elapsed());
}

/// Gemini CLI, Qwen Code, opencode: the kill mid-run, a session that stops the run, and one
/// that finds it stopped.
fn stop_scenario(host: Host, transport: Transport) {
    let started = Instant::now();
    let stage = Stage::new(host, transport, PREPARATION, Duration::ZERO);
    let run_id = stage.run_and_kill_the_host(host, transport, LATER_SESSION_DEADLINE);
    assert_eq!(
        actions_of(&stage.fake.steps()),
        ["run", "status"],
        "{host:?}/{transport:?}"
    );

    let steps = stage.session(
        "stopping",
        &format!("FAKE-PLAN: stop {run_id}. Stop the run and report."),
        &run_id,
    );
    let actions = actions_of(&steps);
    assert_eq!(
        actions[..3],
        ["status", "stop", "status"],
        "{host:?}/{transport:?}: {actions:?}"
    );
    assert_eq!(
        actions.last().map(String::as_str),
        Some("result"),
        "{actions:?}"
    );
    let stopped = output_of(&steps, "stop");
    assert!(
        stopped.to_lowercase().contains("stopped"),
        "the stop answer through the host: {stopped}"
    );
    let last_status = steps
        .iter()
        .rev()
        .find_map(|step| match step {
            Step::Output { action, text } if action == "status" => Some(text.clone()),
            _ => None,
        })
        .expect("a status output");
    assert!(
        last_status.contains("aborted"),
        "status shows the run aborted: {last_status}"
    );

    let steps = stage.session(
        "checking",
        &format!("FAKE-PLAN: check {run_id}. Report the run's result."),
        &run_id,
    );
    assert_eq!(
        actions_of(&steps),
        ["status", "result"],
        "{host:?}/{transport:?}"
    );
    let result = output_of(&steps, "result");
    assert!(
        result.contains("has no result: it is aborted"),
        "the result answer through the host: {result}"
    );
    assert_eq!(stage.world.context.status(&run_id)["status"], "aborted");
    assert_paths_faked(&stage.fake);
    eprintln!("{host:?}/{transport:?}: done in {:?}", started.elapsed());
}

/// The `action` of every `workflow` call the fake made in `steps`.
fn actions_of(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .filter_map(|step| match step {
            Step::Called { arguments } => arguments["action"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// The first output of `action` that crossed the host in `steps`.
fn output_of(steps: &[Step], action: &str) -> String {
    steps
        .iter()
        .find_map(|step| match step {
            Step::Output { action: seen, text } if seen == action => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {action} output crossed the host: {steps:#?}"))
}

/// The host listed `workflow` to the model with agentprism's schema, `args` an object.
fn assert_tool_listed(fake: &FakeHostModel, host: Host) {
    let tools = fake.listed_tools();
    let tool = tools
        .first()
        .unwrap_or_else(|| panic!("{host:?} never listed the workflow tool"));
    let seen = (
        tool.api,
        tool.namespace.as_deref(),
        tool.name.as_str(),
        tool.bridge.as_deref(),
    );
    let flat = format!("mcp__{SERVER}__workflow");
    let expected = match host {
        Host::ClaudeCode => ("anthropic", None, flat.as_str(), None),
        Host::Codex => (
            "responses",
            Some("mcp__agentprism_workflow"),
            "workflow",
            None,
        ),
        Host::GeminiCli => ("gemini", None, "mcp_agentprism-workflow_workflow", None),
        // Qwen Code defers MCP tools: the schema came in `tool_search`'s answer.
        Host::QwenCode => ("chat", None, flat.as_str(), Some("tool_call")),
        Host::Opencode => ("chat", None, "agentprism-workflow_workflow", None),
    };
    assert_eq!(seen, expected, "{tool:#?}");
    let actions = &tool.schema["properties"]["action"]["enum"];
    for action in ["run", "status", "result", "stop"] {
        assert!(
            actions
                .as_array()
                .is_some_and(|list| list.iter().any(|a| a == action)),
            "action {action} in the listed schema: {:#}",
            tool.schema
        );
    }
    assert!(
        tool.schema["properties"]["script"].is_object(),
        "{:#}",
        tool.schema
    );
    let args = &tool.schema["properties"]["args"];
    assert_eq!(args["type"], "object", "{host:?} listed args as {args:#}");
    assert!(
        tool.description.contains("workflow"),
        "{}",
        tool.description
    );
}

/// Nothing the host asked for fell through to the fake's 404.
fn assert_paths_faked(fake: &FakeHostModel) {
    let unknown: Vec<String> = fake
        .requests()
        .iter()
        .filter(|request| request.status == 404)
        .map(|request| format!("{} {}", request.method, request.path))
        .collect();
    assert!(
        unknown.is_empty(),
        "requests the fake did not know: {unknown:?}"
    );
}
