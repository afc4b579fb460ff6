//! MCP server latency (area `mcp` of `docs/performance.md`): `tools/list`, a `status` lookup
//! and 0-agent run admission over Streamable HTTP, with 1 and 16 concurrent clients, against
//! the release `agentprism serve --http`. Prints one line per figure with the goal beside it.
//!
//! Run with `cargo bench --bench mcp` or `scripts/measure mcp`, after `cargo build --release
//! --bins --examples` (the bench stops with that command when a binary is missing).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

mod support;

use support::figure;

const SAMPLES_PER_CLIENT: usize = 400;

/// A keep-alive HTTP/1.1 connection speaking one MCP session.
struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
    address: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    async fn connect(address: &str) -> Client {
        let stream = TcpStream::connect(address).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (read, write) = stream.into_split();
        let mut client = Client {
            reader: BufReader::new(read),
            writer: write,
            address: address.to_owned(),
            session: None,
            next_id: 1,
        };
        let init = client
            .request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}))
            .await;
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        client.notify("notifications/initialized").await;
        client
    }

    async fn send(&mut self, body: &Value) -> (Vec<(String, String)>, Vec<u8>) {
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.address,
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
            .await
            .expect("write head");
        self.writer
            .write_all(body.as_bytes())
            .await
            .expect("write body");
        let mut headers = Vec::new();
        let mut line = String::new();
        self.reader.read_line(&mut line).await.expect("status line");
        loop {
            line.clear();
            self.reader.read_line(&mut line).await.expect("header");
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((key, value)) = trimmed.split_once(':') {
                headers.push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let mut body = Vec::new();
        if let Some(length) = length {
            body.resize(length, 0);
            self.reader.read_exact(&mut body).await.expect("body");
        } else if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).await.expect("chunk size");
                let size = usize::from_str_radix(line.trim(), 16).expect("chunk size hex");
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).await.expect("chunk");
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        (headers, body)
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (headers, body) = self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        if let Some((_, session)) = headers.iter().find(|(k, _)| k == "mcp-session-id") {
            self.session = Some(session.clone());
        }
        let text = String::from_utf8_lossy(&body);
        // An SSE answer: the response is the last `data:` line.
        let json_text = if text.starts_with('{') {
            text.to_string()
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|l| l.starts_with('{'))
                .unwrap_or("{}")
                .to_owned()
        };
        serde_json::from_str(&json_text).unwrap_or(Value::Null)
    }

    async fn notify(&mut self, method: &str) {
        self.send(&json!({"jsonrpc": "2.0", "method": method}))
            .await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Runs `clients` concurrent clients, each timing `SAMPLES_PER_CLIENT` calls of `method`.
async fn measure(
    address: &str,
    clients: usize,
    method: &'static str,
    params: Value,
) -> Vec<Duration> {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let address = address.to_owned();
        let params = params.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&address).await;
            for _ in 0..20 {
                client.request(method, params.clone()).await;
            }
            let mut samples = Vec::with_capacity(SAMPLES_PER_CLIENT);
            for _ in 0..SAMPLES_PER_CLIENT {
                let started = Instant::now();
                let answer = client.request(method, params.clone()).await;
                samples.push(started.elapsed());
                assert!(answer.get("result").is_some(), "{method} failed: {answer}");
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    all.sort();
    all
}

fn release_binary(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("target/release").join(name);
    if !path.exists() {
        eprintln!(
            "{} is missing: run `cargo build --release --bins --examples` first",
            path.display()
        );
        std::process::exit(2);
    }
    path
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let agentprism = release_binary("agentprism");
    let mock = release_binary("examples/mock_acp_agent");
    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    let mut child = Command::new(&agentprism)
        .args(["serve", "--http", "--port", "0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("AGENTPRISM_PERSISTENCE_ROOT", dir.path().join("state"))
        .env(
            "AGENTPRISM_BACKENDS",
            json!({"mock": {"command": mock}}).to_string(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start agentprism serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("url");
    let _server = Server(child);
    let address = line
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    println!("server: {agentprism:?} at {address}");

    // 0-agent run admission, one client, sequential.
    let mut client = Client::connect(&address).await;
    let script = "export const meta = { name: 'zero', description: 'no agents' };\nreturn 42;";
    let mut admissions = Vec::new();
    let mut run_id = String::new();
    for _ in 0..60 {
        let started = Instant::now();
        let answer = client
            .request("tools/call", json!({"name": "workflow", "arguments": {"action": "run", "projectDir": project, "script": script}}))
            .await;
        admissions.push(started.elapsed());
        run_id = answer
            .pointer("/result/structuredContent/runId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        assert!(!run_id.is_empty(), "run failed: {answer}");
        // Let it finish so the project never holds more than four active runs.
        for _ in 0..200 {
            let status = client
                .request(
                    "tools/call",
                    json!({"name": "workflow", "arguments": {"action": "status", "runId": run_id}}),
                )
                .await;
            if status
                .pointer("/result/structuredContent/status")
                .and_then(Value::as_str)
                == Some("completed")
            {
                break;
            }
        }
    }
    admissions.sort();
    println!(
        "0-agent run admission (1 client, n={}): p50 {} p99 {}   goal p50 < 1 ms",
        admissions.len(),
        micros(percentile(&admissions, 0.5)),
        micros(percentile(&admissions, 0.99))
    );
    figure(
        "mcp",
        "0-agent run admission, 1 client: p50 / p99",
        format!(
            "{} / {}",
            micros(percentile(&admissions, 0.5)),
            micros(percentile(&admissions, 0.99))
        ),
        "p50 < 1 ms",
    );

    for clients in [1, 16] {
        let samples = measure(&address, clients, "tools/list", json!({})).await;
        let plural = if clients == 1 { "" } else { "s" };
        println!(
            "tools/list ({clients} client{plural}, n={}): p50 {} p99 {}   goal p50 < 0.3 ms, p99 < 1 ms",
            samples.len(),
            micros(percentile(&samples, 0.5)),
            micros(percentile(&samples, 0.99))
        );
        figure(
            "mcp",
            &format!("`tools/list`, {clients} client{plural}: p50 / p99"),
            format!(
                "{} / {}",
                micros(percentile(&samples, 0.5)),
                micros(percentile(&samples, 0.99))
            ),
            "p50 < 0.3 ms, p99 < 1 ms",
        );
        let samples = measure(
            &address,
            clients,
            "tools/call",
            json!({"name": "workflow", "arguments": {"action": "status", "runId": run_id}}),
        )
        .await;
        println!(
            "status lookup ({clients} client{plural}, n={}): p50 {} p99 {}   goal p50 < 0.1 ms, p99 < 1 ms",
            samples.len(),
            micros(percentile(&samples, 0.5)),
            micros(percentile(&samples, 0.99))
        );
        figure(
            "mcp",
            &format!("`status` of a completed run, {clients} client{plural}: p50 / p99"),
            format!(
                "{} / {}",
                micros(percentile(&samples, 0.5)),
                micros(percentile(&samples, 0.99))
            ),
            "p50 < 0.1 ms, p99 < 1 ms",
        );
    }
}
