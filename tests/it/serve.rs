//! The folder server (`agentprism serve <dir>`, docs/serve.md) through the real binary: a
//! [`Served`] process over loopback HTTP (its process group killed when the test is done
//! with it), driven by a small blocking HTTP/1.1 client ([`Client`]) in both protocol eras.
//! The areas: run ownership (`ownership`), `--state-dir` durability across a `kill -9`
//! (`durability`), the HTTP guards and the argument cap (`guards`), start-up errors
//! (`startup`), and synchronous calls, eras and terminal runs (`sync_calls`). The SDK clients
//! are tested in `sdk_clients*.rs`.

mod durability;
mod guards;
mod ownership;
pub(crate) mod queue;
mod startup;
mod sync_calls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::context::{DEADLINE, TestContext};

/// The folder the other engineers' serve tests use: echo, review (a companion file), slow,
/// and gates/approval (a checkpoint).
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve")
}

/// This module's own workflows.
pub fn extra_fixtures(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/serve-extra")
        .join(name)
}

/// Copies `from` (a fixture folder) to `relative` in the test's temp dir, so the runs' `cwd`
/// is private to the test; returns the copy.
pub fn copy_folder(ctx: &TestContext, from: &Path, relative: &str) -> PathBuf {
    let to = ctx.path(relative);
    copy_tree(from, &to);
    to
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read fixture folder") {
        let entry = entry.expect("fixture entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy fixture");
        }
    }
}

/// A running `agentprism serve <dir> --http ...`: its address, and its stderr collected as it
/// comes. Dropping it kills its process group.
pub struct Served {
    child: Option<Child>,
    pub address: SocketAddr,
    /// Joined once the process is gone (its stderr closes then).
    stderr: Option<JoinHandle<String>>,
}

/// What a stopped server left.
pub struct Stopped {
    pub status: ExitStatus,
    pub stderr: String,
}

impl Served {
    /// Serves `folder` on 127.0.0.1 (a free port) with `extra` flags, and waits for the URL it
    /// prints once listening.
    pub fn start(ctx: &TestContext, folder: &Path, extra: &[&str]) -> Served {
        Served::start_on(ctx, folder, "127.0.0.1:0", extra)
    }

