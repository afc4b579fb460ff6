//! The `agentprism-workflow` shim end to end (daemon.md 1.7 and section 3): real shim
//! processes driving real daemons (`agentprism daemon run`, spawned by the shim itself) on
//! ephemeral loopback ports, each test in its own HOME and state folder. Scenario 11 uses the
//! `shim_test_daemon` example, a stand-in that dies after every initialize. Every shim runs in
//! its own process group, killed on drop; every daemon a test made is killed at its end by the
//! pid its record names.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::context::{DEADLINE, TestContext, process_gone};

const LOST: &str = "session lost; the request may have completed; inspect before retrying";

fn shim_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentprism-workflow"))
}

fn test_daemon_binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_agentprism"))
        .parent()
        .expect("bin dir")
        .join("examples/shim_test_daemon");
    assert!(
        path.exists(),
        "{} does not exist: run `cargo build --examples`",
        path.display()
    );
    path
}

/// A test's world with daemons on ephemeral ports; kills every daemon it recorded on drop.
pub(crate) struct World {
    pub(crate) context: TestContext,
}

impl World {
    pub(crate) fn new() -> World {
        World::with(|context| context)
    }

    pub(crate) fn with(adjust: impl FnOnce(TestContext) -> TestContext) -> World {
        let context = adjust(TestContext::new().set("AGENTPRISM_DAEMON_PORT", "0"));
        World { context }
    }

    pub(crate) fn shim(&self) -> Shim {
        Shim::start(&self.context)
    }

    pub(crate) fn daemons_dir(&self) -> PathBuf {
        self.context.state().join("daemons")
    }

    /// The family pointer (there is one family per test).
    pub(crate) fn pointer(&self) -> Option<Value> {
        let entries = std::fs::read_dir(self.daemons_dir()).ok()?;
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension().is_some_and(|ext| ext == "json")
                    && !path.ends_with("run-control-key.json")
                    && !path.ends_with("http-token.json")
            })
            .find_map(|path| serde_json::from_slice(&std::fs::read(path).ok()?).ok())
    }

    pub(crate) fn pointer_pid(&self) -> i32 {
        self.pointer().expect("a family pointer")["pid"]
            .as_i64()
            .expect("pid") as i32
    }

    /// Pids named by instance records and the pointer.
    pub(crate) fn daemon_pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = std::fs::read_dir(self.daemons_dir().join("instances"))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|entry| {
                        entry
                            .file_name()
                            .to_str()?
                            .strip_suffix(".json")?
                            .parse()
                            .ok()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(pid) = self.pointer().and_then(|p| p["pid"].as_i64()) {
            pids.push(pid as i32);
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// `agentprism daemon`-looking processes whose environment names this test's state.
    pub(crate) fn daemon_processes(&self) -> Vec<i32> {
        let marker = format!(
            "AGENTPRISM_PERSISTENCE_ROOT={}",
            self.context.state().display()
        );
        std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                !process_gone(*pid)
                    && contains(&cmdline, b"daemon\0run")
                    && environ
                        .split(|&b| b == 0)
                        .any(|var| var == marker.as_bytes())
            })
            .collect()
    }
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

