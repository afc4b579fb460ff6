//! Daemon and shim figures of issue 4 (docs/performance-daemon.md): shim start to the
//! `initialize` answer with the daemon running and without one, idle RSS of shim and daemon,
//! daemon RSS after 50 runs, and the shim's proxy overhead per request against direct HTTP.
//! Run with `cargo bench --bench daemon` (release build). Everything happens under a temp
//! HOME with `AGENTPRISM_DAEMON_PORT=0`; every daemon started is killed at the end.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SHIM: &str = env!("CARGO_BIN_EXE_agentprism-workflow");

fn main() {
    let temp = tempfile::tempdir().expect("temp dir");
    let mut daemons = Vec::new();

    let world = World::new(temp.path(), "warm");
    let mut first = world.shim();
    first.initialize();
    let daemon = world.pointer_pid();
    daemons.push(daemon);
    let mut warm = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let mut shim = world.shim();
        shim.request(1, "initialize", initialize_params());
        warm.push(started.elapsed());
        shim.close();
    }
    report("shim start to initialize answer, daemon running", &mut warm);

    let mut cold = Vec::new();
    for round in 0..8 {
        let world = World::new(temp.path(), &format!("cold{round}"));
        let started = Instant::now();
        let mut shim = world.shim();
        shim.request(1, "initialize", initialize_params());
        cold.push(started.elapsed());
        shim.close();
        daemons.push(world.pointer_pid());
    }
    report(
        "shim start to initialize answer, no daemon (spawns it)",
        &mut cold,
    );

    first.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    first.request(2, "tools/list", json!({}));
    settle();
    println!(
        "idle RSS of the shim: {:.1} MiB",
        rss_kib(first.child.id() as i32) as f64 / 1024.0
    );
    let idle = rss_kib(daemon);
    println!("idle RSS of the daemon: {:.1} MiB", idle as f64 / 1024.0);

    // Proxy overhead: the same request through the shim and straight over HTTP.
    let session = first.session.clone();
    let port = world.pointer()["port"].as_u64().unwrap() as u16;
    let mut through_shim = Vec::new();
    let mut direct = Vec::new();
    for round in 0..400 {
        let started = Instant::now();
        first.request(1000 + round, "ping", json!({}));
        through_shim.push(started.elapsed());
        let started = Instant::now();
        direct_ping(port, session.as_deref(), round);
        direct.push(started.elapsed());
    }
    let shim_p50 = percentile(&mut through_shim, 50);
    let direct_p50 = percentile(&mut direct, 50);
    println!(
        "ping p50 through the shim {:.3} ms, direct HTTP {:.3} ms: overhead {:.3} ms",
        ms(shim_p50),
        ms(direct_p50),
        ms(shim_p50.saturating_sub(direct_p50))
    );

    let script = "export const meta = { name: 'bench', description: 'd' };\nreturn 1;\n";
    let mut run_ids = Vec::new();
    for round in 0..50 {
        let answer = first.request(
            5000 + round,
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "run", "projectDir": world.project, "script": script}}),
        );
        let run_id = answer["result"]["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no run id: {answer}"))
            .to_owned();
        run_ids.push(run_id);
    }
    for (index, run_id) in run_ids.iter().enumerate() {
        let id = 7000 + index as i64;
        let answer = first.request(
            id,
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "result", "runId": run_id}}),
        );
        assert!(answer["result"].is_object(), "{answer}");
    }
    settle();
    let after = rss_kib(daemon);
    println!(
        "daemon RSS after 50 runs: {:.1} MiB ({:+.1} MiB against idle)",
        after as f64 / 1024.0,
        (after as f64 - idle as f64) / 1024.0
    );
    first.close();

    for pid in daemons {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

struct World {
    env: Vec<(String, String)>,
    state: PathBuf,
    project: PathBuf,
}

impl World {
    fn new(base: &Path, name: &str) -> World {
        let root = base.join(name);
        let (home, state, project) = (root.join("home"), root.join("state"), root.join("project"));
        for dir in [&home, &state, &project] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let env = vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), home.display().to_string()),
            (
                "AGENTPRISM_PERSISTENCE_ROOT".into(),
                state.display().to_string(),
            ),
            ("AGENTPRISM_DAEMON_PORT".into(), "0".into()),
            ("AGENTPRISM_LOG".into(), "info".into()),
        ];
        World {
            env,
            state,
            project,
        }
    }

    fn shim(&self) -> Shim {
        let mut child = Command::new(SHIM)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.project)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the shim");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Shim {
            child,
            stdin,
            stdout,
            session: None,
        }
    }

    fn pointer(&self) -> Value {
        let dir = self.state.join("daemons");
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && !path.ends_with("run-control-key.json")
            {
                return serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            }
        }
        panic!("no pointer under {}", dir.display());
    }

    fn pointer_pid(&self) -> i32 {
        self.pointer()["pid"].as_i64().unwrap() as i32
    }
}

struct Shim {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    session: Option<String>,
}

impl Shim {
    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap();
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                let mut stderr = String::new();
                let _ = self
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr);
                panic!("the shim closed stdout: {stderr}");
            }
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    fn initialize(&mut self) {
        self.request(0, "initialize", initialize_params());
        // The verbose shim names its session on stderr; the direct client reuses it.
        let mut stderr = BufReader::new(self.child.stderr.take().unwrap());
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            if let Some(rest) = line.trim().strip_prefix("agentprism-workflow: session ") {
                self.session = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
            line.clear();
        }
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    }

    fn close(mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

fn initialize_params() -> Value {
    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
}

/// One `ping` POST over a fresh connection, as the shim makes it; the answer is read up to
/// its Content-Length, not to the server's close, so the figure is the exchange itself.
fn direct_ping(port: u16, session: Option<&str>, id: i64) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\n{session}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = stream.read(&mut buffer).unwrap();
        assert!(
            n > 0,
            "the daemon closed early: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("a Content-Length");
            if body.len() >= length {
                assert!(body.contains("\"result\""), "{text}");
                return;
            }
        }
    }
}

fn settle() {
    // Lets allocator arenas and lazily freed buffers settle before RSS is read.
    std::thread::sleep(Duration::from_millis(500));
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() * p / 100).min(samples.len() - 1)]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn report(what: &str, samples: &mut [Duration]) {
    let p50 = percentile(samples, 50);
    println!(
        "{what}: min {:.1} ms, p50 {:.1} ms, max {:.1} ms ({} runs)",
        ms(samples[0]),
        ms(p50),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}
