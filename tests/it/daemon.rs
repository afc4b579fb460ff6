//! The per-user daemon end to end, without the shim: the real `agentprism daemon …`
//! commands against a private persistence root per test (daemon.md section 3, scenarios 2, 5,
//! 6, 8, 13, 22, 23, 24 and the `daemon start|stop|status|url` contract). Every daemon a test
//! starts is killed when the test ends, found by its persistence root in `/proc`, so a failed
//! assertion never leaves one behind. Waits poll with deadlines; nothing sleeps to
//! synchronise.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentprism::discovery::healthz::{Challenge, IdentityMismatch, verify_identity};
use agentprism::discovery::record::read_own_record;
use agentprism::discovery::{DaemonRecord, RunControlKey, fingerprint_of};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::context::{DEADLINE, Finished, TestContext, process_gone};

mod records;

pub(crate) const HEADER: &str =
    "export const meta = { name: 'test', description: 'a test workflow', model: 'mock' };\n";

/// A test context whose daemons bind ephemeral ports, plus a guard that kills every daemon
/// serving its persistence root when dropped.
pub(crate) struct World {
    pub(crate) ctx: TestContext,
}

impl World {
    pub(crate) fn new() -> World {
        World::with(|ctx| ctx)
    }

    pub(crate) fn with(adjust: impl FnOnce(TestContext) -> TestContext) -> World {
        let ctx = TestContext::new().set("AGENTPRISM_DAEMON_PORT", "0");
        World { ctx: adjust(ctx) }
    }

    pub(crate) fn fingerprint(&self) -> String {
        family_of(&self.ctx.env)
    }

    pub(crate) fn pointer_path(&self, fingerprint: &str) -> PathBuf {
        self.ctx.state().join(format!("daemons/{fingerprint}.json"))
    }

    pub(crate) fn pointer(&self) -> Option<DaemonRecord> {
        read_own_record(&self.pointer_path(&self.fingerprint()))
    }

    pub(crate) fn instances(&self) -> Vec<PathBuf> {
        let dir = self.ctx.state().join("daemons/instances");
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// Runs `agentprism` with this world's env plus `extra`.
    pub(crate) fn run_with(&self, extra: &[(&str, &str)], args: &[&str]) -> Finished {
        let mut command = self.ctx.command(args);
        command.envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentprism");
        finish(child)
    }

    pub(crate) fn run(&self, args: &[&str]) -> Finished {
        self.run_with(&[], args)
    }

    /// `daemon start`, which must succeed; returns the pointer's record.
    pub(crate) fn start(&self) -> DaemonRecord {
        let started = self.run(&["daemon", "start"]);
        assert_eq!(
            started.code(),
            0,
            "daemon start failed:\n{}",
            started.stderr
        );
        let record = self.pointer().expect("a pointer after daemon start");
        assert_eq!(started.stdout.trim(), record.url);
        record
    }

    pub(crate) fn key(&self) -> RunControlKey {
        RunControlKey::load(&self.ctx.state().join("daemons/run-control-key.json")).expect("key")
    }

    /// Every live daemon process serving this world's root.
    pub(crate) fn daemon_pids(&self) -> Vec<i32> {
        daemons_serving(&self.ctx.state())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for pid in self.daemon_pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn family_of(env: &BTreeMap<String, String>) -> String {
    fingerprint_of(
        env.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
}

/// Pids of `agentprism daemon run` processes started with `AGENTPRISM_PERSISTENCE_ROOT=root`.
pub(crate) fn daemons_serving(root: &Path) -> Vec<i32> {
    let needle = format!("AGENTPRISM_PERSISTENCE_ROOT={}\0", root.display());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let is_daemon = cmdline
            .windows(b"daemon\0run\0".len())
            .any(|w| w == b"daemon\0run\0");
        let serves = environ
            .windows(needle.len())
            .any(|w| w == needle.as_bytes());
        if is_daemon && serves && !process_gone(pid) {
            pids.push(pid);
        }
    }
    pids
}

pub(crate) fn finish(child: std::process::Child) -> Finished {
    crate::support::context::finish_child(child, DEADLINE)
}

/// Polls `check` until it returns `Some`, failing after `deadline`.
pub(crate) fn wait_for<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A minimal HTTP/1.1 exchange with `Connection: close`.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, or the JSON-RPC response inside an SSE body.
    pub(crate) fn json(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            return text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|message| message.get("id").is_some())
                .unwrap_or_else(|| panic!("no response in the stream:\n{text}"));
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    try_http(port, method, path, headers, body)
        .unwrap_or_else(|| panic!("no HTTP answer from 127.0.0.1:{port}{path}"))
}

/// [`http`], with `None` when nothing answers (connection refused, cut short).
pub(crate) fn try_http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    // A caller's own Host (a DNS-rebinding test) replaces the loopback one.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Some(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&bytes[..end]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&bytes[start..start + size]);
        bytes = &bytes[start + size + 2..];
    }
    out
}