impl Drop for World {
    fn drop(&mut self) {
        let mut pids = self.daemon_pids();
        pids.extend(self.daemon_processes());
        for pid in pids {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if contains(&cmdline, b"daemon") {
                // The daemon leads its own process group (setsid): its agents go with it.
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// One running shim with its stdout as a stream of JSON messages.
pub(crate) struct Shim {
    child: Child,
    stdin: Option<ChildStdin>,
    messages: Receiver<Value>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Shim {
    pub(crate) fn start(context: &TestContext) -> Shim {
        Shim::start_with(context, &[])
    }

    pub(crate) fn start_with(context: &TestContext, extra: &[(&str, &str)]) -> Shim {
        Shim::launch(context, extra, &[])
    }

    pub(crate) fn launch(context: &TestContext, extra: &[(&str, &str)], args: &[&str]) -> Shim {
        let mut child = Command::new(shim_binary())
            .args(args)
            .env_clear()
            .envs(&context.env)
            .envs(extra.iter().copied())
            .current_dir(context.project())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentprism-workflow");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, messages) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("shim wrote a non-JSON line ({e}): {line}"));
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut pipe, &mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        let stdin = child.stdin.take();
        Shim {
            child,
            stdin,
            messages,
            stderr,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(crate) fn write(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(text.as_bytes()).expect("write to the shim");
        stdin.flush().expect("flush");
    }

    pub(crate) fn send(&mut self, message: Value) {
        self.write(&format!("{message}\n"));
    }

    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next message matching `wanted`, skipping others.
    pub(crate) fn receive(&self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            match self.messages.recv_timeout(left) {
                Ok(message) if wanted(&message) => return message,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {what} within {DEADLINE:?}; stderr:\n{}", self.stderr())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "the shim closed stdout before {what}; stderr:\n{}",
                        self.stderr()
                    )
                }
            }
        }
    }

    pub(crate) fn response(&self, id: &Value) -> Value {
        self.receive(&format!("the response to {id}"), |m| {
            m.get("id") == Some(id) && m.get("method").is_none()
        })
    }

    pub(crate) fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&json!(id))
    }

    /// `initialize` and `initialized`, as a host does.
    pub(crate) fn initialize(&mut self) -> Value {
        let answer = self.request(0, "initialize", initialize_params());
        assert!(answer.get("result").is_some(), "{answer}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    pub(crate) fn call_workflow(&mut self, id: i64, arguments: Value) -> Value {
        let answer = self.request(
            id,
            "tools/call",
            json!({"name": "workflow", "arguments": arguments}),
        );
        assert!(answer.get("result").is_some(), "{answer}");
        answer["result"].clone()
    }

    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            if started.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

pub(crate) fn initialize_params() -> Value {
    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "shim-test", "version": "1"}})
}

/// A workflow whose one agent call takes `ms` milliseconds.
pub(crate) fn slow_script(ms: u64) -> String {
    format!(
        "export const meta = {{ name: 'slow', description: 'd', model: 'mock' }};\nconst a = \
         await agent('hi\\n@mock delay {ms}');\nreturn {{ done: true }};\n"
    )
}

pub(crate) fn run_id_of(ack: &Value) -> String {
    ack["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId in {ack:#}"))
        .to_owned()
}

/// Polls `check` until it holds.
pub(crate) fn eventually(what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < DEADLINE,
            "{what} did not happen within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Established TCP connections to `port` on loopback (both directions of each show up once
/// as the client side whose remote port is `port`).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "01"
                && fields[2]
                    .rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

/// Whether every thread of `pid` is in the stopped state (`T`).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('T'))
        })
    })
}

/// Whether a daemon-side socket of `port` (local port `port`) holds unread bytes.
fn bytes_waiting_at(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 4
            && fields[3] == "01"
            && fields[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
            && fields[4]
                .split_once(':')
                .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
                .is_some_and(|rx| rx > 0)
    })
}

fn port_of(pointer: &Value) -> u16 {
    pointer["port"].as_u64().expect("port") as u16
}

/// Scenario 12: `initialize`, `initialized` and `tools/list` in one write still list tools:
/// `tools/list` cannot overtake `initialized`.
#[test]
fn three_frames_in_one_write_list_the_tools() {
    let world = World::new();
    let mut shim = world.shim();
    shim.write(&format!(
        "{}\n{}\n{}\n",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ));
    let init = shim.response(&json!(1));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let tools = shim.response(&json!(2));
    let list = tools["result"]["tools"].as_array().expect("tools");
    assert!(
        list.iter().any(|tool| tool["name"] == "workflow"),
        "{tools}"
    );
    // A line over nothing but garbage is answered, and the shim goes on.
    shim.write("not json\n");
    let error = shim.receive("a parse error", |m| m["error"]["code"] == -32700);
    assert_eq!(error["id"], Value::Null);
    assert!(shim.request(3, "ping", json!({}))["result"].is_object());
}

