//! Routing control to a run's lease owner (daemon.md 1.10), end to end with real processes:
//! a daemon executes a run against the mock agent, and another process sharing the same
//! persistence root (the `agentprism stop` CLI, or a second daemon of another env family
//! through its MCP `workflow` tool) stops it, cancels one agent, pauses it or answers a
//! permission. Each test has its own HOME and state folder and binds ephemeral loopback
//! ports; every process it starts is killed when it ends. Waits poll a condition with a
//! deadline; nothing sleeps to synchronise.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentprism::discovery::DaemonRecord;
use agentprism::discovery::record::{read_own_record, write_record};
use agentprism::model::RunId;
use agentprism::store::{ControlIntent, EventReads, IntentAction, IntentReads, SqliteStore};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::daemon::{open_session, try_http};
use crate::support::context::{DEADLINE, Finished, TestContext, pids_in};

const HEADER: &str =
    "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\n";

/// One test's world: a private persistence root shared by every process the test starts,
/// and a guard that kills the mock agents they spawned.
struct World {
    ctx: TestContext,
    agent_pids: PathBuf,
}

/// A running daemon and the record it published.
struct Daemon {
    process: Process,
    record: DaemonRecord,
}

/// A child in its own process group, which is killed if the test drops it unfinished.
struct Process {
    child: Option<std::process::Child>,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid() as i32), signal);
    }

    /// Waits for the process to exit; its exit status.
    fn wait(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        wait_for("the process to exit", || child.try_wait().expect("wait"))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl World {
    fn new() -> World {
        World::with_tick(None)
    }

    /// `tick`: the daemons' `AGENTPRISM_DAEMON_TICK_MS` (default: the daemon's 60 s).
    fn with_tick(tick: Option<u64>) -> World {
        let ctx = TestContext::new();
        let agent_pids = ctx.path("agent-pids");
        let mut ctx = ctx
            .with_mock_backend(json!({"MOCK_ACP_PID_FILE": agent_pids}))
            .set("AGENTPRISM_DAEMON_PORT", "0");
        if let Some(tick) = tick {
            ctx = ctx.set("AGENTPRISM_DAEMON_TICK_MS", tick.to_string());
        }
        World { ctx, agent_pids }
    }

    /// Starts `agentprism daemon run` with this world's env plus `extra` (another env
    /// family when `extra` holds a fingerprinted variable) and waits for its record.
    fn daemon(&self, extra: &[(&str, &str)]) -> Daemon {
        let mut command = self.ctx.command(&["daemon", "run"]);
        command.envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        // The log goes to a file nobody has to drain; it stays in the test's folder.
        let log = std::fs::File::create(
            self.ctx
                .path(&format!("daemon-{}.log", uuid::Uuid::new_v4().simple())),
        )
        .expect("create the daemon log");
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
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
                    && http_status(record.port, "/healthz?challenge=x") == 200
            })
        });
        Daemon { process, record }
    }

    fn run(&self, args: &[&str]) -> Finished {
        self.ctx.run(args)
    }

    fn status(&self, run_id: &str) -> Value {
        self.ctx.status(run_id)
    }

    /// How many `stopped` events the run's stream holds.
    fn stopped_events(&self, run_id: &str) -> usize {
        stopped_events(&self.ctx.state(), run_id)
    }

    /// The stop acknowledgements written for the run.
    fn acks(&self, run_id: &str) -> Vec<Value> {
        acks(&self.ctx.state(), run_id)
    }

    fn wait_status(&self, run_id: &str, wanted: &str) -> Value {
        wait_for(&format!("run {run_id} to be {wanted}"), || {
            Some(self.status(run_id)).filter(|status| status["status"] == wanted)
        })
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for pid in pids_in(&self.agent_pids) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Daemon {
    /// Starts `script` in this daemon through its MCP `workflow` tool; returns the run id.
    /// `maxAgents` is the dry run's ceiling, so a long script needs no size confirmation.
    fn start_run(&self, world: &World, script: &str) -> String {
        let session = open_session(self.record.port);
        let answer = call_tool(
            self.record.port,
            &session,
            json!({"action": "run", "projectDir": world.ctx.project(), "script": script,
                   "maxAgents": 10000}),
        );
        answer["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no runId: {answer}"))
            .to_owned()
    }

    /// The `workflow` tool's structured answer to `arguments`.
    fn tool(&self, arguments: Value) -> Value {
        let session = open_session(self.record.port);
        call_tool(self.record.port, &session, arguments)
    }

    fn socket(&self) -> PathBuf {
        agentprism::control::socket_path_from_url(&self.record.control_url)
            .unwrap_or_else(|| panic!("no control socket in {:?}", self.record))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
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

fn http_status(port: u16, path: &str) -> u16 {
    try_http(port, "GET", path, &[], "").map_or(0, |reply| reply.status)
}

/// POSTs one JSON-RPC message; returns the session header and the JSON answer (if any).
fn mcp_post(port: u16, session: Option<&str>, message: &Value) -> (Option<String>, Value) {
    let reply = crate::daemon::mcp_post(port, session, message);
    assert!(
        reply.status == 200 || reply.status == 202,
        "HTTP {}: {}",
        reply.status,
        String::from_utf8_lossy(&reply.body)
    );
    let answer = if reply.body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        reply.json()
    };
    (reply.header("mcp-session-id").map(str::to_owned), answer)
}

/// `tools/call workflow` with `arguments`; the structured answer, or the error text.
fn call_tool(port: u16, session: &str, arguments: Value) -> Value {
    let (_, answer) = mcp_post(
        port,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "workflow", "arguments": arguments}}),
    );
    let result = &answer["result"];
    if result["isError"] == true {
        return json!({"error": result["content"][0]["text"]});
    }
    result["structuredContent"].clone()
}

