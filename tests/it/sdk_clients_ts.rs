//! The official TypeScript MCP SDK clients drive a whole workflow through `agentprism serve`,
//! as `sdk_clients.rs` has the Python SDK do: `tests/e2e/ts_client.mjs` runs under the Node 22
//! that `scripts/install-test-deps` installs, with v1 (`@modelcontextprotocol/sdk`, 2025-11-25
//! sessions only) and with v2 (`@modelcontextprotocol/client`) in each of its
//! `versionNegotiation` modes: `legacy` (its default, the 2025-11-25 handshake), `auto` (probes
//! `server/discover` and must settle on 2026-07-28) and pinned to 2026-07-28; each over
//! Streamable HTTP against a server this test starts and over stdio against a server the SDK
//! launches itself.
//!
//! Two clients drive at once, first with the same script and then with one script each. The
//! script checks every step; this test checks on its own, from the `RUN` line each client
//! prints, that all four runs are distinct, that each carries its own client's result, and that
//! in the identical round both clients sent `run` with the same JSON-RPC id and the same
//! arguments. That is the collision a server keying stateless retries by id and arguments
//! would answer with one run for both. Over HTTP the two clients share one
//! server, so such a server would fail the modern modes there; over stdio each client launches its
//! own server and the test checks only that both reach the same run store without mixing.
//!
//! Without the SDKs or Node these tests fail and name the install command; the process
//! handling (HTTP server, deadline, sweeper of processes carrying the test's HOME) is
//! `sdk_clients.rs`'s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::sdk_clients::{
    CLIENT_DEADLINE, HttpServer, Sweeper, path_from_manifest, run_with_deadline,
    wait_until_no_process_has_home,
};
use crate::support::context::{TestContext, agentprism_binary};

#[test]
fn ts_sdk_v1_over_http() {
    drive(Mode::V1, Transport::Http);
}

#[test]
fn ts_sdk_v1_over_stdio() {
    drive(Mode::V1, Transport::Stdio);
}

#[test]
fn ts_sdk_v2_legacy_mode_over_http() {
    drive(Mode::V2Legacy, Transport::Http);
}

#[test]
fn ts_sdk_v2_legacy_mode_over_stdio() {
    drive(Mode::V2Legacy, Transport::Stdio);
}

#[test]
fn ts_sdk_v2_auto_mode_over_http() {
    drive(Mode::V2Auto, Transport::Http);
}

#[test]
fn ts_sdk_v2_auto_mode_over_stdio() {
    drive(Mode::V2Auto, Transport::Stdio);
}

#[test]
fn ts_sdk_v2_pinned_2026_07_28_over_http() {
    drive(Mode::V2Pinned, Transport::Http);
}

#[test]
fn ts_sdk_v2_pinned_2026_07_28_over_stdio() {
    drive(Mode::V2Pinned, Transport::Stdio);
}

/// Which SDK, and for v2 which `versionNegotiation` mode.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `@modelcontextprotocol/sdk` 1.x: the 2025-11-25 handshake and a session.
    V1,
    /// `@modelcontextprotocol/client` 2.x, `mode: 'legacy'`.
    V2Legacy,
    /// v2, `mode: 'auto'`: `server/discover` first.
    V2Auto,
    /// v2, `mode: { pin: '2026-07-28' }`: stateless, no session.
    V2Pinned,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Http,
    Stdio,
}

/// How many clients drive at once; ts_client.mjs's default, passed explicitly.
const CLIENTS: usize = 2;

fn drive(mode: Mode, transport: Transport) {
    let node = path_from_manifest("node", "Node 22 for the TypeScript MCP clients");
    let (flag, sdk_key) = match mode {
        Mode::V1 => ("v1", "ts_sdk_v1"),
        Mode::V2Legacy => ("v2-legacy", "ts_sdk_v2"),
        Mode::V2Auto => ("v2-auto", "ts_sdk_v2"),
        Mode::V2Pinned => ("v2-pinned", "ts_sdk_v2"),
    };
    let sdk = path_from_manifest(sdk_key, "the TypeScript MCP SDK client");
    let context = TestContext::new();
    let home = PathBuf::from(&context.env["HOME"]);
    let _sweeper = Sweeper { home: home.clone() };

    let server = match transport {
        Transport::Http => Some(HttpServer::start(&context)),
        Transport::Stdio => None,
    };
    let binary = agentprism_binary();
    let target: [&str; 2] = match &server {
        Some(server) => ["--http", &server.url],
        None => ["--stdio", binary.to_str().expect("utf-8 binary path")],
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/ts_client.mjs");
    let mut command = Command::new(&node);
    command
        .arg(&script)
        .args(["--mode", flag])
        .arg("--sdk")
        .arg(&sdk)
        .args(target)
        .arg("--project")
        .arg(context.project())
        .args(["--clients", &CLIENTS.to_string()])
        .env_clear()
        .envs(&context.env)
        .current_dir(context.project());
    let started = Instant::now();
    let outcome = run_with_deadline(command, CLIENT_DEADLINE);
    eprintln!(
        "ts {mode:?}/{transport:?}: clients took {:?}",
        started.elapsed()
    );
    let server_log = server.map(HttpServer::stop).unwrap_or_default();
    let describe = super::sdk_clients::check_client(
        &format!("ts client {mode:?} over {transport:?}"),
        &outcome,
        &server_log,
    );

    let runs: Vec<Value> = outcome
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("RUN "))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("RUN line {line}: {e}")))
        .collect();
    let mut run_ids = Vec::new();
    for round in ["identical", "unique"] {
        let mut in_round: Vec<&Value> = runs.iter().filter(|run| run["round"] == round).collect();
        in_round.sort_by_key(|run| run["client"].as_u64());
        assert_eq!(
            in_round.len(),
            CLIENTS,
            "{round} round: want a RUN line per client\n{}",
            describe()
        );
        for (index, run) in in_round.iter().enumerate() {
            let tag = match round {
                "identical" => "same".to_owned(),
                _ => format!("client{index}"),
            };
            assert_eq!(
                run["result"],
                json!({"first": format!("FIRST-{tag}"), "second": "PERMISSION: allow"}),
                "{round} round, client {index}: wrong result\n{}",
                describe()
            );
            run_ids.push(run["runId"].as_str().expect("runId").to_owned());
        }
        if round == "identical" {
            // The precondition for that collision: the same id and arguments from two clients.
            let request_ids: Vec<&Value> =
                in_round.iter().map(|run| &run["runRequestId"]).collect();
            assert!(
                request_ids.windows(2).all(|pair| pair[0] == pair[1]),
                "the clients sent `run` with different JSON-RPC ids {request_ids:?}, so the \
                 identical round no longer tests a collision\n{}",
                describe()
            );
        }
    }
    let mut distinct = run_ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        run_ids.len(),
        "every client must get a run of its own, got {run_ids:?}\n{}",
        describe()
    );

    let leftovers = wait_until_no_process_has_home(&home);
    assert!(
        leftovers.is_empty(),
        "processes left behind: {leftovers:?}\n{}",
        describe()
    );
}