pub(crate) fn healthz(port: u16, nonce: &str) -> Reply {
    http(port, "GET", &format!("/healthz?challenge={nonce}"), &[], "")
}

pub(crate) fn mcp_post(port: u16, session: Option<&str>, message: &Value) -> Reply {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
        headers.push(("MCP-Protocol-Version", "2025-11-25"));
    }
    http(port, "POST", "/mcp", &headers, &message.to_string())
}

/// A legacy session: initialize + initialized; returns its id.
pub(crate) fn open_session(port: u16) -> String {
    let reply = mcp_post(
        port,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "daemon-test", "version": "1"}}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let session = reply
        .header("mcp-session-id")
        .expect("session id")
        .to_owned();
    let ack = mcp_post(
        port,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(ack.status, 202);
    session
}

/// Starts `script` in `project` through the `workflow` tool of the daemon on `port`, in
/// `session`; returns the run id.
pub(crate) fn start_run_over_http(
    port: u16,
    session: &str,
    project: &Path,
    script: &str,
) -> String {
    let reply = mcp_post(
        port,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "workflow",
            "arguments": {"action": "run", "projectDir": project, "script": script}}}),
    );
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let answer = reply.json();
    answer["result"]["structuredContent"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId: {answer}"))
        .to_owned()
}

/// Waits for a foreground daemon started with `ctx.spawn` to publish its pointer.
/// The daemon's record once the family pointer names it and it says it is the current
/// daemon: the pointer is written just before the daemon takes that state, so a 200 alone
/// may still say `starting`.
pub(crate) fn wait_ready(world: &World) -> DaemonRecord {
    wait_for("the daemon's pointer", DEADLINE, || {
        world.pointer().filter(|record| {
            let reply = healthz(record.port, "x");
            reply.status == 200 && reply.json()["state"] == "current"
        })
    })
}

#[test]
fn a_foreground_daemon_proves_its_identity_and_cleans_up_on_sigterm() {
    let world = World::new();
    let daemon = world.ctx.spawn(&["daemon", "run"]);
    let record = wait_ready(&world);
    assert_eq!(record.pid, daemon.pid());
    assert_eq!(record.env_fingerprint, world.fingerprint());
    assert!(
        world
            .instances()
            .iter()
            .any(|p| p.ends_with(format!("{}.json", daemon.pid())))
    );

    let challenge = Challenge::new(record.port);
    let reply = healthz(record.port, &challenge.nonce);
    assert_eq!(reply.status, 200);
    let body = reply.json();
    verify_identity(&record, &body, &world.key(), &challenge.nonce).expect("a valid proof");
    for field in [
        "version",
        "port",
        "startedAt",
        "state",
        "lameDuck",
        "sessions",
        "activeRuns",
        "inflightRequests",
        "replDrains",
        "controlProtocol",
        "projects",
    ] {
        assert!(body.get(field).is_some(), "healthz lacks {field}: {body}");
    }
    assert_eq!(body["state"], "current");
    // Another key, or an answer to another challenge, does not pass.
    assert_eq!(
        verify_identity(
            &record,
            &body,
            &RunControlKey::from_bytes([7; 32]),
            &challenge.nonce
        ),
        Err(IdentityMismatch::Proof)
    );
    assert_eq!(
        verify_identity(&record, &body, &world.key(), "another-nonce"),
        Err(IdentityMismatch::Proof)
    );
    // Test-only routes are off without AGENTPRISM_TEST_HOOKS.
    assert_eq!(
        http(record.port, "POST", "/debug/evict?session=x", &[], "").status,
        404
    );
    // A non-loopback Origin is refused.
    assert_eq!(
        http(
            record.port,
            "GET",
            "/healthz",
            &[("Origin", "https://evil.example")],
            ""
        )
        .status,
        403
    );

    daemon.signal(Signal::SIGTERM);
    let finished = daemon.finish(DEADLINE);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("exiting: received SIGTERM"),
        "{}",
        finished.stderr
    );
    assert!(world.pointer().is_none());
    assert!(world.instances().is_empty());
}