/// How many `stopped` events the stream of `run_id` in the store under `state` holds.
pub(crate) fn stopped_events(state: &Path, run_id: &str) -> usize {
    let store = SqliteStore::open(state).expect("open the store");
    let run_id = RunId::parse(run_id).unwrap();
    let events = runtime()
        .block_on(store.events(&run_id, 0, 100_000))
        .expect("read events");
    events
        .iter()
        .filter(|e| e.event.event_type().as_deref() == Some("stopped"))
        .count()
}

/// The control acknowledgements written for `run_id` in the store under the persistence
/// root `state`, as documents (`IntentAck::document`: `{version, op, runId, ackedAt, ackedBy}`
/// and the outcome's fields). The store lists pending intents only, so the operation ids
/// come from its table; each acknowledgement is then read through the store.
pub(crate) fn acks(state: &Path, run_id: &str) -> Vec<Value> {
    let database = state.join(agentprism::store::sqlite::DATABASE_FILE);
    if !database.exists() {
        return Vec::new();
    }
    let ops: Vec<String> = {
        let connection = rusqlite::Connection::open(&database).expect("open the store");
        let mut statement = connection
            .prepare(
                "SELECT intents.op FROM control_intents AS intents JOIN runs USING (run_key)
                 WHERE runs.run_id = ?1 AND intents.acked_at IS NOT NULL
                 ORDER BY intents.acked_at, intents.op",
            )
            .expect("query the intents");
        statement
            .query_map([run_id], |row| row.get(0))
            .expect("list the intents")
            .collect::<Result<_, _>>()
            .expect("read the intents")
    };
    let store = SqliteStore::open(state).expect("open the store");
    let run_id = RunId::parse(run_id).unwrap();
    ops.iter()
        .map(|op| {
            let ack = runtime()
                .block_on(store.intent_ack(&run_id, op))
                .expect("read the acknowledgement")
                .expect("an acknowledged intent");
            ack.document(&run_id, op)
        })
        .collect()
}

/// The control intent `op` of `run_id` as the store under `state` keeps it.
fn intent_of(state: &Path, run_id: &str, op: &str) -> Option<ControlIntent> {
    let store = SqliteStore::open(state).expect("open the store");
    let run_id = RunId::parse(run_id).unwrap();
    runtime()
        .block_on(store.intent(&run_id, op))
        .expect("read the intent")
}

fn slow_script() -> String {
    format!("{HEADER}const a = await agent('slow\\n@mock delay 60000');\nreturn {{a}};\n")
}

fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().mode() & 0o777
}

