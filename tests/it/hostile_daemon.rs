//! Hostile agents and scripts against one real daemon (docs/security.md): an endless agent
//! message, a huge answer, a log bomb, floods of log lines and of phases, 100,000 calls at
//! once, 400 calls of a 1 MiB prompt at once and file requests outside the working tree.
//! Each case starts a fresh foreground daemon over its own root, runs the hostile script
//! through the `workflow` tool with an ordinary run on another backend beside it and one on
//! the hostile run's backend after it, and checks that the hostile run ends the way the
//! product promises, that both ordinary runs complete, and that the daemon's peak resident
//! memory (its `VmHWM`, which for a fresh process is this test's) stays under
//! [`PEAK_RSS_BOUND`]. Scripts that misbehave only after a real answer (not the dry run's
//! `[dry-run]` one) are judged in the run itself rather than refused at admission, whose dry
//! run executes the script too.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::daemon::{HEADER, World, mcp_post, open_session, wait_for, wait_ready};
use crate::support::context::{DEADLINE, Running, mock_agent_binary};
use crate::support::memory::{folder_bytes, peak_rss};

/// The most resident memory a daemon may reach while serving one hostile run and an
/// ordinary one.
const PEAK_RSS_BOUND: u64 = 150 << 20;

/// The most the store may hold after a run that logged past its ceiling.
const STORE_BOUND: u64 = 64 << 20;

/// Fresh JSON-RPC ids: a repeated id in one session is an exact retry, answered from cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(100);

/// The ordinary run that must complete beside a hostile one: on a backend of its own (the
/// same mock program in its own process), since an agent process a hostile turn floods is
/// stopped with every session it holds.
const ORDINARY: &str = "export const meta = { name: 'ordinary', description: 'd', model: 'plain' };\n\
                        return await agent('after');\n";

/// A foreground daemon of its own world, killed with its process group when dropped.
struct Daemon {
    world: World,
    port: u16,
    session: String,
    process: Running,
}

/// How a hostile run ended: refused at admission (its dry run executes the script), or
/// settled with a stored status.
enum Outcome {
    Refused(String),
    Settled { run_id: String, status: Value },
}

impl Outcome {
    /// The failure's whole text; fails the test when the run completed.
    fn failure(&self) -> String {
        match self {
            Outcome::Refused(text) => text.clone(),
            Outcome::Settled { status, .. } => {
                assert_eq!(status["status"], "failed", "{status:#}");
                status.to_string()
            }
        }
    }
}

