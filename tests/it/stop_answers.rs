//! What `stop` answers, and what the store holds afterwards (docs/cli.md "Exit codes",
//! docs/api.md "Runs executing in another process"): a whole-run stop, a one-call cancel
//! (`--call` / `callIndex`) and `--force-owner` / `forceOwner`, for a run a daemon executes
//! and a run a foreground `agentprism run` executes, asked over the CLI and over a daemon's
//! MCP `workflow` tool; `forceOwner` also against a dead owner and a foreign one (a live
//! process that is no agentprism process). A refusal must leave the run running with no stop
//! intent recorded; a success must show `aborted` in status.
//!
//! Agent calls hang (`@mock hang`) until they are cancelled, so every run stays live exactly
//! as long as the test needs. Each test has its own HOME and state folder and binds ephemeral
//! loopback ports; every process it starts is killed when it ends. Waits poll the store, the
//! mock agents' log or the process table under a deadline.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use agentprism::discovery::DaemonRecord;
use agentprism::discovery::record::read_own_record;
use agentprism::model::{Lease, RunId};
use agentprism::store::{LeaseReads, Leases, SqliteStore};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{mcp_post, open_session, try_http};
use crate::run_control::stopped_events;
use crate::support::context::{
    DEADLINE, Finished, TestContext, pids_in, process_gone, prompts_in_log, run_id_in,
};

const HEADER: &str =
    "export const meta = { name: 'stop', description: 'a run to stop', model: 'mock' };\n";

/// The mock agents' message log, under the test's folder.
const AGENT_LOG: &str = "agents.log";

/// One test's world: a persistence root every process it starts shares, and a guard that
/// kills the mock agents they spawned.
struct World {
    ctx: TestContext,
    agent_pids: PathBuf,
}

/// A child in its own process group, killed with its group if the test drops it unfinished.
struct Process {
    child: Option<Child>,
}

/// A running daemon and the record it published.
struct Daemon {
    process: Process,
    record: DaemonRecord,
}

/// A control intent of a run as the store keeps it.
#[derive(Debug)]
struct Intent {
    op: String,
    action: String,
    acked: bool,
    outcome: Value,
}

impl World {
    fn new() -> World {
        let ctx = TestContext::new();
        let agent_pids = ctx.path("agent-pids");
        let agent_log = ctx.path(AGENT_LOG);
        let ctx = ctx
            .with_mock_backend(json!({
                "MOCK_ACP_PID_FILE": agent_pids,
                "MOCK_ACP_LOG": agent_log,
            }))
            .set("AGENTPRISM_DAEMON_PORT", "0");
        World { ctx, agent_pids }
    }

    /// Starts `agentprism daemon run` with `extra` env (another env family when it holds a
    /// fingerprinted variable) and waits for its record and `/healthz`.
    fn daemon(&self, extra: &[(&str, &str)]) -> Daemon {
        let mut command = self.ctx.command(&["daemon", "run"]);
        command.envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = self.log_file("daemon");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn the daemon");
        let process = Process { child: Some(child) };
        let path = self
            .ctx
            .state()
            .join(format!("daemons/instances/{}.json", process.pid()));
        let record = wait_for("the daemon's record", || {
            read_own_record(&path).filter(|record| {
                !record.control_url.is_empty()
                    && try_http(record.port, "GET", "/healthz?challenge=x", &[], "")
                        .is_some_and(|reply| reply.status == 200)
            })
        });
        Daemon { process, record }
    }

    /// Starts `agentprism run` of `script` in the foreground of its own process and waits
    /// until its first agent call, prompted `first_prompt`, is live.
    fn foreground(&self, script: &str, first_prompt: &str) -> (Process, String) {
        let name = format!("foreground-{}", uuid::Uuid::new_v4().simple());
        let path = self.ctx.write(&format!("{name}.js"), script);
        let log = self.ctx.path(&format!("{name}.log"));
        let child = self
            .ctx
            .command(&["run", &path.to_string_lossy(), "--permissions", "reject"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the foreground log"))
            .spawn()
            .expect("spawn agentprism run");
        let mut process = Process { child: Some(child) };
        let run_id = wait_for("the foreground run's id", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(status) = process.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                panic!("`agentprism run` ended ({status}):\n{text}");
            }
            run_id_in(&text)
        });
        self.wait_prompt(first_prompt);
        (process, run_id)
    }