/// A forwarded stop settles in the owner: aborted, exactly one `stopped` event, an ack
/// beside the intent. Before that, `--force-owner` is refused: the owner is current.
#[test]
fn a_forwarded_stop_settles_in_the_owner_with_one_stopped_event_and_an_ack() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &slow_script());
    assert_eq!(world.status(&run_id)["status"], "running");

    let forced = world.run(&["stop", &run_id, "--force-owner"]);
    assert_ne!(forced.code(), 0, "{}", forced.stderr);
    assert!(
        forced.stderr.contains("not superseded"),
        "{}",
        forced.stderr
    );
    assert_eq!(world.status(&run_id)["status"], "running");
    assert!(nix::sys::signal::kill(Pid::from_raw(daemon.record.pid as i32), None).is_ok());

    let stopped = world.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains(&format!("stopped by daemon pid {}", daemon.record.pid)),
        "{}",
        stopped.stderr
    );
    assert_eq!(world.status(&run_id)["status"], "aborted");
    assert_eq!(world.stopped_events(&run_id), 1);
    let acks = world.acks(&run_id);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0]["state"], "settled");
    assert_eq!(acks[0]["stopped"], true);
    // The intent was recorded before it was forwarded, in the store, whose database is as
    // private as the intent files were (0600).
    let op = acks[0]["op"].as_str().unwrap();
    let intent = intent_of(&world.ctx.state(), &run_id, op).expect("the recorded intent");
    assert_eq!(intent.action, IntentAction::Stop);
    assert_eq!(intent.call_index, None);
    let database = world
        .ctx
        .state()
        .join(agentprism::store::sqlite::DATABASE_FILE);
    assert_eq!(file_mode(&database), 0o600);

    // Stopping a stopped run again is a successful no-op, with no new event.
    let again = world.run(&["stop", &run_id]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("had already ended"),
        "{}",
        again.stderr
    );
    assert_eq!(world.stopped_events(&run_id), 1);
}

/// The owner's control socket is gone: the stop is `pending` with an operation id that a
/// retry repeats; with the socket back, the retry settles under that same operation.
#[test]
fn an_unreachable_owner_leaves_a_pending_stop_that_a_retry_completes() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &slow_script());
    let socket = daemon.socket();
    let hidden = socket.with_extension("hidden");
    std::fs::rename(&socket, &hidden).expect("hide the control socket");

    let first = world.run(&["stop", &run_id]);
    assert_eq!(first.code(), 1, "{}", first.stderr);
    let control = first.json()["control"].clone();
    assert_eq!(control["state"], "pending", "{control}");
    assert_eq!(control["owner"]["pid"], daemon.record.pid);
    assert_eq!(
        control["owner"]["instanceId"],
        daemon.record.instance_id.as_str()
    );
    assert_eq!(control["owner"]["controlProtocol"], 1);
    assert_eq!(control["owner"]["lameDuck"], false);
    assert!(control["requestedAt"].is_string(), "{control}");
    let op = control["operationId"].as_str().unwrap().to_owned();

    let retry = world.run(&["stop", &run_id]);
    assert_eq!(retry.code(), 1, "{}", retry.stderr);
    assert_eq!(retry.json()["control"]["operationId"], op.as_str());
    assert_eq!(world.status(&run_id)["status"], "running");
    assert!(world.acks(&run_id).is_empty());

    std::fs::rename(&hidden, &socket).expect("restore the control socket");
    let settled = world.run(&["stop", &run_id]);
    assert_eq!(settled.code(), 0, "{}", settled.stderr);
    assert_eq!(world.status(&run_id)["status"], "aborted");
    assert_eq!(world.stopped_events(&run_id), 1);
    let acks = world.acks(&run_id);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0]["op"], op.as_str());
}

/// A pending stop is carried out by the owner itself: it scans intents on every tick.
#[test]
fn the_owner_carries_out_a_pending_stop_on_its_next_tick() {
    let world = World::with_tick(Some(200));
    let daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &slow_script());
    std::fs::remove_file(daemon.socket()).expect("remove the control socket");

    let pending = world.run(&["stop", &run_id]);
    assert_eq!(pending.code(), 1, "{}", pending.stderr);
    let op = pending.json()["control"]["operationId"]
        .as_str()
        .unwrap()
        .to_owned();
    world.wait_status(&run_id, "aborted");
    let acks = wait_for("the owner's ack", || {
        Some(world.acks(&run_id)).filter(|acks| !acks.is_empty())
    });
    assert_eq!(acks[0]["op"], op.as_str());
    assert_eq!(acks[0]["ackedBy"], daemon.record.pid);
    assert_eq!(world.stopped_events(&run_id), 1);
}