impl Daemon {
    fn start() -> Daemon {
        let world = World::with(|ctx| {
            let backend = json!({"command": mock_agent_binary()});
            let backends = json!({"mock": backend, "plain": backend});
            ctx.set("AGENTPRISM_BACKENDS", backends.to_string())
        });
        let process = world.ctx.spawn(&["daemon", "run"]);
        let record = wait_ready(&world);
        assert_eq!(record.pid, process.pid());
        let session = open_session(record.port);
        Daemon {
            world,
            port: record.port,
            session,
            process,
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

    /// Starts `script` in the project; `Err` is the refusal's text.
    fn run(&self, script: &str, extra: Value) -> Result<String, String> {
        let mut arguments = json!({"action": "run", "projectDir": self.world.ctx.project(),
                                   "script": script});
        if let (Some(arguments), Value::Object(extra)) = (arguments.as_object_mut(), extra) {
            arguments.extend(extra);
        }
        let ack = self.call(arguments);
        if ack["isError"] == true {
            return Err(crate::support::context::first_text(&ack));
        }
        Ok(ack["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no run id: {ack:#}"))
            .to_owned())
    }

    /// Polls status until the run is no longer running or pending.
    fn settled(&self, run_id: &str) -> Value {
        wait_for(&format!("run {run_id} to settle"), DEADLINE, || {
            let status =
                self.call(json!({"action": "status", "runId": run_id}))["structuredContent"]
                    .clone();
            let state = status["status"].as_str().unwrap_or_default().to_owned();
            (state != "running" && state != "pending").then_some(status)
        })
    }

    /// A completed run's result value.
    fn result(&self, run_id: &str) -> Value {
        let result = self.call(json!({"action": "result", "runId": run_id}));
        result["structuredContent"]["chunk"]
            .as_str()
            .and_then(|chunk| serde_json::from_str(chunk).ok())
            .unwrap_or_else(|| panic!("no result value: {result:#}"))
    }

    /// Starts `hostile` (a script body) and an ordinary run beside it, waits for both,
    /// checks that the ordinary one completed; returns how the hostile run ended. A second
    /// ordinary run on the hostile run's own backend completes after it.
    fn survive(&self, hostile: &str, extra: Value) -> Outcome {
        let hostile = self.run(&format!("{HEADER}{hostile}\n"), extra);
        let ordinary = self
            .run(ORDINARY, json!({}))
            .expect("the ordinary run is admitted");
        let outcome = match hostile {
            Err(text) => Outcome::Refused(text),
            Ok(run_id) => {
                let status = self.settled(&run_id);
                Outcome::Settled { run_id, status }
            }
        };
        let same_backend = self
            .run(&ORDINARY.replace("'plain'", "'mock'"), json!({}))
            .expect("a run on the hostile run's backend is admitted");
        for run_id in [ordinary, same_backend] {
            let status = self.settled(&run_id);
            assert_eq!(status["status"], "completed", "{status:#}");
            assert_eq!(self.result(&run_id), json!("ECHO: after"));
        }
        // Printed for every case, so a run shows how close each one comes to the bound.
        eprintln!(
            "the daemon's peak RSS: {} MiB",
            peak_rss(self.process.pid()) >> 20
        );
        outcome
    }

    /// Checks that the daemon's peak resident memory stayed under the bound.
    fn assert_peak_under_bound(&self, case: &str) {
        let peak = peak_rss(self.process.pid());
        assert!(
            peak < PEAK_RSS_BOUND,
            "{case}: the daemon's peak RSS was {} MiB, over the bound of {} MiB",
            peak >> 20,
            PEAK_RSS_BOUND >> 20
        );
    }
}

/// The error the hostile run's first call failed with; the script got `null` for it (a
/// failed call answers `null`), so the run itself completes.
fn first_call_error(outcome: Outcome, daemon: &Daemon) -> String {
    let Outcome::Settled { run_id, status } = outcome else {
        panic!("the run was refused at admission");
    };
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(daemon.result(&run_id), Value::Null);
    let call = &status["calls"][0];
    assert_eq!(call["errorCode"], "AGENT_EXECUTION_ERROR", "{status:#}");
    call["errorMessage"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn an_endless_agent_message_fails_its_call_naming_the_limit() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "return await agent('flood\\n@mock endless_line 64');",
        json!({}),
    );
    let error = first_call_error(outcome, &daemon);
    assert!(error.contains("longer than 32 MiB"), "{error}");
    daemon.assert_peak_under_bound("endless line");
}

#[test]
fn a_huge_answer_fails_its_call_naming_the_limit() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "return await agent('huge\\n@mock big_answer 200');",
        json!({}),
    );
    let error = first_call_error(outcome, &daemon);
    assert!(error.contains("grew past 16 MiB"), "{error}");
    daemon.assert_peak_under_bound("huge answer");
}

/// 400 lines of 8 MiB after an agent call: each line is cut in the script's thread, and
/// the run completes.
#[test]
fn a_log_bomb_after_an_agent_call_costs_the_daemon_little() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "const r = await agent('x');\n\
         if (!r.startsWith('[dry-run]')) {\n\
           const big = 'x'.repeat(8 << 20);\n\
           for (let i = 0; i < 400; i++) log(big + i);\n\
         }\n\
         return r;",
        json!({}),
    );
    let Outcome::Settled { run_id, status } = outcome else {
        panic!("the log bomb was refused at admission");
    };
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(daemon.result(&run_id), json!("ECHO: x"));
    daemon.assert_peak_under_bound("log bomb");
}

/// A million small log lines after an agent call: the run fails at the line ceiling, naming
/// it, and the store keeps what fits under the ceiling, not a million lines.
#[test]
fn a_flood_of_log_lines_fails_at_the_ceiling_and_the_store_stays_small() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "const r = await agent('x');\n\
         if (!r.startsWith('[dry-run]')) for (let i = 0; i < 1000000; i++) log('line ' + i);\n\
         return r;",
        json!({}),
    );
    let text = outcome.failure();
    assert!(text.contains("more than 100000 lines"), "{text}");
    let stored = folder_bytes(&daemon.world.ctx.state());
    eprintln!("event flood: the store holds {} KiB", stored >> 10);
    assert!(
        stored < STORE_BOUND,
        "the store holds {} MiB after the flood",
        stored >> 20
    );
    daemon.assert_peak_under_bound("event flood");
}

