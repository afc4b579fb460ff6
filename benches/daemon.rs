//! Daemon and shim figures (area `daemon` of `docs/performance.md`): shim start to the
//! `initialize` answer with the daemon running and without one, idle RSS of shim and daemon,
//! daemon RSS after 50 runs, and the shim's proxy overhead per request against direct HTTP.
//! Run with `cargo bench --bench daemon` (release build) or `scripts/measure daemon`. Everything happens under a temp
//! HOME with `AGENTPRISM_DAEMON_PORT=0`; every daemon started is killed at the end.

use std::io::{Read, Write};
use std::time::Instant;

use serde_json::json;

mod support;

use support::{World, figure, initialize_params, ms, percentile, report, rss_kib, settle};

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
    figure(
        "daemon",
        "shim start to `initialize` answer, daemon running: p50",
        format!("{:.1} ms", ms(percentile(&mut warm, 50))),
        "< 10 ms",
    );

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
    figure(
        "daemon",
        "shim start to `initialize` answer, no daemon (spawns it): p50",
        format!("{:.1} ms", ms(percentile(&mut cold, 50))),
        "< 60 ms",
    );

    first.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    first.request(2, "tools/list", json!({}));
    settle();
    let shim_rss = rss_kib(first.child.id() as i32) as f64 / 1024.0;
    println!("idle RSS of the shim: {shim_rss:.1} MiB");
    figure(
        "daemon",
        "idle RSS of the shim",
        format!("{shim_rss:.1} MiB"),
        "< 4 MiB",
    );
    let idle = rss_kib(daemon);
    println!("idle RSS of the daemon: {:.1} MiB", idle as f64 / 1024.0);
    figure(
        "daemon",
        "idle RSS of the daemon",
        format!("{:.1} MiB", idle as f64 / 1024.0),
        "< 12 MiB",
    );

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
    figure(
        "daemon",
        "shim proxy overhead per request (`ping` p50 through the shim minus direct HTTP)",
        format!("{:.3} ms", ms(shim_p50.saturating_sub(direct_p50))),
        "< 0.2 ms",
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
    figure(
        "daemon",
        "daemon RSS after 50 small runs, against idle",
        format!("{:+.1} MiB", (after as f64 - idle as f64) / 1024.0),
        "< +2 MiB",
    );
    first.close();

    for pid in daemons {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
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