/// Without a live owner, cancel-agent is an error that leaves the run alone, while a
/// whole-run stop is carried out cold.
#[test]
fn a_dead_owner_refuses_cancel_agent_and_is_stopped_cold() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &slow_script());
    assert_eq!(world.status(&run_id)["status"], "running");
    daemon.process.signal(Signal::SIGKILL);
    let killed = daemon.process.wait();
    assert!(killed.code().is_none(), "the daemon was killed");

    let cancel = world.run(&["stop", &run_id, "--call", "0"]);
    assert_ne!(cancel.code(), 0, "{}", cancel.stderr);
    assert!(cancel.stderr.contains("no live owner"), "{}", cancel.stderr);
    assert_ne!(world.status(&run_id)["status"], "aborted");
    assert_eq!(world.stopped_events(&run_id), 0);

    let stopped = world.run(&["stop", &run_id]);
    assert_eq!(stopped.code(), 0, "{}", stopped.stderr);
    assert_eq!(world.status(&run_id)["status"], "aborted");
    assert_eq!(world.stopped_events(&run_id), 1);
}

/// cancel-agent from the CLI, the pending permission listed by `status` and answered
/// through a second daemon's MCP tool, and pause from that tool all reach the owner.
#[test]
fn cancel_agent_permissions_and_pause_are_forwarded_to_the_owner() {
    let world = World::new();
    let owner = world.daemon(&[]);
    // Another env family sharing the store: its engine holds none of the runs.
    let other = world.daemon(&[("AGENTPRISM_AGENT_TIMEOUT_MS", "1800001")]);
    assert_ne!(owner.record.env_fingerprint, other.record.env_fingerprint);

    let script = format!(
        "{HEADER}const [a, b] = await parallel([() => agent('slow\\n@mock delay 60000'), () => agent('ask\\n@mock permission')]);\nreturn {{a, b}};\n"
    );
    let run_id = owner.start_run(&world, &script);
    let pending = wait_for("the forwarded permission list", || {
        let status = world.status(&run_id);
        status["pendingPermissions"]
            .as_array()
            .and_then(|list| list.first().cloned())
    });
    let permission_index = pending["callIndex"].as_u64().unwrap();
    let slow_index = 1 - permission_index;

    let cancel = world.run(&["stop", &run_id, "--call", &slow_index.to_string()]);
    assert_eq!(cancel.code(), 0, "{}", cancel.stderr);
    assert_eq!(world.status(&run_id)["status"], "running");

    let listed = other.tool(json!({"action": "status", "runId": run_id}));
    assert_eq!(
        listed["pendingPermissions"][0]["permissionId"],
        pending["permissionId"]
    );
    let option = pending["options"][0]["optionId"].as_str().unwrap();
    let answered = other.tool(json!({
        "action": "permissions-response",
        "runId": run_id,
        "permissionId": pending["permissionId"],
        "response": {"outcome": {"outcome": "selected", "optionId": option}},
    }));
    assert_eq!(answered["accepted"], true, "{answered}");
    let done = world.wait_status(&run_id, "completed");
    assert_eq!(done["outcome"]["result"]["a"], Value::Null, "{done}");
    assert!(
        done["outcome"]["result"]["b"]
            .as_str()
            .is_some_and(|b| b.contains("PERMISSION")),
        "{done}"
    );

    // Pause through the other daemon: the owner lets the running step finish, then parks.
    let steps = format!(
        "{HEADER}for (let i = 0; i < 200; i++) {{ await agent('step ' + i + '\\n@mock delay 300'); }}\nreturn 'done';\n"
    );
    let paced = owner.start_run(&world, &steps);
    let paused = other.tool(json!({"action": "pause", "runId": paced}));
    assert_eq!(paused["pauseRequested"], true, "{paused}");
    let status = world.wait_status(&paced, "paused");
    assert_eq!(status["reason"], "requested", "{status}");
}