    fn log_file(&self, what: &str) -> std::fs::File {
        let name = format!("{what}-{}.log", uuid::Uuid::new_v4().simple());
        std::fs::File::create(self.ctx.path(&name)).expect("create a log")
    }

    /// Waits until a mock agent has been prompted with text starting with `start`: the call
    /// is live in its owner from then on.
    fn wait_prompt(&self, start: &str) {
        wait_for(&format!("a prompt starting {start:?}"), || {
            prompts_in_log(&self.ctx, AGENT_LOG)
                .iter()
                .any(|prompt| prompt.starts_with(start))
                .then_some(())
        });
    }

    fn run(&self, args: &[&str]) -> Finished {
        self.ctx.run(args)
    }

    fn status(&self, run_id: &str) -> String {
        self.ctx.status(run_id)["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The control intents of `run_id` in the store, acknowledged or not.
    fn intents(&self, run_id: &str) -> Vec<Intent> {
        let database = self
            .ctx
            .state()
            .join(agentprism::store::sqlite::DATABASE_FILE);
        let connection = rusqlite::Connection::open(&database).expect("open the store");
        let mut statement = connection
            .prepare(
                "SELECT intents.op, intents.action, intents.acked_at IS NOT NULL, intents.outcome
                 FROM control_intents AS intents JOIN runs USING (run_key)
                 WHERE runs.run_id = ?1 ORDER BY intents.requested_at, intents.op",
            )
            .expect("query the intents");
        statement
            .query_map([run_id], |row| {
                let outcome: Option<String> = row.get(3)?;
                Ok(Intent {
                    op: row.get(0)?,
                    action: row.get(1)?,
                    acked: row.get(2)?,
                    outcome: outcome
                        .and_then(|text| serde_json::from_str(&text).ok())
                        .unwrap_or(Value::Null),
                })
            })
            .expect("list the intents")
            .collect::<Result<_, _>>()
            .expect("read the intents")
    }

    /// The stop intents of `run_id` (cancel-agent intents left out).
    fn stop_intents(&self, run_id: &str) -> Vec<Intent> {
        let mut intents = self.intents(run_id);
        intents.retain(|intent| intent.action == "stop");
        intents
    }

    /// What a successful whole-run stop leaves: the run aborted with one `stopped` event,
    /// and no stop intent left for anyone to carry out.
    fn assert_stopped(&self, run_id: &str) {
        assert_eq!(self.status(run_id), "aborted");
        assert_eq!(stopped_events(&self.ctx.state(), run_id), 1);
        let intents = self.stop_intents(run_id);
        assert!(intents.iter().all(|intent| intent.acked), "{intents:?}");
    }

    /// What a refused stop leaves: the run running and no stop intent recorded.
    fn assert_untouched(&self, run_id: &str) {
        assert_eq!(self.status(run_id), "running");
        let intents = self.stop_intents(run_id);
        assert!(intents.is_empty(), "a refused stop recorded {intents:?}");
        assert_eq!(stopped_events(&self.ctx.state(), run_id), 0);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for pid in pids_in(&self.agent_pids) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_none())
    }

    /// Waits for the process to exit; its exit code.
    fn wait(mut self) -> Option<i32> {
        let mut child = self.child.take().expect("running");
        wait_for("the process to exit", || child.try_wait().expect("wait")).code()
    }

    /// Kills the process group and reaps it.
    fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl Daemon {
    /// Starts `script` in this daemon through its `workflow` tool and waits until its first
    /// agent call, prompted `first_prompt`, is live; the run id.
    fn start_run(&self, world: &World, script: &str, first_prompt: &str) -> String {
        let answer = self.tool(json!({
            "action": "run", "projectDir": world.ctx.project(), "script": script,
        }));
        let run_id = answer["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no runId: {answer}"))
            .to_owned();
        world.wait_prompt(first_prompt);
        run_id
    }

    /// The `workflow` tool's structured answer to `arguments`, or `{error: text}` for a tool
    /// error.
    fn tool(&self, arguments: Value) -> Value {
        let session = open_session(self.record.port);
        let reply = mcp_post(
            self.record.port,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "workflow", "arguments": arguments}}),
        );
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let result = reply.json()["result"].clone();
        if result["isError"] == true {
            return json!({"error": result["content"][0]["text"]});
        }
        result["structuredContent"].clone()
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

