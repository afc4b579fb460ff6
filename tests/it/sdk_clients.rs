//! Real SDK clients drive a whole workflow through `agentprism serve`: the official Python MCP
//! SDK (`mcp` 2.x from PyPI) runs `tests/e2e/python_client.py` once per protocol era (the
//! 2025-11-25 initialize handshake and stateless 2026-07-28) and per transport (Streamable
//! HTTP against a server this test starts, stdio against a server the SDK launches itself),
//! and once more per transport in the SDK's default `auto` mode, which probes
//! `server/discover` before choosing an era and must settle on 2026-07-28.
//! The script lists tools, runs a two-call workflow, watches it through `status` and a
//! subscription to its events resource, and reads the result through the tool and the result
//! resource; see its docstring for the steps. Two clients drive at once, first with the same
//! script and then with one script each, and every client must get a run of its own: their
//! JSON-RPC ids start at the same number, so a server that recognised stateless retries by id
//! and arguments would hand both clients one run.
//!
//! The venv comes from `scripts/install-test-deps`, named in the manifest it writes. Without
//! it these tests fail and say how to install it: a skipped client test would read as a pass.
//!
//! Every process carries the test's own HOME, so when a test ends a guard kills whatever still
//! does (the SDK starts the stdio server in a session of its own, out of reach of a process
//! group kill), and a passing test also checks that nothing was left behind.
//! `sdk_clients_ts.rs` drives the TypeScript SDK clients with the same server, deadline and
//! sweeper.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::support::context::{TestContext, agentprism_binary, process_gone};

/// Longest one client script may take. A healthy run takes about a second (most of it Python
/// importing the SDK); the script's own steps give up after 30 s each.
pub(super) const CLIENT_DEADLINE: Duration = Duration::from_secs(150);
/// Longest the HTTP server may take to print its URL, and to exit after SIGTERM.
const SERVER_DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn python_sdk_legacy_era_over_http() {
    drive(Era::Legacy, Transport::Http);
}

#[test]
fn python_sdk_modern_era_over_http() {
    drive(Era::Modern, Transport::Http);
}

#[test]
fn python_sdk_legacy_era_over_stdio() {
    drive(Era::Legacy, Transport::Stdio);
}

#[test]
fn python_sdk_modern_era_over_stdio() {
    drive(Era::Modern, Transport::Stdio);
}

#[test]
fn python_sdk_default_auto_mode_over_http() {
    drive(Era::Auto, Transport::Http);
}

#[test]
fn python_sdk_default_auto_mode_over_stdio() {
    drive(Era::Auto, Transport::Stdio);
}

#[derive(Clone, Copy, Debug)]
enum Era {
    /// 2025-11-25 through `initialize` and a session.
    Legacy,
    /// Stateless 2026-07-28, per-request `_meta`.
    Modern,
    /// The SDK's default: `server/discover` first (on stdio, in the same server process).
    Auto,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Http,
    Stdio,
}

fn drive(era: Era, transport: Transport) {
    let python = python_from_manifest();
    let context = TestContext::new();
    let home = PathBuf::from(&context.env["HOME"]);
    let _sweeper = Sweeper { home: home.clone() };
    let era_flag = match era {
        Era::Legacy => "legacy",
        Era::Modern => "modern",
        Era::Auto => "auto",
    };

    let server = match transport {
        Transport::Http => Some(HttpServer::start(&context)),
        Transport::Stdio => None,
    };
    let binary = agentprism_binary();
    let target: [&str; 2] = match &server {
        Some(server) => ["--http", &server.url],
        None => ["--stdio", binary.to_str().expect("utf-8 binary path")],
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/python_client.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .args(["--era", era_flag])
        .args(target)
        .arg("--project")
        .arg(context.project())
        .env_clear()
        .envs(&context.env)
        // Keep the source tree free of __pycache__ folders.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(context.project());
    let started = Instant::now();
    let outcome = run_with_deadline(command, CLIENT_DEADLINE);
    eprintln!(
        "python {era:?}/{transport:?}: client took {:?}",
        started.elapsed()
    );
    let server_log = server.map(HttpServer::stop).unwrap_or_default();
    let describe = check_client(
        &format!("python client {era:?} over {transport:?}"),
        &outcome,
        &server_log,
    );
    let leftovers = wait_until_no_process_has_home(&home);
    assert!(
        leftovers.is_empty(),
        "processes left behind: {leftovers:?}\n{}",
        describe()
    );
}

/// Asserts a client run exited 0 with a `N passed, 0 failed` summary (N > 0); returns the
/// description (label, status, both streams, the HTTP server's stderr) for later failures.
pub(super) fn check_client(
    label: &str,
    outcome: &ClientOutcome,
    server_log: &str,
) -> impl Fn() -> String + use<> {
    let text = format!(
        "{label}: {}\n--- client stdout\n{}\n--- client stderr\n{}\n--- http server stderr\n{}",
        outcome.status, outcome.stdout, outcome.stderr, server_log
    );
    let describe = move || text.clone();
    assert!(outcome.exit_code == Some(0), "{}", describe());
    let summary = outcome.stdout.lines().last().unwrap_or_default();
    assert!(
        summary.ends_with("passed, 0 failed") && !summary.starts_with("0 passed"),
        "unexpected summary line {summary:?}\n{}",
        describe()
    );
    describe
}

/// The venv's python, from the manifest `scripts/install-test-deps` writes last.
fn python_from_manifest() -> PathBuf {
    path_from_manifest(
        "python",
        "the Python MCP client (a venv with tests/e2e/requirements.txt)",
    )
}

/// The path the manifest `scripts/install-test-deps` writes last gives for `key`; panics
/// naming `what` and the install command when the manifest, the key or the path is missing.
pub(super) fn path_from_manifest(key: &str, what: &str) -> PathBuf {
    let dir = std::env::var_os("AGENTPRISM_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps"));
    let manifest = dir.join("interop-deps.env");
    let missing = |detail: String| -> ! {
        panic!(
            "{what} is missing ({detail}); run `scripts/install-test-deps` \
             (it installs into {}, or $AGENTPRISM_TEST_DEPS)",
            dir.display()
        )
    };
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|error| missing(format!("{}: {error}", manifest.display())));
    let prefix = format!("{key}=");
    let path = text
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(PathBuf::from)
        .unwrap_or_else(|| missing(format!("{} has no {key}", manifest.display())));
    if !path.exists() {
        missing(format!("{} does not exist", path.display()));
    }
    path
}

