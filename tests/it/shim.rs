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

mod recovery;

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