/// `count` agent calls in sequence, each hanging until it is cancelled; call `i` is prompted
/// `step{i} {tag}`, so cancelling one lets the run go on to the next.
fn steps(tag: &str, count: usize) -> String {
    let calls: String = (0..count)
        .map(|i| format!("await agent('step{i} {tag}\\n@mock hang');\n"))
        .collect();
    format!("{HEADER}{calls}return 'done';\n")
}

/// The error text of a tool answer, or a panic naming the answer.
fn tool_error(answer: &Value) -> &str {
    answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a tool error, got {answer}"))
}

/// A run a daemon executes, stopped with `agentprism stop` from another process: one call
/// cancelled (the run goes on), `--force-owner` refused because the daemon is current (exit
/// 2, nothing recorded, nothing signalled), the whole run stopped by its owner (exit 0).
#[test]
fn stop_over_the_cli_of_a_run_a_daemon_executes() {
    let world = World::new();
    let mut daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &steps("d-cli", 2), "step0 d-cli");

    let cancel = world.run(&["stop", &run_id, "--call", "0"]);
    assert_eq!(cancel.code(), 0, "{}", cancel.stderr);
    assert!(
        cancel.stderr.contains("cancelled call 0"),
        "{}",
        cancel.stderr
    );
    world.wait_prompt("step1 d-cli");
    world.assert_untouched(&run_id);

    let forced = world.run(&["stop", &run_id, "--force-owner"]);
    assert_eq!(forced.code(), 2, "{}", forced.stderr);
    assert!(
        forced.stderr.contains("--force-owner refused"),
        "{}",
        forced.stderr
    );
    world.assert_untouched(&run_id);
    assert!(
        forced.stderr.contains("not superseded"),
        "{}",
        forced.stderr
    );
    assert!(
        daemon.process.alive(),
        "a refused --force-owner signals nothing"
    );

    let stopped = world.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains(&format!(
            "aborted (stopped by daemon pid {})",
            daemon.record.pid
        )),
        "{}",
        stopped.stderr
    );
    world.assert_stopped(&run_id);
    let intents = world.stop_intents(&run_id);
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(intents[0].outcome["state"], "settled", "{intents:?}");
}

