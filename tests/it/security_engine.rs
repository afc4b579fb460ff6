//! The engine's guards against hostile scripts and hostile use (docs/security.md),
//! through the real daemon over HTTP and the real CLI: a declined or cancelled backend
//! approval is final and shows everything it would run; clocks and the prelude's helpers
//! are out of a script's reach; a microtask loop after an agent call ends the run within one
//! slice; and the daemon-wide cap admits exactly its number of runs across projects, parked
//! setups not counted. Every mock agent these tests start logs what it receives to one file,
//! so "no agent was prompted" is checked on what agents saw. Waits poll with deadlines.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::daemon::{HEADER, World, mcp_post, open_session, wait_for, wait_ready};
use crate::support::context::{DEADLINE, Running, mock_agent_binary};

/// Fresh JSON-RPC ids: a repeated id in one session is an exact retry, answered from cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(100);

/// A daemon of its own world, with every mock agent logging to `agents.log`.
struct Daemon {
    world: World,
    port: u16,
    session: String,
    _process: Running,
}

impl Daemon {
    fn start(
        adjust: impl FnOnce(
            crate::support::context::TestContext,
        ) -> crate::support::context::TestContext,
    ) -> Daemon {
        let world = World::with(|ctx| {
            let log = ctx.path("agents.log").display().to_string();
            let ctx = ctx.set("MOCK_ACP_LOG", log).set(
                "AGENTPRISM_CLAUDE_ACP_CMD",
                mock_agent_binary().display().to_string(),
            );
            adjust(ctx)
        });
        let process = world.ctx.spawn(&["daemon", "run"]);
        let record = wait_ready(&world);
        let session = open_session(record.port);
        Daemon {
            world,
            port: record.port,
            session,
            _process: process,
        }
    }

    /// One `workflow` tool call; returns its `result`.
    fn call(&self, arguments: Value) -> Value {
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let reply = mcp_post(
            self.port,
            Some(&self.session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "workflow", "arguments": arguments}}),
        );
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let answer = reply.json();
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {answer}"))
    }

    fn run_in(&self, project: &Path, script: &str) -> Value {
        self.call(json!({"action": "run", "projectDir": project, "script": script}))
    }

    fn status(&self, run_id: &str) -> Value {
        self.call(json!({"action": "status", "runId": run_id}))["structuredContent"].clone()
    }

    /// Polls status until the run is no longer running or pending.
    fn settled(&self, run_id: &str, deadline: Duration) -> Value {
        wait_for("the run to settle", deadline, || {
            let status = self.status(run_id);
            let state = status["status"].as_str().unwrap_or_default().to_owned();
            (state != "running" && state != "pending").then_some(status)
        })
    }

    fn project(&self, name: &str) -> PathBuf {
        let dir = self.world.ctx.path(name);
        std::fs::create_dir_all(&dir).expect("project dir");
        std::fs::canonicalize(dir).expect("canonical project dir")
    }

    /// The prompts agents received (`session/prompt` requests in the shared log).
    fn prompts(&self) -> Vec<Value> {
        agent_prompts(&self.world.ctx.path("agents.log"))
    }

    /// Every message any agent received: none means no agent process was even started.
    fn agent_messages(&self) -> String {
        std::fs::read_to_string(self.world.ctx.path("agents.log")).unwrap_or_default()
    }
}

fn agent_prompts(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == "session/prompt")
        .collect()
}

fn text_of(result: &Value) -> String {
    crate::support::context::first_text(result)
}

fn run_id_of(result: &Value) -> String {
    result["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId: {result:#}"))
        .to_owned()
}

/// A script whose only model is a backend it declares: a hostile command line, an
/// `LD_PRELOAD`, a `PATH`, an API key and a quote in an argument.
fn hostile_script() -> String {
    let mock = mock_agent_binary().display().to_string();
    format!(
        "export const meta = {{ name: 'evil', description: 'declares its own agent', model: 'evil',\n\
           backends: {{ evil: {{ command: {mock:?}, args: ['--flag', \"it's; id > ~/pwned\"],\n\
             env: {{ LD_PRELOAD: '/tmp/evil.so', PATH: '/tmp/evil-bin:/usr/bin', OPENAI_API_KEY: 'sk-live-0123456789', NODE_OPTIONS: '--require /tmp/x.js' }} }} }} }};\n\
         return await agent('do evil things');\n"
    )
}