/// `Promise.all` of 100,000 calls ends with the agent-limit error, not a lost one.
#[test]
fn a_hundred_thousand_calls_at_once_end_with_the_agent_limit_error() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "return await Promise.all(Array.from({length: 100000}, (_, i) => agent('x' + i)));",
        json!({"maxAgents": 20}),
    );
    let text = outcome.failure();
    // The refusal at admission (the dry run makes the calls too) or the run's failure.
    assert!(
        text.contains("AGENT_LIMIT_EXCEEDED") || text.contains("(maxAgents)"),
        "{text}"
    );
    assert!(!text.contains("threw null"), "{text}");
    daemon.assert_peak_under_bound("100,000 calls");
}

/// Four hundred calls sharing a 1 MiB prompt, started at once: the script's thread waits
/// while its queue holds 8 MiB of them, and the driver takes no more of them while the calls
/// it holds weigh 16 MiB, so the daemon never holds the 400 prompts (400 MiB) at once; the
/// run completes.
#[test]
fn four_hundred_calls_of_a_one_mib_prompt_at_once_are_held_a_few_at_a_time() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "const big = '@mock reply ok\\n' + 'P'.repeat(1 << 20);\n\
         const calls = [];\n\
         for (let i = 0; i < 400; i++) calls.push(agent(big).then((answer) => answer.length));\n\
         return (await Promise.all(calls)).length;",
        json!({"maxAgents": 400}),
    );
    let Outcome::Settled { run_id, status } = outcome else {
        panic!("the calls were refused at admission");
    };
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(daemon.result(&run_id), json!(400));
    daemon.assert_peak_under_bound("400 calls of a 1 MiB prompt");
}

/// An agent's `fs/read_text_file` and `fs/write_text_file` outside the project are refused
/// with -32602 and leak or write nothing; inside it they work.
#[test]
fn file_requests_outside_the_project_are_refused() {
    let daemon = Daemon::start();
    let ctx = &daemon.world.ctx;
    let secret = ctx.write("outside/secret.txt", "the secret");
    let written = ctx.path("outside/new.txt");
    let inside = ctx.write("project/notes.txt", "the notes");
    let prompts = [
        format!("@mock read {}", inside.display()),
        format!("@mock read {}", secret.display()),
        "@mock read /etc/passwd".to_owned(),
        format!("@mock write {} planted", written.display()),
    ];
    let calls: Vec<String> = prompts
        .iter()
        .map(|prompt| format!("await agent({})", json!(prompt)))
        .collect();
    let outcome = daemon.survive(&format!("return [{}];", calls.join(", ")), json!({}));
    let Outcome::Settled { run_id, status } = outcome else {
        panic!("the file requests were refused at admission");
    };
    assert_eq!(status["status"], "completed", "{status:#}");
    let answers = daemon.result(&run_id);
    let answers = answers.as_array().expect("a list of answers");
    assert_eq!(answers[0], "the notes", "{answers:?}");
    for answer in &answers[1..] {
        let answer = answer.as_str().unwrap_or_default();
        assert!(
            answer.starts_with("ERROR -32602:")
                && answer.contains("outside the call's working tree"),
            "{answer}"
        );
    }
    assert!(!written.exists(), "nothing is written outside the tree");
    daemon.assert_peak_under_bound("files outside the tree");
}

/// A million phase changes after an agent call: stored events beyond log lines have a
/// ceiling per run too. The ceiling's wording is assumed to follow the log ceilings' ("…,
/// the most agentprism keeps").
#[test]
fn a_flood_of_phases_fails_at_the_event_ceiling_and_the_store_stays_small() {
    let daemon = Daemon::start();
    let outcome = daemon.survive(
        "const r = await agent('x');\n\
         if (!r.startsWith('[dry-run]'))\n\
           for (let i = 0; i < 1000000; i++) phase(i % 2 ? 'odd' : 'even');\n\
         return r;",
        json!({}),
    );
    let stored = folder_bytes(&daemon.world.ctx.state());
    eprintln!("phase flood: the store holds {} KiB", stored >> 10);
    let text = outcome.failure();
    assert!(text.contains("the most agentprism keeps"), "{text}");
    assert!(
        stored < STORE_BOUND,
        "the store holds {} MiB after the flood",
        stored >> 20
    );
    daemon.assert_peak_under_bound("phase flood");
}