/// A run a daemon executes, stopped over MCP: through another daemon's `workflow` tool one
/// call is cancelled and `forceOwner` is refused (the owner is current), and a plain stop
/// settles in the owner; through the owner's own tool `forceOwner` has no other owner to end
/// and stops the run here.
#[test]
fn stop_over_mcp_of_a_run_a_daemon_executes() {
    let world = World::new();
    let mut owner = world.daemon(&[]);
    // Another env family sharing the store: its engine executes none of the runs.
    let other = world.daemon(&[("AGENTPRISM_AGENT_TIMEOUT_MS", "1800001")]);
    let run_id = owner.start_run(&world, &steps("d-mcp", 2), "step0 d-mcp");

    let cancel = other.tool(json!({"action": "stop", "runId": run_id, "callIndex": 0}));
    assert_eq!(cancel["cancelled"], json!({"callIndex": 0}), "{cancel}");
    world.wait_prompt("step1 d-mcp");
    world.assert_untouched(&run_id);

    let forced = other.tool(json!({"action": "stop", "runId": run_id, "forceOwner": true}));
    assert!(
        tool_error(&forced).contains("forceOwner refused"),
        "{forced}"
    );
    world.assert_untouched(&run_id);
    assert!(tool_error(&forced).contains("not superseded"), "{forced}");
    assert!(
        owner.process.alive(),
        "a refused forceOwner signals nothing"
    );

    let stopped = other.tool(json!({"action": "stop", "runId": run_id}));
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert_eq!(stopped["status"], "aborted", "{stopped}");
    assert_eq!(stopped["control"]["state"], "settled", "{stopped}");
    assert_eq!(stopped["control"]["owner"]["pid"], owner.record.pid);
    world.assert_stopped(&run_id);

    let own = owner.start_run(&world, &steps("d-own", 1), "step0 d-own");
    let forced = owner.tool(json!({"action": "stop", "runId": own, "forceOwner": true}));
    assert_eq!(forced["stopped"], true, "{forced}");
    assert_eq!(forced["status"], "aborted", "{forced}");
    world.assert_stopped(&own);
    assert!(owner.process.alive(), "the owner never ends itself");
}

/// `forceOwner` of a run a foreground `agentprism run` executes (a live owner that is no
/// daemon, so never superseded) is refused over the CLI (exit 2) and over MCP with nothing
/// recorded, and the run keeps running: the foreground process, which looks for intents,
/// then carries out two one-call cancels (CLI, MCP), and the run goes on past both.
#[test]
fn force_owner_of_a_run_a_foreground_process_executes_is_refused_and_the_run_goes_on() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let (mut foreground, run_id) = world.foreground(&steps("f-force", 3), "step0 f-force");

    let forced = world.run(&["stop", &run_id, "--force-owner"]);
    assert_eq!(forced.code(), 2, "{}", forced.stderr);
    assert!(
        forced.stderr.contains("--force-owner refused"),
        "{}",
        forced.stderr
    );
    world.assert_untouched(&run_id);
    assert!(forced.stderr.contains("no daemon"), "{}", forced.stderr);

    let forced = daemon.tool(json!({"action": "stop", "runId": run_id, "forceOwner": true}));
    assert!(
        tool_error(&forced).contains("forceOwner refused"),
        "{forced}"
    );
    world.assert_untouched(&run_id);
    assert!(tool_error(&forced).contains("no daemon"), "{forced}");
    assert!(foreground.alive(), "a refused forceOwner signals nothing");

    // Each cancel is an intent the foreground process finds in the same look as any stop
    // intent: once both are acknowledged, a recorded stop would have ended the run.
    let cancel = world.run(&["stop", &run_id, "--call", "0"]);
    assert_eq!(cancel.code(), 0, "{}", cancel.stderr);
    assert!(
        cancel.stderr.contains("cancelled call 0"),
        "{}",
        cancel.stderr
    );
    world.wait_prompt("step1 f-force");
    let cancel = daemon.tool(json!({"action": "stop", "runId": run_id, "callIndex": 1}));
    assert_eq!(cancel["cancelled"], json!({"callIndex": 1}), "{cancel}");
    world.wait_prompt("step2 f-force");
    world.assert_untouched(&run_id);
    let intents = world.intents(&run_id);
    assert!(
        intents.len() == 2
            && intents
                .iter()
                .all(|intent| intent.acked && intent.outcome["cancelled"] == true),
        "{intents:?}"
    );
    assert!(foreground.alive());
}