/// Scenario 1: eight shims starting at once against no daemon make exactly one, and the
/// pointer names it.
#[test]
fn eight_cold_shims_make_one_daemon() {
    let world = World::new();
    let mut shims: Vec<Shim> = (0..8).map(|_| world.shim()).collect();
    for shim in &mut shims {
        shim.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}));
    }
    for shim in &shims {
        assert!(shim.response(&json!(1))["result"].is_object());
    }
    let pointer_pid = world.pointer_pid();
    assert_eq!(world.daemon_pids(), vec![pointer_pid]);
    assert_eq!(world.daemon_processes(), vec![pointer_pid]);
    let status = world.context.run(&["daemon", "status", "--json"]);
    assert_eq!(status.code(), 0, "{}", status.stderr);
    assert!(
        status.stdout.contains(&pointer_pid.to_string()),
        "{}",
        status.stdout
    );
}

/// Scenario 3: closing stdin of a shim that holds the session's GET stream ends it with 0
/// within 2 s, and its session is deleted.
#[test]
fn stdin_eof_ends_the_shim_quickly() {
    let world = World::new();
    let mut shim = world.shim();
    shim.initialize();
    assert!(shim.request(1, "tools/list", json!({}))["result"].is_object());
    let port = port_of(&world.pointer().expect("pointer"));
    eventually("the GET stream", || connections_to(port) >= 1);
    let started = Instant::now();
    shim.close_stdin();
    let status = shim.wait_exit(Duration::from_secs(2)).unwrap_or_else(|| {
        panic!(
            "the shim did not exit within 2 s; stderr:\n{}",
            shim.stderr()
        )
    });
    assert!(status.success(), "{status}: {}", shim.stderr());
    assert!(started.elapsed() <= Duration::from_secs(2));
    eventually("the session's connections to close", || {
        connections_to(port) == 0
    });
}

/// Scenario 7: a spawn-lock holder that dies (SIGKILL) does not delay the next shim: the
/// kernel drops its lock.
#[test]
fn a_killed_spawn_lock_holder_does_not_block_the_next_shim() {
    let world = World::new();
    let daemons = world.daemons_dir();
    std::fs::create_dir_all(&daemons).unwrap();
    // Learn the family's lock file name from a first shim, then start over without a daemon.
    let fingerprint = {
        let mut shim = world.shim();
        shim.initialize();
        let pid = world.pointer_pid();
        drop(shim);
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        eventually("the first daemon to die", || process_gone(pid));
        std::fs::read_dir(&daemons)
            .unwrap()
            .filter_map(Result::ok)
            .find_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".spawn.lock")
                    .map(str::to_owned)
            })
            .expect("a spawn lock file")
    };
    let lock_path = daemons.join(format!("{fingerprint}.spawn.lock"));
    let mut holder = Command::new("flock")
        .arg(&lock_path)
        .args(["sleep", "300"])
        .process_group(0)
        .spawn()
        .expect("flock");
    eventually("flock to hold the lock", || {
        std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .lines()
            .any(|line| line.contains("FLOCK"))
            && holder_holds(&lock_path)
    });
    killpg(Pid::from_raw(holder.id() as i32), Signal::SIGKILL).unwrap();
    let _ = holder.wait();
    let started = Instant::now();
    let mut shim = world.shim();
    shim.initialize();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "the shim took {waited:?} after the lock holder died"
    );
    assert_eq!(world.daemon_processes().len(), 1);
}

/// Whether some process holds a flock on `path` (by inode in /proc/locks).
fn holder_holds(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let inode = format!(":{}", meta.ino());
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|line| line.contains("FLOCK") && line.split_whitespace().any(|f| f.ends_with(&inode)))
}

