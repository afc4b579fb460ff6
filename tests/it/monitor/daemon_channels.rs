//! Channel notifications end to end: a real daemon, legacy sessions over Streamable HTTP,
//! each with its GET stream open, as Claude Code (or the shim on its behalf) holds it. The
//! session that started a run hears its terminal outcome there once, with the documented
//! `meta`; another session hears only its own run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::daemon::{HEADER, World, mcp_post, open_session, start_run_over_http};

/// One session's GET stream, read event by event (chunked transfer, SSE frames).
struct GetStream {
    reader: BufReader<TcpStream>,
    /// Text received and not yet split into events.
    pending: String,
}

impl GetStream {
    fn open(port: u16, session: &str) -> GetStream {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        write!(
            stream,
            "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\
             Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        let mut stream = GetStream {
            reader,
            pending: String::new(),
        };
        // The priming event: once it is here the session's stream is subscribed.
        stream.read_chunk();
        stream
    }

    fn read_chunk(&mut self) {
        let mut size = String::new();
        self.reader
            .read_line(&mut size)
            .expect("the stream stays open");
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        let mut chunk = vec![0; size + 2];
        self.reader.read_exact(&mut chunk).expect("a whole chunk");
        self.pending
            .push_str(&String::from_utf8_lossy(&chunk[..size]));
    }

    /// The params of the next `notifications/claude/channel` on the stream, within a minute
    /// (keep-alive comments keep a silent stream from timing out on its own).
    fn next_channel(&mut self) -> Value {
        let started = std::time::Instant::now();
        loop {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no channel notification within a minute; the stream said: {}",
                self.pending
            );
            while let Some(end) = self.pending.find("\n\n") {
                let event: String = self.pending.drain(..end + 2).collect();
                let message = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok());
                if let Some(message) = message
                    && message["method"] == "notifications/claude/channel"
                {
                    return message["params"].clone();
                }
            }
            self.read_chunk();
        }
    }
}

#[test]
fn a_legacy_http_session_hears_the_end_of_its_own_run_on_its_get_stream() {
    let world = World::new();
    let record = world.start();
    let port = record.port;
    let project = world.ctx.project();
    let first = open_session(port);
    let second = open_session(port);
    let mut first_stream = GetStream::open(port, &first);
    let mut second_stream = GetStream::open(port, &second);

    let run_id = start_run_over_http(
        port,
        &first,
        &project,
        &format!("{HEADER}return await agent('done');"),
    );
    let heard = first_stream.next_channel();
    assert_eq!(heard["meta"]["run_id"], run_id.as_str(), "{heard:#}");
    assert_eq!(heard["meta"]["kind"], "terminal");
    assert_eq!(heard["meta"]["status"], "completed");
    assert_eq!(heard["meta"]["event_id"], "terminal-1-completed");
    let content = heard["content"].as_str().unwrap();
    assert!(content.contains(&run_id), "{content}");
    assert!(content.contains(" Summary: 1 call · "), "{content}");

    // The second session's own run is the first thing it hears: nothing of the first run.
    let own = start_run_over_http(
        port,
        &second,
        &project,
        &format!("{HEADER}return await agent('mine');"),
    );
    let heard = second_stream.next_channel();
    assert_eq!(heard["meta"]["run_id"], own.as_str(), "{heard:#}");
    // And the first session hears nothing of it: its next message is its own next run's.
    // (A request id of its own: the same id in the same session is an exact retry.)
    let again = mcp_post(
        port,
        Some(&first),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "workflow",
            "arguments": {"action": "run", "projectDir": project,
                          "script": format!("{HEADER}return await agent('again');")}}}),
    )
    .json()["result"]["structuredContent"]["runId"]
        .as_str()
        .expect("admitted")
        .to_owned();
    assert_ne!(again, run_id);
    let heard = first_stream.next_channel();
    assert_eq!(heard["meta"]["run_id"], again.as_str(), "{heard:#}");
}