/// A whole-run stop of a run a foreground `agentprism run` executes, from another terminal
/// and through a daemon's `workflow` tool: the stopper waits for the foreground process to
/// carry out the recorded intent and answers stopped (exit 0), not pending.
#[test]
fn a_whole_run_stop_of_a_foreground_run_waits_for_it_and_answers_stopped() {
    let world = World::new();
    let (by_cli, cli_run) = world.foreground(&steps("f-cli", 1), "step0 f-cli");
    let started = Instant::now();
    let stopped = world.run(&["stop", &cli_run]);
    let took = started.elapsed();
    eprintln!("`agentprism stop` of a foreground run took {took:?}");
    assert_eq!(stopped.code(), 0, "{}\n{}", stopped.stdout, stopped.stderr);
    assert!(
        stopped.stderr.contains(&format!(
            "aborted (stopped by process pid {})",
            by_cli.pid()
        )),
        "{}",
        stopped.stderr
    );
    world.assert_stopped(&cli_run);
    assert_eq!(by_cli.wait(), Some(1), "a stopped run exits 1");

    let daemon = world.daemon(&[]);
    let (by_mcp, mcp_run) = world.foreground(&steps("f-mcp", 1), "step0 f-mcp");
    let stopped = daemon.tool(json!({"action": "stop", "runId": mcp_run}));
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert_eq!(stopped["status"], "aborted", "{stopped}");
    assert_eq!(stopped["control"]["state"], "settled", "{stopped}");
    assert_eq!(stopped["control"]["owner"]["pid"], by_mcp.pid());
    assert_eq!(
        stopped["control"]["owner"]["controlProtocol"], 0,
        "{stopped}"
    );
    world.assert_stopped(&mcp_run);
    let intents = world.stop_intents(&mcp_run);
    assert!(
        intents.len() == 1 && stopped["control"]["operationId"] == intents[0].op.as_str(),
        "{intents:?}"
    );
    assert_eq!(by_mcp.wait(), Some(1), "a stopped run exits 1");
}

/// Runs whose owner died (a daemon, a foreground process): a one-call cancel is refused
/// with nothing recorded, and `forceOwner` has nobody to end, so the run is stopped here,
/// over the CLI and over MCP.
#[test]
fn force_owner_of_a_run_whose_owner_died_stops_it_here() {
    let world = World::new();
    let owner = world.daemon(&[]);
    let by_cli = owner.start_run(&world, &steps("dead-1", 1), "step0 dead-1");
    let by_mcp = owner.start_run(&world, &steps("dead-2", 1), "step0 dead-2");
    let (foreground, by_foreground) = world.foreground(&steps("dead-3", 1), "step0 dead-3");
    let owner_pid = owner.record.pid as i32;
    let foreground_pid = foreground.pid() as i32;
    owner.process.kill();
    foreground.kill();
    wait_for("the owners to be gone", || {
        (process_gone(owner_pid) && process_gone(foreground_pid)).then_some(())
    });

    let cancel = world.run(&["stop", &by_cli, "--call", "0"]);
    assert_eq!(cancel.code(), 2, "{}", cancel.stderr);
    assert!(cancel.stderr.contains("no live owner"), "{}", cancel.stderr);
    assert_ne!(world.status(&by_cli), "aborted");
    assert!(world.intents(&by_cli).is_empty());

    for run_id in [&by_cli, &by_foreground] {
        let forced = world.run(&["stop", run_id, "--force-owner"]);
        assert_eq!(forced.code(), 0, "{}", forced.stderr);
        world.assert_stopped(run_id);
    }
    let stopper = world.daemon(&[]);
    let forced = stopper.tool(json!({"action": "stop", "runId": by_mcp, "forceOwner": true}));
    assert_eq!(forced["stopped"], true, "{forced}");
    assert_eq!(forced["status"], "aborted", "{forced}");
    world.assert_stopped(&by_mcp);
}

