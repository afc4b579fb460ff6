//! The folder server (`agentprism serve <dir>`, docs/serve.md) driven by the official MCP SDK
//! clients, end to end. The fixture folder `tests/fixtures/serve` (`echo`
//! without agents, `review` with a companion file, `approval` with a checkpoint, `slow` with
//! three mock agent steps) is copied into the test's own temp folder and served over
//! Streamable HTTP (`--http 127.0.0.1:0`, a server this test starts) and over stdio (a server
//! the SDK launches itself), to the Python SDK (`tests/e2e/serve_client.py`) and the
//! TypeScript SDK (`tests/e2e/serve_client.mjs`), each in both protocol eras: the 2025-11-25
//! initialize handshake (Python `mode="legacy"`, TypeScript `@modelcontextprotocol/sdk` 1.x)
//! and the stateless 2026-07-28 form (Python pinned, `@modelcontextprotocol/client` 2.x
//! pinned).
//!
//! Each script checks, in order: the tool list and its `_meta.mhl.run.tool` hint; synchronous
//! calls (a result, the companion file's text reaching the agent, a checkpoint refused with a
//! pointer to `mhl_run_start`); an async run started, polled through its steps, its logs and
//! result read through the tools, the raw `run/status` method, the per-method path and the
//! resources (HTTP); a checkpoint answered through `mhl_run_resume`; a cancel; the list. See the
//! scripts' headers for the steps. The agents are the scripted mock on backend `mock`; its log
//! shows this test what they were asked (the companion file's text, each step's `@mock` line,
//! nothing after the cancelled step).
//!
//! The process handling (deadline, the SDK dependencies from the test-deps manifest, the
//! `N passed, 0 failed` summary, the sweeper of processes carrying the test's HOME) is
//! `sdk_clients.rs`'s; without the SDKs these tests fail and name the install command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::sdk_clients::{
    CLIENT_DEADLINE, HttpServer, Sweeper, check_client, path_from_manifest, run_with_deadline,
    wait_until_no_process_has_home,
};
use crate::support::context::{TestContext, agentprism_binary};

/// The `@mock` line each `slow` step carries in the completed run: long enough that polling
/// sees the run working at a step, short enough to keep the test quick.
const SLOW_STEP: &str = "@mock delay 300";

#[test]
fn python_legacy_era_over_http() {
    drive(Client::Python, Era::Legacy, Transport::Http);
}

#[test]
fn python_legacy_era_over_stdio() {
    drive(Client::Python, Era::Legacy, Transport::Stdio);
}

#[test]
fn python_modern_era_over_http() {
    drive(Client::Python, Era::Modern, Transport::Http);
}

#[test]
fn python_modern_era_over_stdio() {
    drive(Client::Python, Era::Modern, Transport::Stdio);
}

#[test]
fn ts_v1_legacy_era_over_http() {
    drive(Client::TypeScript, Era::Legacy, Transport::Http);
}

#[test]
fn ts_v1_legacy_era_over_stdio() {
    drive(Client::TypeScript, Era::Legacy, Transport::Stdio);
}

#[test]
fn ts_v2_modern_era_over_http() {
    drive(Client::TypeScript, Era::Modern, Transport::Http);
}

#[test]
fn ts_v2_modern_era_over_stdio() {
    drive(Client::TypeScript, Era::Modern, Transport::Stdio);
}

#[derive(Clone, Copy, Debug)]
enum Client {
    Python,
    /// v1 (`@modelcontextprotocol/sdk`) for the legacy era, v2 (`@modelcontextprotocol/client`)
    /// for the modern one.
    TypeScript,
}

#[derive(Clone, Copy, Debug)]
enum Era {
    /// 2025-11-25 through `initialize` and a session.
    Legacy,
    /// Stateless 2026-07-28, per-request `_meta`.
    Modern,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Http,
    Stdio,
}