/// `agentprism serve --http --port 0` in its own process group, stopped with SIGTERM (and the
/// group killed) when the test is done with it.
pub(super) struct HttpServer {
    child: Option<Child>,
    pub(super) url: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl HttpServer {
    pub(super) fn start(context: &TestContext) -> HttpServer {
        HttpServer::start_with(context, &["serve", "--http", "--port", "0"])
    }

    /// Starts `agentprism <args>`, a server that prints its loopback URL as its first line.
    pub(super) fn start_with(context: &TestContext, args: &[&str]) -> HttpServer {
        let mut child = context
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentprism serve --http");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        // The URL is the first stdout line; the reader keeps draining so the server never
        // blocks on a full pipe.
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = sender.send(first);
            }
            for _ in lines {}
        });
        let mut server = HttpServer {
            child: Some(child),
            url: String::new(),
            stderr: Some(stderr),
        };
        match receiver.recv_timeout(SERVER_DEADLINE) {
            Ok(line) if line.starts_with("http://127.0.0.1:") && line.ends_with("/mcp") => {
                server.url = line;
                server
            }
            other => {
                let log = server.stop();
                panic!(
                    "agentprism serve --http printed no URL within {SERVER_DEADLINE:?} \
                     (first line: {other:?}); stderr:\n{log}"
                )
            }
        }
    }

    /// SIGTERM, then wait for a clean exit within the deadline (SIGKILL to the group past it);
    /// returns what the server wrote to stderr.
    pub(super) fn stop(mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return String::new();
        };
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let started = Instant::now();
        let mut note = String::new();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                if !status.success() {
                    note = format!("\n(server exited with {status} after SIGTERM)");
                }
                break;
            }
            if started.elapsed() > SERVER_DEADLINE {
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = child.wait();
                note = format!("\n(server ignored SIGTERM for {SERVER_DEADLINE:?}; killed)");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Agents live in their own process groups; the sweeper takes care of any stragglers.
        let _ = killpg(pid, Signal::SIGKILL);
        let log = self
            .stderr
            .take()
            .map(|handle| handle.join().unwrap_or_default())
            .unwrap_or_default();
        log + &note
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

pub(super) struct ClientOutcome {
    pub(super) exit_code: Option<i32>,
    pub(super) status: String,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// Runs `command` in its own process group; past the deadline the group is killed and the
/// outcome says so.
pub(super) fn run_with_deadline(mut command: Command, deadline: Duration) -> ClientOutcome {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|error| panic!("spawn {command:?}: {error}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let started = Instant::now();
    let (exit_code, status) = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break (status.code(), status.to_string());
        }
        if started.elapsed() > deadline {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
            break (None, format!("killed after the {deadline:?} deadline"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ClientOutcome {
        exit_code,
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Kills every process still carrying the test's HOME when the test ends, pass or fail.
pub(super) struct Sweeper {
    pub(super) home: PathBuf,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        for pid in processes_with_home(&self.home) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Gives the stdio server and the agents a moment to exit after their client is gone; returns
/// whatever is still running past the deadline.
pub(super) fn wait_until_no_process_has_home(home: &Path) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let left = processes_with_home(home);
        if left.is_empty() || started.elapsed() > SERVER_DEADLINE {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Live processes whose environment has `HOME=<home>`.
fn processes_with_home(home: &Path) -> Vec<i32> {
    let wanted = format!("HOME={}", home.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        })
        .filter(|pid| !process_gone(*pid))
        .collect()
}