/// Scenario 9: the daemon is killed while a request is on the wire: that request gets
/// -32603, never a replay or a hang, and the next request succeeds on a new daemon.
#[test]
fn a_killed_daemon_fails_the_call_in_flight_and_the_next_succeeds_on_a_new_one() {
    let world = World::new();
    let mut shim = world.shim();
    shim.initialize();
    // One answered request first: the shim sends nothing after `initialized` until that is
    // answered, so afterwards the one connection left is the session's GET stream, and the
    // next request is the only thing the shim sends.
    let warm = shim.request(6, "tools/list", json!({}));
    assert!(warm["result"]["tools"].is_array(), "{warm}");
    let first = world.pointer_pid();
    let port = port_of(&world.pointer().unwrap());
    eventually("the GET stream", || connections_to(port) == 1);
    // Freeze the daemon so the request is surely delivered, then kill it. SIGSTOP takes
    // effect thread by thread: until every thread is stopped the daemon could still answer.
    kill(Pid::from_raw(first), Signal::SIGSTOP).unwrap();
    eventually("every daemon thread stopped", || all_threads_stopped(first));
    shim.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    // The request's bytes wait in a daemon-side socket: it surely reached the daemon (a
    // count of connections alone could be some other short-lived one).
    eventually("the request's bytes at the daemon", || {
        bytes_waiting_at(port)
    });
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let lost = shim.response(&json!(7));
    assert_eq!(lost["error"]["code"], -32603, "{lost}");
    assert_eq!(lost["error"]["message"], LOST);
    let next = shim.request(8, "tools/list", json!({}));
    assert!(next["result"]["tools"].is_array(), "{next}");
    let second = world.pointer_pid();
    assert_ne!(first, second);
    assert!(process_gone(first));
}

/// Scenario 10: the daemon evicts the session (test hook): one recovery, and a resource
/// subscription made before still fires afterwards.
#[test]
fn an_evicted_session_recovers_once_and_keeps_its_subscription() {
    let world = World::with(|context| context.set("AGENTPRISM_TEST_HOOKS", "1"));
    let mut shim = Shim::start_with(&world.context, &[("AGENTPRISM_LOG", "info")]);
    shim.initialize();
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(1500)}),
    );
    let run_id = run_id_of(&ack);
    let uri = format!("workflow://runs/{run_id}/events");
    let subscribed = shim.request(2, "resources/subscribe", json!({"uri": uri}));
    assert!(subscribed["result"].is_object(), "{subscribed}");
    let pointer = world.pointer().unwrap();
    let session = current_session(&world, &shim);
    let evicted = post_hook(
        port_of(&pointer),
        &format!("/debug/evict?session={session}"),
    );
    assert!(evicted.starts_with("HTTP/1.1 2"), "{evicted}");
    // The hook only queues the eviction for the daemon's main loop: wait until it is done.
    let ping = json!({"jsonrpc": "2.0", "id": "probe", "method": "ping"});
    eventually("the daemon to forget the session", || {
        crate::daemon::mcp_post(port_of(&pointer), Some(&session), &ping).status == 404
    });
    // The next request (or the session's GET stream) meets the 404; the shim recovers once.
    let answer = shim.request(3, "ping", json!({}));
    assert!(answer["result"].is_object(), "{answer}");
    assert_eq!(
        shim.stderr().matches("recovering").count(),
        1,
        "{}",
        shim.stderr()
    );
    let updated = shim.receive("a resources/updated for the run", |m| {
        m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
    });
    assert_eq!(updated["params"]["uri"], uri);
    assert_eq!(world.pointer_pid(), pointer["pid"].as_i64().unwrap() as i32);
}