    pub fn start_on(ctx: &TestContext, folder: &Path, bind: &str, extra: &[&str]) -> Served {
        let folder = folder.to_str().expect("utf-8 path");
        let mut args = vec!["serve", folder, "--http", bind];
        args.extend_from_slice(extra);
        let mut child = ctx
            .command(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentprism serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let (sender, receiver) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut served = Served {
            child: Some(child),
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            stderr: Some(stderr),
        };
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            match receiver.recv_timeout(left) {
                Ok(line) => {
                    if let Some(address) = line
                        .strip_prefix("http://")
                        .and_then(|rest| rest.strip_suffix("/mcp"))
                    {
                        served.address = address.parse().expect("a socket address");
                        return served;
                    }
                }
                Err(_) => {
                    let stopped = served.kill();
                    panic!(
                        "the server printed no URL ({:?}); stderr:\n{}",
                        stopped.status, stopped.stderr
                    );
                }
            }
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `kill -9` of the whole process group, then its stderr.
    pub fn kill(&mut self) -> Stopped {
        let mut child = self.child.take().expect("running");
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let status = child.wait().expect("wait for the server");
        Stopped {
            status,
            stderr: self.stderr.take().map(join_text).unwrap_or_default(),
        }
    }

    /// SIGTERM (a graceful shutdown) and its exit within the deadline.
    pub fn stop(mut self) -> Stopped {
        let mut child = self.child.take().expect("running");
        let _ = nix::sys::signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > DEADLINE {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                panic!("the server did not stop within {DEADLINE:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        Stopped {
            status,
            stderr: self.stderr.take().map(join_text).unwrap_or_default(),
        }
    }

    /// A legacy (initialize) session with `headers` on every request.
    pub fn session(&self, headers: &[(&str, &str)]) -> Client {
        Client::legacy(self.address, headers)
    }

    /// A stateless (2026-07-28) caller.
    pub fn stateless(&self) -> Client {
        Client::stateless(self.address, &[])
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

fn join_text(handle: JoinHandle<String>) -> String {
    handle.join().unwrap_or_default()
}

/// Runs `agentprism serve <folder> extra...` that is expected to refuse to start.
pub fn serve_refused(ctx: &TestContext, folder: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["serve", folder.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let finished = ctx.run(&args);
    (finished.code(), finished.stderr)
}

/// One HTTP response, read to its end (every request says `Connection: close`).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body with any chunked framing removed.
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The JSON-RPC response's text: the body, or the SSE `data:` that carries the
    /// response when the answer was streamed (progress notifications came first).
    pub fn message_text(&self) -> String {
        let streamed = self
            .header("content-type")
            .is_some_and(|kind| kind.contains("text/event-stream"));
        if !streamed {
            return self.body.clone();
        }
        self.body
            .lines()
            .rev()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .find(|data| {
                serde_json::from_str::<Value>(data).is_ok_and(|message| {
                    message.get("result").is_some() || message.get("error").is_some()
                })
            })
            .unwrap_or_else(|| panic!("no response in the stream:\n{}", self.body))
            .to_owned()
    }

    /// Every JSON-RPC message an SSE answer carried, in order (notifications first).
    pub fn streamed(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    }

    pub fn json(&self) -> Value {
        let text = self.message_text();
        serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("not JSON ({error}), status {}: {text}", self.status))
    }
}

/// Sends one request to `address` and reads the whole answer within the deadline.
pub fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(address).expect("connect to the server");
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("read timeout");
    stream
        .set_write_timeout(Some(DEADLINE))
        .expect("write timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream
        .write_all(head.as_bytes())
        .expect("write the request head");
    // The server may answer (413) before reading everything; a failed write is fine then.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    if let Err(error) = stream.read_to_end(&mut raw) {
        // A reset after a complete early answer (413) still leaves the answer readable.
        assert!(!raw.is_empty(), "reading the answer failed: {error}");
    }
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let end = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(key, value)| key == "transfer-encoding" && value.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8(body).expect("a UTF-8 body"),
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|window| window == b"\r\n") else {
            return body;
        };
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return body;
        }
        let start = line_end + 2;
        body.extend_from_slice(&rest[start..start + size]);
        rest = &rest[(start + size + 2).min(rest.len())..];
    }
}

/// The `_meta` of a stateless (2026-07-28) request.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// Distinct JSON-RPC ids across every client of the test binary, so two answers compared
/// byte for byte differ in their id only where the test normalises it.
static NEXT_ID: AtomicU64 = AtomicU64::new(1000);

/// A JSON-RPC caller of one server: a legacy session (`Mcp-Session-Id`) or stateless.
pub struct Client {
    pub address: SocketAddr,
    /// The legacy session; `None` for a stateless caller.
    pub session: Option<String>,
    /// Sent with every request (`Authorization`, a principal header).
    headers: Vec<(String, String)>,
}

/// One answer: the reply and the id the request carried.
pub struct Answer {
    pub reply: Reply,
    pub id: u64,
}

impl Answer {
    /// The response's text with its JSON-RPC id replaced by 0, for byte-for-byte comparison.
    pub fn normalised(&self) -> String {
        let text = self.reply.message_text();
        let id = format!("\"id\":{}", self.id);
        assert_eq!(text.matches(&id).count(), 1, "one {id} in {text}");
        text.replacen(&id, "\"id\":0", 1)
    }

    pub fn json(&self) -> Value {
        self.reply.json()
    }

    /// The `result`, asserting there is one.
    pub fn result(&self) -> Value {
        let message = self.json();
        assert!(
            message.get("error").is_none(),
            "an error answer (status {}): {message}",
            self.reply.status
        );
        message["result"].clone()
    }
}

