//! A real `agentprism daemon run` as a child process and a keep-alive HTTP/1.1 client
//! speaking one legacy MCP session to it, shared by the status and limit benches; the
//! daemon's own CPU is read from `/proc/<pid>/stat`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::World;

/// How long the daemon may take to write its pointer.
const START_DEADLINE: Duration = Duration::from_secs(30);

pub fn initialize_request() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "status-bench", "version": "1"}}})
}

/// `agentprism daemon run` as a child, killed when dropped.
pub struct Daemon {
    pub child: Child,
    pub pid: i32,
    pub port: u16,
}

impl Daemon {
    pub fn start(world: &World) -> Daemon {
        let child = Command::new(daemon_binary())
            .args(["daemon", "run"])
            .env_clear()
            .envs(world.env.iter().map(|(k, v)| (k, v)))
            // The session keeps it busy; the idle exit must not end a slow batch.
            .env("AGENTPRISM_DAEMON_IDLE_TTL_MS", "0")
            .current_dir(&world.project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start agentprism daemon run");
        let pid = child.id() as i32;
        let started = Instant::now();
        let port = loop {
            if let Some(port) = pointer_port(world, pid) {
                break port;
            }
            assert!(
                started.elapsed() < START_DEADLINE,
                "the daemon wrote no pointer under {} within {START_DEADLINE:?}",
                world.state.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { child, pid, port }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `agentprism` the daemon runs: this build's, or `AGENTPRISM_BENCH_BINARY` (another
/// build's, so two commits can be compared under the same harness and the same load). A
/// relative path is taken from the bench's working directory: the daemon runs in another.
pub fn daemon_binary() -> std::path::PathBuf {
    match std::env::var_os("AGENTPRISM_BENCH_BINARY") {
        Some(path) => std::path::absolute(&path).unwrap_or_else(|_| path.into()),
        None => env!("CARGO_BIN_EXE_agentprism").into(),
    }
}

/// The port in the pointer the daemon `pid` wrote, once it has.
pub fn pointer_port(world: &World, pid: i32) -> Option<u16> {
    let entries = std::fs::read_dir(world.state.join("daemons")).ok()?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") || path.ends_with("run-control-key.json") {
            continue;
        }
        let Ok(record) = serde_json::from_slice::<Value>(&std::fs::read(&path).ok()?) else {
            continue;
        };
        if record["pid"].as_i64() == Some(i64::from(pid)) {
            return record["port"].as_u64().and_then(|p| u16::try_from(p).ok());
        }
    }
    None
}

/// A keep-alive HTTP/1.1 connection speaking one legacy MCP session.
pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
    pub port: u16,
    pub session: Option<String>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the daemon");
        stream.set_nodelay(true).expect("nodelay");
        let mut client = Client {
            reader: BufReader::new(stream.try_clone().expect("clone the stream")),
            writer: stream,
            port,
            session: None,
        };
        let init = client.request(&initialize_request());
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    pub fn request(&mut self, body: &Value) -> Value {
        let body = self.post(body);
        let text = String::from_utf8_lossy(&body);
        // An SSE answer carries the response on its last `data:` line.
        let json_text = if text.starts_with('{') {
            text.to_string()
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|l| l.starts_with('{'))
                .unwrap_or("null")
                .to_owned()
        };
        serde_json::from_str(&json_text).unwrap_or(Value::Null)
    }

    /// One POST; the answer's body, read to its length (or its last chunk).
    pub fn post(&mut self, body: &Value) -> Vec<u8> {
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        if let Some(session) = &self.session {
            head.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            ));
        }
        head.push_str("\r\n");
        self.writer
            .write_all(head.as_bytes())
            .and_then(|()| self.writer.write_all(body.as_bytes()))
            .expect("send a request to the daemon");
        let mut length = None;
        let mut chunked = false;
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header line");
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let Some((name, value)) = trimmed.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.contains("chunked"),
                "mcp-session-id" => self.session = Some(value.to_owned()),
                _ => {}
            }
        }
        let mut answer = Vec::new();
        if let Some(length) = length {
            answer.resize(length, 0);
            self.reader.read_exact(&mut answer).expect("body");
        } else if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).expect("chunk size");
                let size = usize::from_str_radix(line.trim(), 16).expect("chunk size in hex");
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).expect("chunk");
                if size == 0 {
                    break;
                }
                answer.extend_from_slice(&chunk[..size]);
            }
        }
        answer
    }
}

/// `utime + stime` of process `pid`, all its threads, from `/proc/<pid>/stat`.
pub fn pid_cpu(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    // The command name may hold spaces and parentheses; fields restart after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the name: state is field 3, utime 14 and stime 15 (1-based, proc(5)).
    let ticks = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let total = ticks(14) + ticks(15);
    Duration::from_secs_f64(total as f64 / clock_ticks_per_second() as f64)
}
unsafe extern "C" {
    fn sysconf(name: i32) -> i64;
}

/// `_SC_CLK_TCK` on Linux.
pub const SC_CLK_TCK: i32 = 2;

pub fn clock_ticks_per_second() -> i64 {
    // SAFETY: sysconf reads a constant of the system; it takes no pointers.
    let ticks = unsafe { sysconf(SC_CLK_TCK) };
    if ticks > 0 { ticks } else { 100 }
}