fn assert_refused_as_declined(daemon: &Daemon, run_id: &str) {
    // Over MCP.
    let resumed = daemon.call(json!({"action": "resume", "runId": run_id}));
    assert_eq!(resumed["isError"], true, "{resumed:#}");
    let text = text_of(&resumed);
    assert!(
        text.contains("cannot be resumed") && text.contains("setup_declined"),
        "{text}"
    );
    // And with the CLI, which runs the engine in its own process.
    let cli = daemon.world.ctx.run(&["resume", run_id]);
    assert_ne!(cli.code(), 0, "{}", cli.stderr);
    assert!(cli.stderr.contains("setup_declined"), "{}", cli.stderr);
    // The run stays aborted with the reason, wherever it is read.
    let status = daemon.status(run_id);
    assert_eq!(
        (status["status"].as_str(), status["reason"].as_str()),
        (Some("aborted"), Some("setup_declined")),
        "{status:#}"
    );
    let cli_status = daemon.world.ctx.status(run_id);
    assert_eq!(cli_status["status"], "aborted");
    assert_eq!(cli_status["reason"], "setup_declined");
    assert_eq!(cli_status["generation"], 1, "{cli_status:#}");
}

/// The approval request shows the exact command line, every env entry (only
/// secret-looking names masked); declining over MCP is final for MCP and CLI resumes alike,
/// and no agent, declared or built in, is ever prompted.
#[test]
fn a_declined_approval_over_mcp_is_final_and_shows_what_it_would_run() {
    let daemon = Daemon::start(|ctx| ctx);
    let project = daemon.project("project");
    let ack = daemon.run_in(&project, &hostile_script());
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let document = &ack["structuredContent"];
    assert_eq!(document["status"], "pending", "{document:#}");
    let request = &document["setup"]["request"];
    assert_eq!(request["kind"], "backend-approval");
    let mock = mock_agent_binary().display().to_string();
    let expected = format!(
        "env LD_PRELOAD=/tmp/evil.so NODE_OPTIONS='--require /tmp/x.js' OPENAI_API_KEY=<masked> \
         PATH=/tmp/evil-bin:/usr/bin {mock} --flag 'it'\\''s; id > ~/pwned'"
    );
    assert_eq!(request["backends"][0]["commandLine"], expected.as_str());
    let message = request["message"].as_str().unwrap();
    assert!(message.contains(&format!("evil: {expected}")), "{message}");
    assert!(!message.contains("sk-live"), "{message}");
    assert!(!document.to_string().contains("sk-live"), "{document:#}");
    assert_eq!(request["backends"][0]["env"]["LD_PRELOAD"], "/tmp/evil.so");
    assert_eq!(request["backends"][0]["env"]["OPENAI_API_KEY"], "<masked>");

    let run_id = run_id_of(&ack);
    let setup_id = request["id"].as_str().unwrap();
    let declined = daemon.call(json!({"action": "setup-response", "runId": run_id,
        "setupId": setup_id, "response": {"action": "decline"}}));
    assert_eq!(
        declined["structuredContent"]["status"], "aborted",
        "{declined:#}"
    );
    assert_eq!(declined["structuredContent"]["reason"], "setup_declined");
    assert!(
        text_of(&declined).contains("cannot be resumed"),
        "{declined:#}"
    );
    // A later approval cannot undo it.
    let approve = daemon.call(json!({"action": "setup-response", "runId": run_id,
        "setupId": setup_id, "response": {"action": "accept", "content": {"approve": true}}}));
    assert_eq!(approve["isError"], true, "{approve:#}");

    assert_refused_as_declined(&daemon, &run_id);
    assert_eq!(daemon.prompts(), Vec::<Value>::new());
    assert_eq!(daemon.agent_messages(), "", "an agent was started");
}