/// A run whose lease a live process holds that is no agentprism process: `forceOwner` is
/// refused over the CLI and over MCP with nothing recorded or signalled; a plain stop
/// records its intent, waits the whole stop wait for an owner that never looks, and
/// answers pending (exit 1).
#[test]
fn a_foreign_owner_refuses_force_owner_and_leaves_a_plain_stop_pending() {
    let world = World::new();
    let (foreground, run_id) = world.foreground(&steps("foreign", 1), "step0 foreign");
    let foreground_pid = foreground.pid() as i32;
    foreground.kill();
    wait_for("the foreground process to be gone", || {
        process_gone(foreground_pid).then_some(())
    });
    let mut foreign = Process {
        child: Some(
            std::process::Command::new("sleep")
                .arg("600")
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn sleep"),
        ),
    };
    let foreign_id = format!("foreign-{}", uuid::Uuid::new_v4().simple());
    hand_lease_to(&world, &run_id, &foreign_id, foreign.pid());
    assert_eq!(world.status(&run_id), "running");

    let forced = world.run(&["stop", &run_id, "--force-owner"]);
    assert_eq!(forced.code(), 2, "{}", forced.stderr);
    assert!(
        forced.stderr.contains("--force-owner refused"),
        "{}",
        forced.stderr
    );
    world.assert_untouched(&run_id);
    assert!(forced.stderr.contains("no daemon"), "{}", forced.stderr);
    let daemon = world.daemon(&[]);
    let forced = daemon.tool(json!({"action": "stop", "runId": run_id, "forceOwner": true}));
    assert!(
        tool_error(&forced).contains("forceOwner refused"),
        "{forced}"
    );
    world.assert_untouched(&run_id);
    assert!(foreign.alive(), "a refused forceOwner signals nothing");

    let started = Instant::now();
    let pending = world.run(&["stop", &run_id]);
    assert_eq!(pending.code(), 1, "{}", pending.stderr);
    assert!(
        started.elapsed() >= agentprism::engine::manager::STOP_WAIT,
        "pending after {:?}, before the stop wait was over",
        started.elapsed()
    );
    let control = pending.json()["control"].clone();
    assert_eq!(control["state"], "pending", "{control}");
    assert_eq!(control["owner"]["pid"], foreign.pid());
    let intents = world.stop_intents(&run_id);
    assert!(intents.len() == 1 && !intents[0].acked, "{intents:?}");
    assert_eq!(world.status(&run_id), "running");
}

/// A daemon that holds a run's lease without executing it refuses a forwarded stop (it is not
/// the run's owner in its own eyes): the stop is refused (exit 2), and its intent is
/// acknowledged as refused, so nothing is left for the daemon to carry out later.
#[test]
fn a_stop_the_owner_refuses_leaves_no_intent_pending() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let (foreground, run_id) = world.foreground(&steps("refused", 1), "step0 refused");
    let foreground_pid = foreground.pid() as i32;
    foreground.kill();
    wait_for("the foreground process to be gone", || {
        process_gone(foreground_pid).then_some(())
    });
    hand_lease_to(
        &world,
        &run_id,
        &daemon.record.instance_id,
        daemon.record.pid,
    );

    let refused = world.run(&["stop", &run_id]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("refused the stop"),
        "{}",
        refused.stderr
    );
    assert_eq!(world.status(&run_id), "running");
    let intents = world.stop_intents(&run_id);
    assert!(
        intents.len() == 1 && intents[0].acked && intents[0].outcome["state"] == "refused",
        "{intents:?}"
    );
}

/// Replaces the lease of `run_id`, whose holder has died, with one naming the live process
/// `pid` under `owner_id`, as if that process executed the run.
fn hand_lease_to(world: &World, run_id: &str, owner_id: &str, pid: u32) {
    let store = SqliteStore::open(&world.ctx.state()).expect("open the store");
    let run_id = RunId::parse(run_id).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let previous = store.lease(&run_id).await.expect("read the lease");
        let lease = Lease {
            owner_id: owner_id.to_owned(),
            pid,
            proc_start: agentprism::util::process_start_time(pid).expect("its start time"),
            boot_id: agentprism::util::process::current_boot_id(),
            host: None,
            token: uuid::Uuid::new_v4().to_string(),
            acquired_at: agentprism::util::now_ms(),
            expires_at: None,
        };
        let expected = previous.as_ref().map(|lease| lease.token.as_str());
        assert!(
            store
                .acquire_lease(&run_id, expected, &lease)
                .await
                .expect("take the lease"),
            "the lease changed hands"
        );
    });
}