impl Client {
    /// `initialize` + `notifications/initialized` with `headers` on both.
    pub fn legacy(address: SocketAddr, headers: &[(&str, &str)]) -> Client {
        let mut client = Client {
            address,
            session: None,
            headers: owned(headers),
        };
        let answer = client.send(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "serve-it", "version": "1"}}),
        );
        assert_eq!(answer.reply.status, 200, "initialize: {:?}", answer.reply);
        let session = answer
            .reply
            .header("mcp-session-id")
            .expect("initialize answers a session id")
            .to_owned();
        client.session = Some(session);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = client.post("/mcp", &[], note.to_string().as_bytes());
        assert_eq!(reply.status, 202, "notifications/initialized: {reply:?}");
        client
    }

    pub fn stateless(address: SocketAddr, headers: &[(&str, &str)]) -> Client {
        Client {
            address,
            session: None,
            headers: owned(headers),
        }
    }

    /// POSTs `body` to `path` with this client's headers (and session) plus `extra`.
    pub fn post(&self, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Reply {
        let mut headers: Vec<(&str, &str)> = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id", session));
            headers.push(("MCP-Protocol-Version", "2025-11-25"));
        }
        headers.extend(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        headers.extend_from_slice(extra);
        http(self.address, "POST", path, &headers, body)
    }

    /// The request `method` with `params` on `/mcp`; a stateless client adds the `_meta` and
    /// the 2026-07-28 headers.
    pub fn send(&self, method: &str, params: Value) -> Answer {
        self.send_to("/mcp", method, params)
    }

    /// As [`Client::send`], to another path (`/mcp/run/status`).
    pub fn send_to(&self, path: &str, method: &str, mut params: Value) -> Answer {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let stateless = self.session.is_none() && method != "initialize";
        let mut extra: Vec<(String, String)> = Vec::new();
        if stateless {
            params["_meta"] = modern_meta();
            extra.push(("MCP-Protocol-Version".into(), "2026-07-28".into()));
            extra.push(("Mcp-Method".into(), method.into()));
            let named = match method {
                "tools/call" => params["name"].as_str(),
                "resources/read" => params["uri"].as_str(),
                _ => None,
            };
            if let Some(name) = named {
                extra.push(("Mcp-Name".into(), name.to_owned()));
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let reply = self.post(path, &extra, body.to_string().as_bytes());
        Answer { reply, id }
    }

    /// A `run/*` method's bare answer, asserting success.
    pub fn method(&self, method: &str, params: Value) -> Value {
        self.send(method, params).result()
    }

    /// `tools/call`: the tool result (which may be a tool error).
    pub fn tool(&self, name: &str, arguments: Value) -> Value {
        self.send("tools/call", json!({"name": name, "arguments": arguments}))
            .result()
    }

    /// `run/start` of `name`: the runId.
    pub fn start(&self, name: &str, arguments: Value) -> String {
        let view = self.method("run/start", json!({"name": name, "arguments": arguments}));
        view["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no runId in {view}"))
            .to_owned()
    }

    pub fn status(&self, run_id: &str) -> Value {
        self.method("run/status", json!({"runId": run_id}))
    }

    /// Polls `run/status` until `done` holds, within the deadline.
    pub fn poll(&self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let view = self.status(run_id);
            if done(&view) {
                return view;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "run {run_id} never became {what}; last status: {view}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls until the run's state is `state`.
    pub fn wait_state(&self, run_id: &str, state: &str) -> Value {
        self.poll(run_id, state, |view| view["state"] == state)
    }
}

fn owned(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Waits until `done` holds, checking every 20 ms, within the deadline.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A made-up id shaped like `real` (same head and length) that names no run.
pub fn made_up_id(real: &str) -> String {
    let (head, tail) = real.split_once('-').expect("a run id");
    let fake_tail = if tail.chars().all(|c| c == 'z') {
        "y".repeat(tail.len())
    } else {
        "z".repeat(tail.len())
    };
    format!("{head}-{fake_tail}")
}