/// The same with the CLI: `run` prints the command line it asks about, `setup --decline`
/// says the run cannot be resumed, and `resume` refuses it with the reason. A cancelled
/// approval (`cancel`, or a `stop` while the run waits) is final the same way.
#[test]
fn a_declined_or_cancelled_approval_from_the_cli_is_final() {
    let daemon = Daemon::start(|ctx| ctx);
    let script = daemon.world.ctx.write("project/evil.js", &hostile_script());
    let started = daemon.world.ctx.run(&["run", script.to_str().unwrap()]);
    assert!(
        started.stderr.contains("LD_PRELOAD=/tmp/evil.so") && started.stderr.contains("<masked>"),
        "{}",
        started.stderr
    );
    assert!(!started.stderr.contains("sk-live"), "{}", started.stderr);
    let run_id = started.run_id();
    let declined = daemon.world.ctx.run(&["setup", &run_id, "--decline"]);
    assert!(
        declined.stderr.contains("setup_declined") && declined.stderr.contains("cannot be resumed"),
        "{}",
        declined.stderr
    );
    assert_refused_as_declined(&daemon, &run_id);

    // `cancel` over MCP.
    let project = daemon.project("project");
    let ack = daemon.run_in(&project, &hostile_script());
    let cancelled_id = run_id_of(&ack);
    let setup_id = ack["structuredContent"]["setup"]["request"]["id"]
        .as_str()
        .unwrap();
    let cancelled = daemon.call(json!({"action": "setup-response", "runId": cancelled_id,
        "setupId": setup_id, "response": {"action": "cancel"}}));
    assert_eq!(
        cancelled["structuredContent"]["status"], "aborted",
        "{cancelled:#}"
    );
    assert_refused_as_declined(&daemon, &cancelled_id);

    // A stop while the run waits for approval cancels the approval.
    let ack = daemon.run_in(&project, &hostile_script());
    let stopped_id = run_id_of(&ack);
    let stopped = daemon.call(json!({"action": "stop", "runId": stopped_id}));
    assert_eq!(
        stopped["structuredContent"]["status"], "aborted",
        "{stopped:#}"
    );
    assert!(
        text_of(&stopped).contains("cannot be resumed"),
        "{stopped:#}"
    );
    assert_refused_as_declined(&daemon, &stopped_id);

    assert_eq!(daemon.prompts(), Vec::<Value>::new());
    assert_eq!(daemon.agent_messages(), "", "an agent was started");
}

/// Clocks: `performance.now()` and `performance.timeOrigin` are refused before
/// admission when written directly, and aliases of them, `WeakRef` and the real `Date`
/// constructor are refused when the script runs.
#[test]
fn every_clock_is_refused() {
    let daemon = Daemon::start(|ctx| ctx);
    let project = daemon.project("project");
    for (body, what) in [
        ("return performance.now();", "`performance.now()`"),
        ("return performance.timeOrigin;", "`performance.timeOrigin`"),
        ("return [Date.now()];", "`Date.now()`"),
    ] {
        let refused = daemon.run_in(&project, &format!("{HEADER}{body}\n"));
        assert_eq!(refused["isError"], true, "{body}: {refused:#}");
        assert!(
            text_of(&refused).contains(&format!("{what} is unavailable")),
            "{body}: {refused:#}"
        );
    }
    for (body, what) in [
        (
            "const p = globalThis['perf' + 'ormance'];\nreturn p.now();",
            "performance.now()",
        ),
        (
            "const p = performance;\nreturn p['time' + 'Origin'];",
            "performance.timeOrigin",
        ),
        (
            "const { now } = performance;\nreturn now();",
            "performance.now()",
        ),
        ("return new globalThis['Weak' + 'Ref']({});", "WeakRef"),
        (
            "const D = new Date(0).constructor;\nreturn D.now();",
            "Date.now()",
        ),
    ] {
        let text = refusal_or_failure(&daemon, &project, &format!("{HEADER}{body}\n"));
        assert!(
            text.contains(&format!("{what} is unavailable")),
            "{body}: {text}"
        );
    }
    assert_eq!(daemon.prompts(), Vec::<Value>::new());
}