/// The shim's current session id, from its verbose stderr line.
fn current_session(_world: &World, shim: &Shim) -> String {
    let stderr = shim.stderr();
    stderr
        .lines()
        .rev()
        .find_map(|line| {
            let rest = line.strip_prefix("agentprism-workflow: session ")?;
            rest.split_whitespace().next().map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no session line in:\n{stderr}"))
}

/// A bare `POST path` to the daemon; the status line and the rest.
fn post_hook(port: u16, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut answer);
    answer
}

/// Scenario 11: a daemon that dies after every initialize makes the shim give up with exit
/// code 1 after at most 6 recoveries.
#[test]
fn a_daemon_dying_after_each_initialize_ends_the_shim_after_six_recoveries() {
    let world = World::with(|context| {
        context.set(
            "AGENTPRISM_DAEMON_BIN",
            test_daemon_binary().to_string_lossy(),
        )
    });
    let mut shim = Shim::start_with(
        &world.context,
        &[("SHIM_TEST_DAEMON_DIE_AFTER_INITIALIZED", "1")],
    );
    shim.initialize();
    shim.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let status = shim
        .wait_exit(DEADLINE)
        .unwrap_or_else(|| panic!("the shim kept going; stderr:\n{}", shim.stderr()));
    let stderr = shim.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let recoveries = stderr.matches("recovering:").count();
    assert!(
        (1..=6).contains(&recoveries),
        "{recoveries} recoveries:\n{stderr}"
    );
    assert!(stderr.contains("giving up after 6 recoveries"), "{stderr}");
}

/// Scenario 4: a shim killed with SIGKILL leaves a session without connections, which the
/// daemon evicts after the session TTL; the background run it started completes.
#[test]
fn a_killed_shims_session_is_evicted_and_its_run_completes() {
    let world = World::with(|context| {
        context
            .set("AGENTPRISM_SESSION_TTL_MS", "1000")
            .set("AGENTPRISM_DAEMON_TICK_MS", "100")
    });
    let mut shim = world.shim();
    shim.initialize();
    let ack = shim.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(800)}),
    );
    let run_id = run_id_of(&ack);
    let port = port_of(&world.pointer().unwrap());
    killpg(Pid::from_raw(shim.pid()), Signal::SIGKILL).unwrap();
    eventually("the session to be evicted", || {
        daemon_log(&world).contains("evicted session")
    });
    let _ = port;
    let mut second = world.shim();
    second.initialize();
    wait_completed(&mut second, &run_id);
}

fn daemon_log(world: &World) -> String {
    std::fs::read_to_string(world.context.state().join("logs/daemon.log")).unwrap_or_default()
}