/// `forceOwner` ends a superseded owner that still holds the run, then stops the run cold.
#[test]
fn force_owner_ends_a_superseded_owner_and_stops_the_run() {
    let world = World::new();
    let daemon = world.daemon(&[]);
    let run_id = daemon.start_run(&world, &slow_script());
    let mut record = daemon.record.clone();
    record.state = agentprism::discovery::DaemonState::Superseded;
    record.superseded_by = Some(uuid::Uuid::new_v4().to_string());
    // Its control socket is gone too, so an ordinary stop stays pending.
    std::fs::remove_file(daemon.socket()).expect("remove the control socket");
    write_record(
        &world
            .ctx
            .state()
            .join(format!("daemons/instances/{}.json", record.pid)),
        &record,
    )
    .expect("mark the owner superseded");
    let pending = world.run(&["stop", &run_id]);
    assert_eq!(pending.code(), 1, "{}", pending.stderr);
    assert_eq!(pending.json()["control"]["owner"]["lameDuck"], true);

    let forced = world.run(&["stop", &run_id, "--force-owner"]);
    assert_eq!(forced.code(), 0, "{}", forced.stderr);
    let ended = daemon.process.wait();
    assert_eq!(ended.code(), Some(0), "SIGTERM ends the daemon");
    assert_eq!(world.status(&run_id)["status"], "aborted");
    assert_eq!(world.stopped_events(&run_id), 1);
    let acks = world.acks(&run_id);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0]["op"], pending.json()["control"]["operationId"]);
}

/// `stop --call N` reaches a foreground run, which has no control socket, through a durable
/// cancel intent that it carries out within a second; the sibling call goes on.
#[test]
fn a_foreground_run_cancels_one_call_through_an_intent() {
    let world = World::new();
    let script = world.ctx.write(
        "two.js",
        &format!(
            "{HEADER}const [a, b] = await parallel([() => agent('slow\\n@mock delay 60000'), () => agent('quick')]);\nreturn {{a, b}};\n"
        ),
    );
    let script = script.to_string_lossy().into_owned();
    let log = world.ctx.path("foreground.log");
    let child = world
        .ctx
        .command(&["run", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("foreground log"))
        .spawn()
        .expect("spawn agentprism run");
    let foreground = Process { child: Some(child) };
    let run_id = wait_for("the foreground run", || {
        let listed = world.run(&["runs", "--all", "--json"]);
        listed.json().as_array()?.first().and_then(|run| {
            (run["status"] == "running").then(|| run["runId"].as_str().unwrap().to_owned())
        })
    });
    // Call 0 is live once its prompt reached the agent; until then the owner answers that it
    // is not a live call, and the cancel is asked again.
    let cancelled = wait_for("call 0 cancelled", || {
        let cancel = world.run(&["stop", &run_id, "--call", "0"]);
        (cancel.code() == 0).then_some(cancel)
    });
    assert!(
        cancelled.stderr.contains("cancelled call 0"),
        "{}",
        cancelled.stderr
    );
    let exit = foreground.wait();
    assert_eq!(
        exit.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let done = world.status(&run_id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["outcome"]["result"]["a"], Value::Null, "{done}");
    assert!(done["outcome"]["result"]["b"].is_string(), "{done}");
    let acks = world.acks(&run_id);
    assert!(
        acks.iter()
            .any(|ack| ack["cancelled"] == true && ack["callIndex"] == 0),
        "{acks:?}"
    );
}

/// The MCP `workflow` tool of another daemon routes stop the same way: `forceOwner` is
/// refused for a current owner, a plain stop settles in the owner.
#[test]
fn a_stop_through_another_daemons_workflow_tool_is_forwarded() {
    let world = World::new();
    let owner = world.daemon(&[]);
    let other = world.daemon(&[("AGENTPRISM_AGENT_TIMEOUT_MS", "1800001")]);
    let run_id = owner.start_run(&world, &slow_script());

    let forced = other.tool(json!({"action": "stop", "runId": run_id, "forceOwner": true}));
    assert!(
        forced["error"]
            .as_str()
            .is_some_and(|text| text.contains("not superseded")),
        "{forced}"
    );
    assert_eq!(world.status(&run_id)["status"], "running");

    let stopped = other.tool(json!({"action": "stop", "runId": run_id}));
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert_eq!(stopped["status"], "aborted", "{stopped}");
    assert_eq!(stopped["control"]["state"], "settled", "{stopped}");
    assert_eq!(stopped["control"]["owner"]["pid"], owner.record.pid);
    assert_eq!(world.stopped_events(&run_id), 1);
    assert_eq!(world.acks(&run_id).len(), 1);
}