/// The reason a script was not allowed to finish: the refusal at admission (the dry run
/// executes the script), or the failed run's message.
fn refusal_or_failure(daemon: &Daemon, project: &Path, script: &str) -> String {
    let ack = daemon.run_in(project, script);
    if ack["isError"] == true {
        return text_of(&ack);
    }
    let status = daemon.settled(&run_id_of(&ack), DEADLINE);
    assert_eq!(status["status"], "failed", "{status:#}");
    status.to_string()
}

/// Helpers: a script sees no `__ap_*` global, cannot fish the helpers out of stack
/// frames, and setting one (or replacing the built-ins they use) neither forges a result nor
/// a host error.
#[test]
fn the_prelude_helpers_are_out_of_reach() {
    let daemon = Daemon::start(|ctx| ctx);
    let project = daemon.project("project");
    // The second call is over `maxAgents`: the host rejects it, and the error it carries is
    // made by the prelude's own helper, whatever the script put on the global.
    let probe = format!(
        "{HEADER}const names = Reflect.ownKeys(globalThis).map(String).filter((n) => n.includes('__'));\n\
         const seen = ['__ap_strictJson', '__ap_makeError', '__ap_install', '__ap_call'].map((n) => typeof globalThis[n]);\n\
         globalThis.__ap_makeError = () => ({{ code: 'FORGED', recoverable: true }});\n\
         const frames = [];\n\
         try {{ Error.prepareStackTrace = (e, sites) => {{ for (const s of sites) frames.push(s.getFunction()); return ''; }}; }} catch (e) {{}}\n\
         await agent('one');\n\
         let code = null;\n\
         try {{ await agent('two'); }} catch (e) {{ code = e.code; }}\n\
         const leaked = frames.filter((f) => typeof f === 'function').map((f) => f.name);\n\
         return {{ names, seen, code, leaked }};\n"
    );
    let ack = daemon
        .call(json!({"action": "run", "projectDir": project, "script": probe, "maxAgents": 1}));
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let run_id = run_id_of(&ack);
    let status = daemon.settled(&run_id, DEADLINE);
    assert_eq!(status["status"], "completed", "{status:#}");
    let result = daemon.call(json!({"action": "result", "runId": run_id}));
    let value: Value = result["structuredContent"]["chunk"]
        .as_str()
        .and_then(|chunk| serde_json::from_str(chunk).ok())
        .unwrap_or_else(|| panic!("result: {result:#}"));
    assert_eq!(
        value,
        json!({"names": [], "seen": ["undefined", "undefined", "undefined", "undefined"], "code": "AGENT_LIMIT_EXCEEDED", "leaked": []})
    );

    // Overriding the result check's name and the built-ins it uses does not get a function
    // past it.
    let forged = format!(
        "{HEADER}globalThis.__ap_strictJson = () => '\"forged\"';\n\
         Object.keys = () => []; Array.isArray = () => false; Object.getPrototypeOf = () => Object.prototype;\n\
         return {{ f: () => 1 }};\n"
    );
    let text = refusal_or_failure(&daemon, &project, &forged);
    assert!(text.contains("strict JSON"), "{text}");
}