/// Scenario 8: a foreign listener on the configured port sends the daemon to an ephemeral
/// one, and the pointer says which.
#[test]
fn a_foreign_listener_on_the_port_moves_the_daemon_to_an_ephemeral_port() {
    let foreign = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = foreign.local_addr().unwrap().port();
    let world = World::with(|ctx| ctx.set("AGENTPRISM_DAEMON_PORT", taken.to_string()));
    let record = world.start();
    assert_ne!(record.port, taken);
    assert_eq!(healthz(record.port, "n").status, 200);
    let log = std::fs::read_to_string(world.ctx.state().join("logs/daemon.log")).unwrap();
    assert!(
        log.contains(&format!(
            "port {taken} is held by a process that is not an agentprism daemon"
        )),
        "{log}"
    );
    // `daemon start` again adopts it rather than fighting over the port.
    assert_eq!(world.start().instance_id, record.instance_id);
    drop(foreign);
}

/// `daemon start` twice makes one daemon; `status`, `url`, `stop` and `logs` agree.
#[test]
fn start_twice_makes_one_daemon_and_stop_ends_it() {
    let world = World::new();
    // A descriptor the starter leaks (not close-on-exec), like a host's jobserver pipe.
    let leaked = std::fs::File::create(world.ctx.path("leaked-marker")).unwrap();
    let leaked_fd = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    nix::fcntl::fcntl(
        &leaked,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let first = world.start();
    drop(leaked);
    let inherited: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", first.pid))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .collect();
    assert!(
        !inherited.contains(&world.ctx.path("leaked-marker")),
        "the daemon inherited fd {leaked_fd}: {inherited:?}"
    );
    let again = world.run(&["daemon", "start"]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(again.stderr.contains("already running"), "{}", again.stderr);
    assert_eq!(again.stdout.trim(), first.url);
    assert_eq!(world.daemon_pids(), vec![first.pid as i32]);
    assert_eq!(world.instances().len(), 1);

    // Self-spawned: its own session, cwd $HOME, stdin /dev/null, output in the log.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", first.pid)).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        fields[3],
        first.pid.to_string(),
        "session id = pid after setsid"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/cwd", first.pid)).unwrap(),
        world.ctx.path("home")
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/fd/0", first.pid)).unwrap(),
        Path::new("/dev/null")
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/fd/2", first.pid)).unwrap(),
        world.ctx.state().join("logs/daemon.log")
    );

    let status = world.run(&["daemon", "status", "--json"]);
    assert_eq!(status.code(), 0, "{}", status.stderr);
    let document = status.json();
    assert_eq!(document["running"], true);
    let daemons = document["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), 1, "{document:#}");
    assert_eq!(daemons[0]["role"], "current");
    assert_eq!(daemons[0]["pid"], first.pid);
    assert_eq!(daemons[0]["url"], first.url.as_str());
    assert_eq!(daemons[0]["sessions"], 0);
    assert_eq!(daemons[0]["activeRuns"], 0);

    let url = world.run(&["daemon", "url"]);
    assert_eq!(url.code(), 0, "{}", url.stderr);
    assert!(url.stdout.contains(&format!(
        "claude mcp add --transport http agentprism-workflow {}",
        first.url
    )));
    assert!(url.stdout.contains(&format!(
        "[mcp_servers.agentprism-workflow]\nurl = \"{}\"",
        first.url
    )));
    assert!(url.stdout.contains("\"command\": \"agentprism-workflow\""));

    let stop = world.run(&["daemon", "stop"]);
    assert_eq!(stop.code(), 0, "{}", stop.stderr);
    assert!(process_gone(first.pid as i32));
    assert!(world.pointer().is_none());
    assert!(world.instances().is_empty());
    let stopped = world.run(&["daemon", "status"]);
    assert_ne!(stopped.code(), 0);
    assert!(
        stopped.stdout.contains("no daemon is running"),
        "{}",
        stopped.stdout
    );
    let logs = world.run(&["daemon", "logs"]);
    assert!(logs.stdout.contains("listening on"), "{}", logs.stdout);
    assert!(
        logs.stdout.contains("exiting: received SIGTERM"),
        "{}",
        logs.stdout
    );
    // Nothing to stop is not an error.
    assert_eq!(world.run(&["daemon", "stop"]).code(), 0);
}

/// Cold `daemon start`s racing each other make one daemon (the spawn lock and re-probe).
#[test]
fn concurrent_starts_make_one_daemon() {
    let world = World::new();
    let children: Vec<_> = (0..4)
        .map(|_| {
            world
                .ctx
                .command(&["daemon", "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let urls: Vec<String> = children
        .into_iter()
        .map(|child| {
            let finished = finish(child);
            assert_eq!(finished.code(), 0, "{}", finished.stderr);
            finished.stdout.trim().to_owned()
        })
        .collect();
    assert!(urls.iter().all(|url| *url == urls[0]), "{urls:?}");
    assert_eq!(world.daemon_pids().len(), 1);
    assert_eq!(world.instances().len(), 1);
}