fn drive(client: Client, era: Era, transport: Transport) {
    let context = TestContext::new();
    let mock_log = context.path("mock-agent.log");
    let context = context.with_mock_backend(json!({"MOCK_ACP_LOG": mock_log}));
    let home = PathBuf::from(&context.env["HOME"]);
    let _sweeper = Sweeper { home: home.clone() };
    let folder = context.path("workflows");
    copy_folder(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve"),
        &folder,
    );
    let folder_text = folder.to_str().expect("utf-8 temp path").to_owned();
    // Never created: the cancelled run's agent waits on it until the cancel stops it.
    let wait_file = context.path("never-created");

    let server = match transport {
        Transport::Http => Some(HttpServer::start_with(
            &context,
            &["serve", &folder_text, "--http", "127.0.0.1:0"],
        )),
        Transport::Stdio => None,
    };
    let mut command = client_command(client, era);
    match &server {
        Some(server) => command.args(["--http", &server.url]),
        None => command
            .arg("--stdio")
            .arg(agentprism_binary())
            .args(["--folder", &folder_text]),
    };
    command
        .arg("--wait-file")
        .arg(&wait_file)
        .args(["--step", SLOW_STEP])
        .env_clear()
        .envs(&context.env)
        // Keep the source tree free of __pycache__ folders.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(context.project());
    let label = format!("{client:?} client, {era:?} era, over {transport:?}");
    let started = Instant::now();
    let outcome = run_with_deadline(command, CLIENT_DEADLINE);
    eprintln!("{label}: client took {:?}", started.elapsed());
    let server_log = server.map(HttpServer::stop).unwrap_or_default();
    let describe = check_client(&label, &outcome, &server_log);
    assert!(
        !wait_file.exists(),
        "nothing may create {}: the cancel test relies on it never appearing",
        wait_file.display()
    );
    // What the agents were asked, in order: the client's steps run one after the other.
    let wait_step = format!("@mock wait_file {}", wait_file.display());
    let expected = [
        "Review the topic below and answer in one line.\n\nTopic: caching".to_owned(),
        format!("{SLOW_STEP}\nGather"),
        format!("{SLOW_STEP}\nAnalyze"),
        format!("{SLOW_STEP}\nPublish"),
        format!("{wait_step}\nGather"),
    ];
    let prompts = prompts_in(&mock_log);
    assert_eq!(
        prompts,
        expected,
        "the agents should have been prompted once per agent call of review (synchronous), \
         the completed slow run and the cancelled one (stopped in its first step)\n{}",
        describe()
    );
    let leftovers = wait_until_no_process_has_home(&home);
    assert!(
        leftovers.is_empty(),
        "processes left behind: {leftovers:?}\n{}",
        describe()
    );
}

/// The interpreter and script of `client` in `era`, with the SDK the manifest names.
fn client_command(client: Client, era: Era) -> Command {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e");
    let era_flag = match era {
        Era::Legacy => "legacy",
        Era::Modern => "modern",
    };
    let mut command = match client {
        Client::Python => {
            let python = path_from_manifest(
                "python",
                "the Python MCP client (a venv with tests/e2e/requirements.txt)",
            );
            let mut command = Command::new(python);
            command.arg(e2e.join("serve_client.py"));
            command
        }
        Client::TypeScript => {
            let node = path_from_manifest("node", "Node 22 for the TypeScript MCP clients");
            let sdk_key = match era {
                Era::Legacy => "ts_sdk_v1",
                Era::Modern => "ts_sdk_v2",
            };
            let sdk = path_from_manifest(sdk_key, "the TypeScript MCP SDK client");
            let mut command = Command::new(node);
            command
                .arg(e2e.join("serve_client.mjs"))
                .arg("--sdk")
                .arg(sdk);
            command
        }
    };
    command.args(["--era", era_flag]);
    command
}

/// The text of every `session/prompt` the mock agents received, in the order they logged them.
fn prompts_in(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("mock agent log line {line:?}: {e}"))
        })
        .filter(|message| message["method"] == "session/prompt")
        .map(|message| {
            message["params"]["prompt"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .collect()
}

/// Copies the fixture folder (plain files and folders only) to `to`.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.expect("fixture entry");
        let kind = entry.file_type().expect("fixture file type");
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_folder(&entry.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("copy {}: {e}", entry.path().display()));
        }
    }
}