/// The slice: after one real agent answer, `while (true) await null` (each turn a
/// fresh microtask) ends the run with SCRIPT_ERROR once one slice has passed. The dry run
/// is left alone: its fabricated answer starts with `[dry-run]`.
#[test]
fn a_microtask_loop_after_an_agent_call_ends_the_run_within_the_slice() {
    let daemon = Daemon::start(|ctx| ctx.set("AGENTPRISM_SCRIPT_SLICE_MS", "300"));
    let project = daemon.project("project");
    let script = format!(
        "{HEADER}const r = await agent('x');\nif (!r.startsWith('[dry-run]')) while (true) await null;\nreturn r;\n"
    );
    let ack = daemon.run_in(&project, &script);
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let run_id = run_id_of(&ack);
    let started = Instant::now();
    let status = daemon.settled(&run_id, DEADLINE);
    assert_eq!(
        (status["status"].as_str(), status["errorCode"].as_str()),
        (Some("failed"), Some("SCRIPT_ERROR")),
        "{status:#}"
    );
    assert!(status.to_string().contains("300 ms"), "{status:#}");
    // One agent turn and one slice, with room for a loaded machine; without the bound the
    // run never settles and the wait above fails.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(daemon.prompts().len(), 1);
    // The daemon is free again: a well-behaved run completes.
    let ack = daemon.run_in(&project, &format!("{HEADER}return await agent('after');\n"));
    let status = daemon.settled(&run_id_of(&ack), DEADLINE);
    assert_eq!(status["status"], "completed", "{status:#}");
}

/// With `AGENTPRISM_DAEMON_MAX_RUNS=3`, three executing runs in two projects are
/// admitted while a parked setup waits in a third; the fourth run is refused with the
/// limit's name, approving the parked setup is refused too, and once a run ends there is
/// room again.
#[test]
fn the_daemon_wide_cap_holds_at_its_edge_and_parked_setups_do_not_count() {
    let daemon = Daemon::start(|ctx| ctx.set("AGENTPRISM_DAEMON_MAX_RUNS", "3"));
    let (a, b, c) = (
        daemon.project("a"),
        daemon.project("b"),
        daemon.project("c"),
    );
    let release = daemon.world.ctx.path("release");
    let holding = format!(
        "{HEADER}const a = await agent('hold\\n@mock wait_file {}');\nreturn {{ a }};\n",
        release.display()
    );

    let parked = daemon.run_in(&c, &hostile_script());
    assert_eq!(
        parked["structuredContent"]["status"], "pending",
        "{parked:#}"
    );
    let mut admitted = Vec::new();
    for project in [&a, &a, &b] {
        let ack = daemon.run_in(project, &holding);
        assert_eq!(ack["isError"], Value::Null, "{ack:#}");
        assert_eq!(ack["structuredContent"]["status"], "running", "{ack:#}");
        admitted.push(run_id_of(&ack));
    }
    // Each of the three holds its agent call, so they are all executing now.
    wait_for("three held agent calls", DEADLINE, || {
        (daemon.prompts().len() == 3).then_some(())
    });

    for project in [&c, &b] {
        let refused = daemon.run_in(project, &holding);
        assert_eq!(refused["isError"], true, "{refused:#}");
        let text = text_of(&refused);
        assert!(
            text.contains("AGENTPRISM_DAEMON_MAX_RUNS = 3")
                && text.contains("already preparing or executing 3 runs across all projects"),
            "{text}"
        );
    }
    let parked_id = run_id_of(&parked);
    let setup_id = parked["structuredContent"]["setup"]["request"]["id"]
        .as_str()
        .unwrap();
    let approve = daemon.call(json!({"action": "setup-response", "runId": parked_id,
        "setupId": setup_id, "response": {"action": "accept", "content": {"approve": true}}}));
    assert_eq!(approve["isError"], true, "{approve:#}");
    assert!(
        text_of(&approve).contains("AGENTPRISM_DAEMON_MAX_RUNS"),
        "{approve:#}"
    );
    assert_eq!(daemon.status(&parked_id)["status"], "pending");

    std::fs::write(&release, "go").expect("release the held calls");
    for run_id in &admitted {
        let status = daemon.settled(run_id, DEADLINE);
        assert_eq!(status["status"], "completed", "{status:#}");
    }
    let ack = daemon.run_in(&c, &holding);
    assert_eq!(ack["isError"], Value::Null, "{ack:#}");
    let status = daemon.settled(&run_id_of(&ack), DEADLINE);
    assert_eq!(status["status"], "completed", "{status:#}");
}