/// Polls `status` through `shim` until the run is completed, then checks its result.
fn wait_completed(shim: &mut Shim, run_id: &str) {
    let started = Instant::now();
    let mut id = 100;
    loop {
        id += 1;
        let status = shim.call_workflow(id, json!({"action": "status", "runId": run_id}));
        let state = status["structuredContent"]["state"]
            .as_str()
            .or_else(|| status["structuredContent"]["status"].as_str())
            .unwrap_or_default()
            .to_owned();
        if state == "completed" {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "run {run_id} not completed: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    id += 1;
    let result = shim.call_workflow(id, json!({"action": "result", "runId": run_id}));
    let text = result.to_string();
    assert!(text.contains("done"), "{result:#}");
}

/// The shim's promise to a host: a workflow started through one shim that is then killed
/// with SIGKILL completes, and a second shim in a new host session reads its status and
/// result.
#[test]
fn a_run_outlives_its_shim_and_a_new_session_reads_its_result() {
    let world = World::new();
    let mut first = world.shim();
    first.initialize();
    let ack = first.call_workflow(
        1,
        json!({"action": "run", "projectDir": world.context.project(), "script": slow_script(500)}),
    );
    let run_id = run_id_of(&ack);
    let daemon = world.pointer_pid();
    killpg(Pid::from_raw(first.pid()), Signal::SIGKILL).unwrap();
    let _ = first.wait_exit(DEADLINE);
    let mut second = world.shim();
    second.initialize();
    wait_completed(&mut second, &run_id);
    assert_eq!(world.pointer_pid(), daemon, "the same daemon ran it");
}

/// `--version` prints the package version, as `agentprism --version` does.
#[test]
fn the_shim_and_agentprism_report_one_version() {
    let shim = Command::new(shim_binary())
        .arg("--version")
        .output()
        .unwrap();
    let main = Command::new(env!("CARGO_BIN_EXE_agentprism"))
        .arg("--version")
        .output()
        .unwrap();
    let version = |out: &[u8]| {
        String::from_utf8_lossy(out)
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(version(&shim.stdout), version(&main.stdout));
    assert_eq!(version(&shim.stdout), env!("CARGO_PKG_VERSION"));
}

/// `--in-process` runs a private single-process server (`agentprism serve --stdio`) instead of
/// the daemon: the workflow tool answers, runs complete, and no daemon record appears.
#[test]
fn in_process_mode_serves_without_a_daemon() {
    let world = World::new();
    let mut shim = Shim::launch(&world.context, &[], &["--in-process"]);
    let init = shim.request(1, "initialize", initialize_params());
    assert_eq!(init["result"]["serverInfo"]["name"], "agentprism", "{init}");
    shim.write(&format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    ));
    let script = "export const meta = { name: 'x', description: 'd', model: 'mock' };\nreturn (await agent('hi')) && 'done';";
    // No projectDir: the in-process server belongs to the project it was started in.
    let ack = shim.call_workflow(2, json!({"action": "run", "script": script}));
    let run_id = run_id_of(&ack);
    wait_completed(&mut shim, &run_id);
    assert!(
        !world.daemons_dir().join("instances").exists()
            || std::fs::read_dir(world.daemons_dir().join("instances"))
                .map(|d| d.count())
                .unwrap_or(0)
                == 0,
        "--in-process must not start a daemon"
    );
}

/// A host that spawns the shim from a worker thread and then retires that thread (Codex
/// does after about 10 s idle) keeps its shim. `PR_SET_PDEATHSIG` would fire on the thread's
/// exit and end the shim, so the next call would fail with "Transport closed".
#[test]
fn a_shim_outlives_the_thread_that_spawned_it() {
    let world = World::new();
    let mut shim = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut shim = world.shim();
                shim.initialize();
                shim
            })
            .join()
            .expect("the spawning thread")
    });
    // The spawning thread has exited. The scenario is a call made a while later, past the
    // proxy's once-a-second parent check too.
    std::thread::sleep(Duration::from_millis(1500));
    let answer = shim.request(1, "tools/list", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    assert!(
        shim.wait_exit(Duration::ZERO).is_none(),
        "the shim exited; stderr:\n{}",
        shim.stderr()
    );
}

/// The other half of the rule above: the shim still ends with its host *process*, even while the
/// host's stdin pipe stays open (here the test holds it, so EOF cannot be what ends it).
#[test]
fn a_shim_ends_when_its_parent_process_dies() {
    let world = World::new();
    // `sh` is the host: it starts the shim with the test's stdin pipe (through fd 3: dash
    // gives a background job /dev/null even for an explicit `<&0`), prints its pid and waits.
    let mut host = Command::new("sh")
        .args(["-c", "exec 3<&0; \"$0\" <&3 3<&- & echo $!; wait"])
        .arg(shim_binary())
        .env_clear()
        .envs(&world.context.env)
        .current_dir(world.context.project())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let group = Pid::from_raw(host.id() as i32);
    let _cleanup = GroupGuard(group);
    let mut stdin = host.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(host.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the shim's pid");
    let shim: i32 = line.trim().parse().expect("a pid");
    // The shim answers, so it is up and watching its parent.
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()})
    )
    .expect("write to the shim");
    line.clear();
    stdout.read_line(&mut line).expect("the initialize answer");
    assert!(line.contains("\"result\""), "{line}");

    kill(group, Signal::SIGKILL).expect("kill the host");
    let _ = host.wait();
    let started = Instant::now();
    while !process_gone(shim) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the shim outlived its parent process by 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
}

/// Kills a process group when dropped, so a failing test leaves no shim behind.
struct GroupGuard(Pid);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}
